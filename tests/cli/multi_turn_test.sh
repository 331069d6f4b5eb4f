#!/usr/bin/env bash
# Multi-turn environments through `fp8rl train` (docs/tasks.md): with observations in the
# sequences, generator and trainer agree exactly (token_mult_prob_error 1 at every step) for the
# bf16, fp8-e2e and fp8-e2e-kv presets; an environment's reward replaces task.reward's; a
# misbehaving environment stops the run naming the worker and the request, keeping the last
# checkpoint, leaving no process. Usage: multi_turn_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-multi-turn.XXXXXX)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

env_plugin="$src/tests/tasks/plugins/echo_environment.py"
tiny=(model.checkpoint=null model.preset=tiny model.max_seq_len=40 task.arithmetic.min_operand_digits=1
      task.arithmetic.max_operand_digits=1 task.arithmetic.operators=+ task.arithmetic.val_size=8
      task.arithmetic.train_size=200 eval.max_examples=8 generation.max_new_tokens=30 grpo.num_prompts_per_step=2
      grpo.num_generations_per_prompt=4 policy.train_global_batch_size=8 policy.train_micro_batch_size=8
      grpo.val_period=0 grpo.max_num_steps=3 checkpointing.save_period=1 "task.environment.stop=[5, 7]")

for preset in bf16 fp8-e2e fp8-e2e-kv; do
  "$bin" train "$src/recipes/grpo-$preset.yaml" "${tiny[@]}" "task.environment.command=[python3, $env_plugin]" \
    logger.log_dir="$work/$preset" > /dev/null
  if /usr/bin/python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3
for j in lines:
    assert j["token_mult_prob_error"] == 1.0, j["token_mult_prob_error"]
    assert j["gen_kl_error"] == 0.0, j["gen_kl_error"]
assert sum(j["observation_tokens_mean"] for j in lines) > 1 and sum(j["env_turns_mean"] for j in lines) > 1
' "$work/$preset/metrics.jsonl"; then
    pass "$preset: observations in the sequences, token_mult_prob_error exactly 1 at every step"
  else
    fail "$preset: the multi-turn run's metrics"; cut -c1-300 "$work/$preset/metrics.jsonl"
  fi
done
# The environment's reward of 0.5 (even samples whose second turn came) replaces task.reward's.
if grep -q '"reward_mean":0\.[0-9]*[1-9]' "$work/bf16/metrics.jsonl"; then
  pass "an environment's reward with done replaces task.reward's"
else
  fail "no environment reward in reward_mean"; grep -o '"reward_mean":[0-9.]*' "$work/bf16/metrics.jsonl"
fi

# misbehave NAME MODE PATTERN: at turn 2 of step 2: exit 1, the message, the step-1 checkpoint.
misbehave() {
  local name=$1 mode=$2 pattern=$3 status=0
  rm -rf "$work/run"
  timeout 120 "$bin" train "$src/recipes/grpo-bf16.yaml" "${tiny[@]}" logger.log_dir="$work/run" \
    "task.environment.command=[python3, $env_plugin, $mode]" > /dev/null 2> "$work/err" || status=$?
  if [ "$status" -eq 1 ] && grep -qE -- "$pattern" "$work/err" && grep -q '"step": 1' "$work/run/checkpoint/trainer_state.json" &&
     ! pgrep -f "echo_environment.py $mode" > /dev/null; then
    pass "$name"
  else
    fail "$name: exit $status"; cat "$work/err"
  fi
}
misbehave "an environment that crashes" crash \
  "environment worker [01] \(pid [0-9]+, \`python3 .*echo_environment.py crash\`\), request 'step2/p[01]/g[0-3]/t2': exited with status 1 before answering; its stderr ends with:"
misbehave "a reply without observation or done" neither \
  "request 'step2/p[01]/g[0-3]/t2': the reply needs a string \"observation\" or \"done\": true"
misbehave "an observation the vocabulary cannot encode" unencodable \
  "request 'step2/p[01]/g[0-3]/t2': its observation cannot be encoded: character tokenizer: .* is not in the vocabulary"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "multi-turn runs agree exactly and fail cleanly"
