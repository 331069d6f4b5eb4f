#!/usr/bin/env bash
# `fp8rl generate --json` and `fp8rl score` (docs/generation.md, "Machine-readable output"): the
# schemas, and the round trip: score over generate's ids gives its log-probs bit for bit, under
# the generator and (where the recipe makes them agree) under the trainer, for the BF16, FP8 and
# FP8-KV presets, a Mixture-of-Experts model, and truncated sampling. Bad input lines are errors
# naming the file and the line. Usage: generate_score_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-generate-score.XXXXXX)
trap 'rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

tiny=(model.checkpoint=null model.max_seq_len=16 task.arithmetic.min_operand_digits=1
      task.arithmetic.max_operand_digits=1 task.arithmetic.operators=+ task.arithmetic.val_size=8
      task.arithmetic.train_size=200 eval.max_examples=8 generation.max_new_tokens=6 grpo.num_prompts_per_step=2
      grpo.num_generations_per_prompt=4 policy.train_global_batch_size=8 policy.train_micro_batch_size=8
      grpo.val_period=0 grpo.max_num_steps=2)
# same_logprobs A B: the "logprobs" of each line of A and B are the same float32 values.
same_logprobs() { /usr/bin/python3 -c '
import json, struct, sys
a = [json.loads(l)["logprobs"] for l in open(sys.argv[1])]
b = [json.loads(l)["logprobs"] for l in open(sys.argv[2])]
f32 = lambda xs: [struct.pack("<f", x) for x in xs]
sys.exit(0 if len(a) == len(b) and all(f32(x) == f32(y) for x, y in zip(a, b)) else 1)' "$1" "$2"; }

# round_trip NAME RECIPE PRESET TRAINER_TOO [generation flags...]
round_trip() {
  local name=$1 recipe=$2 preset=$3 trainer=$4
  shift 4
  local run=$work/$name
  "$bin" train "$src/recipes/$recipe" "${tiny[@]}" model.preset="$preset" logger.log_dir="$run" > /dev/null
  local g=("--recipe" "$run/config.yaml" "--checkpoint" "$run/checkpoint" "$@")
  "$bin" generate "${g[@]}" --prompt 3+4= -n 6 --seed 5 --json > "$run/gen.jsonl" 2> /dev/null
  "$bin" score "${g[@]}" "$run/gen.jsonl" > "$run/score.jsonl" 2> /dev/null
  if same_logprobs "$run/gen.jsonl" "$run/score.jsonl"; then
    pass "$name: score over generate --json's ids gives its log-probs bit for bit"
  else
    fail "$name: score differs from generate"; paste -d '\n' "$run/gen.jsonl" "$run/score.jsonl" | head -4
  fi
  if [ "$trainer" = yes ]; then
    "$bin" score "${g[@]}" --trainer "$run/gen.jsonl" > "$run/trainer.jsonl" 2> /dev/null
    if same_logprobs "$run/gen.jsonl" "$run/trainer.jsonl"; then
      pass "$name: score --trainer gives the generator's log-probs bit for bit"
    else
      fail "$name: score --trainer differs from the generator"
    fi
  fi
}
round_trip bf16 grpo-bf16.yaml tiny yes
round_trip fp8-e2e grpo-fp8-e2e.yaml tiny yes
round_trip fp8-e2e-kv grpo-fp8-e2e-kv.yaml tiny yes
round_trip moe grpo-moe-fp8-e2e.yaml tiny-moe yes
round_trip truncated grpo-fp8-e2e.yaml tiny no --temperature 0.7 --top-k 5 --top-p 0.9

# -- the schema of generate --json ----------------------------------------------------------------
if /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    assert set(j) == {"prompt_ids", "response_ids", "text", "logprobs", "finish_reason"}, j.keys()
    assert j["prompt_ids"][0] == 1 and len(j["logprobs"]) == len(j["response_ids"]) >= 1
    assert j["finish_reason"] in ("eos", "length")
    assert (j["finish_reason"] == "eos") == (j["response_ids"][-1] == 2)
    assert all(isinstance(i, int) for i in j["prompt_ids"] + j["response_ids"])' "$work/bf16/gen.jsonl"; then
  pass "generate --json: prompt_ids, response_ids, text, logprobs, finish_reason on each line"
else
  fail "generate --json's schema"; head -2 "$work/bf16/gen.jsonl"
fi
"$bin" generate --checkpoint "$work/moe/checkpoint" --prompt 3+4= -n 2 --max-new-tokens 6 --json --experts > "$work/experts.jsonl" 2> /dev/null
if /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    read = len(j["prompt_ids"]) + len(j["response_ids"]) - 1
    assert len(j["experts"]) == read, (len(j["experts"]), read)
    assert all(len(layer) == 2 and all(isinstance(e, int) for e in layer) for pos in j["experts"] for layer in pos)' "$work/experts.jsonl"; then
  pass "generate --json --experts: [position][MoE layer][k] for every position the model read"
else
  fail "generate --experts"; head -c 400 "$work/experts.jsonl"
fi

# -- text lines, and bad lines --------------------------------------------------------------------
printf '{"prompt": "3+4=", "response": "7"}\n' > "$work/text.jsonl"
if "$bin" score --checkpoint "$work/bf16/checkpoint" "$work/text.jsonl" 2> /dev/null | grep -q '"num_tokens":1'; then
  pass "score takes text lines (the prompt framed, the response encoded as an answer)"
else
  fail "score on a text line"
fi
expect_error() {
  local name=$1 pattern=$2 status=0
  printf '%s\n' "$3" > "$work/bad.jsonl"
  "$bin" score --checkpoint "$work/bf16/checkpoint" "$work/bad.jsonl" > /dev/null 2> "$work/err" || status=$?
  if [ "$status" -eq 1 ] && grep -qE -- "$pattern" "$work/err"; then pass "$name"; else fail "$name: exit $status"; cat "$work/err"; fi
}
expect_error "a line that is not JSON" "score input '.*bad.jsonl' line 2: not a JSON object" $'{"prompt": "1+1=", "response": "2"}\nnot json'
expect_error "a token id outside the vocabulary" "line 1: \"response_ids\" holds 500, not a token id in \\[0, 99\\)" '{"prompt_ids": [1, 5], "response_ids": [500]}'
expect_error "a line longer than the model" "line 1: 2 prompt \\+ 20 response tokens exceed the model's max_seq_len 16" \
  '{"prompt_ids": [1, 5], "response_ids": [5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5]}'
expect_error "neither form" "line 1: expected \\{\"prompt\": text, \"response\": text\\}" '{"prompt": "1+1="}'

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "generate --json and score agree"
