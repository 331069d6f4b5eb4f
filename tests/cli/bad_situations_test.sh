#!/usr/bin/env bash
# No silent loss: each situation below once ended with exit 0 and lost or corrupted something, or
# hung, or was killed by the kernel. Each must now end with exit 1 and an error in the user's
# words (never the internal `check failed` form), or do the safe thing, and leave every saved run
# intact. Usage: bad_situations_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-bad-situations.XXXXXX)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

tiny=(model.checkpoint=null model.preset=tiny model.max_seq_len=16 task.arithmetic.min_operand_digits=1 task.arithmetic.max_operand_digits=1
      task.arithmetic.operators=+ task.arithmetic.val_size=8 task.arithmetic.train_size=200 eval.max_examples=8
      generation.max_new_tokens=4 grpo.num_prompts_per_step=2 grpo.num_generations_per_prompt=4
      policy.train_global_batch_size=8 policy.train_micro_batch_size=8 grpo.val_period=0)
train=("$bin" train "$src/recipes/grpo-bf16.yaml" "${tiny[@]}")

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# expect_error NAME PATTERN COMMAND...: exit status 1, stderr matching PATTERN, no internal check form.
expect_error() {
  local name=$1 pattern=$2 status=0
  shift 2
  timeout 60 "$@" > "$work/out" 2> "$work/err" || status=$?
  if [ "$status" -ne 1 ]; then
    fail "$name: exit status $status, expected 1"; tail -n 3 "$work/err"
  elif ! grep -qE -- "$pattern" "$work/err"; then
    fail "$name: stderr does not match '$pattern'"; tail -n 3 "$work/err"
  elif grep -q "check failed" "$work/err"; then
    fail "$name: the error is in the internal 'check failed' form"; tail -n 3 "$work/err"
  else
    pass "$name"
  fi
}

# A finished reference run: its checkpoint and metrics are what the later rows compare with.
"${train[@]}" grpo.max_num_steps=4 checkpointing.save_period=2 logger.log_dir="$work/ref" > /dev/null
steps() { grep -c '"step"' "$1/metrics.jsonl"; }

# -- a full disk while writing metrics.jsonl: the run stops; --resume restores every line -------
if command -v strace > /dev/null; then
  status=0
  strace -qq -f -o /dev/null -P "$work/enospc/metrics.jsonl" -e trace=write -e inject=write:error=ENOSPC:when=3 \
    "$bin" train "$src/recipes/grpo-bf16.yaml" "${tiny[@]}" grpo.max_num_steps=4 checkpointing.save_period=2 \
    logger.log_dir="$work/enospc" > /dev/null 2> "$work/err" || status=$?
  if [ "$status" -eq 1 ] && grep -q "metrics.jsonl.*No space left on device" "$work/err"; then
    "${train[@]}" grpo.max_num_steps=4 checkpointing.save_period=2 logger.log_dir="$work/enospc" --resume > /dev/null
    if [ "$(steps "$work/enospc")" -eq 4 ] && cmp -s "$work/enospc/checkpoint/model.safetensors" "$work/ref/checkpoint/model.safetensors"; then
      pass "ENOSPC on metrics.jsonl: exit 1 naming the file; --resume restores all 4 step lines and the same weights"
    else
      fail "ENOSPC on metrics.jsonl: after --resume, $(steps "$work/enospc") step lines or different weights"
    fi
  else
    fail "ENOSPC on metrics.jsonl: exit status $status"; tail -n 3 "$work/err"
  fi
else
  echo "skip: ENOSPC on metrics.jsonl (strace is not installed: apt-get install strace)"
fi

# -- two jobs on one run directory -----------------------------------------------------------------
"$bin" train "$src/recipes/grpo-bf16.yaml" "${tiny[@]}" grpo.max_num_steps=10000 logger.log_dir="$work/busy" > /dev/null 2>&1 &
busy=$!
for _ in $(seq 100); do [ -s "$work/busy/metrics.jsonl" ] && break; sleep 0.2; done
expect_error "a second train on a run directory in use" "in use by process $busy" "${train[@]}" logger.log_dir="$work/busy" --resume
kill $busy; wait $busy 2> /dev/null || true

# -- export into its source, or over an existing directory ------------------------------------------
cp -r "$work/ref/checkpoint" "$work/ckpt"
sum_before=$(cat "$work/ckpt"/* | md5sum)
expect_error "export A A" "is the source" "$bin" export "$work/ckpt" "$work/ckpt"
expect_error "export into the directory holding its source" "contains the source" "$bin" export "$work/ckpt" "$work"
mkdir "$work/other" && echo keep > "$work/other/notes.txt"
expect_error "export into an existing non-empty directory" "not empty; pass --force" "$bin" export "$work/ckpt" "$work/other"
[ "$(cat "$work/ckpt"/* | md5sum)" = "$sum_before" ] && [ -f "$work/other/notes.txt" ] &&
  pass "the refused exports left the source and the target as they were" || fail "a refused export changed a directory"
"$bin" export "$work/ckpt" "$work/other" --force > /dev/null && [ ! -e "$work/other/notes.txt" ] &&
  [ -f "$work/other/model.safetensors" ] && pass "export --force replaces the directory" || fail "export --force"

# -- a config.json or tokenizer.json that would exhaust memory --------------------------------------
bad_config() {  # bad_config NAME KEY VALUE: a copy of the checkpoint with config.json[KEY] = VALUE
  rm -rf "$work/$1" && cp -r "$work/ckpt" "$work/$1"
  /usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,"w"))' \
    "$work/$1/config.json" "$2" "$3"
}
bad_config layers num_hidden_layers 100000
expect_error "num_hidden_layers: 100000" "num_hidden_layers' is 100000, expected 1 to" "$bin" export "$work/layers" "$work/x"
bad_config layers40 num_hidden_layers 40
expect_error "num_hidden_layers: 40 for weights of 2 layers" "missing tensor 'model.layers.2" "$bin" export "$work/layers40" "$work/x"
bad_config hidden hidden_size 1099511627776
expect_error "hidden_size: 2^40" "hidden_size' is 1099511627776" "$bin" generate --checkpoint "$work/hidden" --prompt 1+1=
cat > "$work/tok.py" << 'EOF'
import json, sys
split = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
tok = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                                                             {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                 "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": {"a": 0, "b": 1}, "merges": []},
       "added_tokens": [{"id": 2, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}]}
key, value = sys.argv[2], json.loads(sys.argv[3])
if key == "id": tok["added_tokens"][0]["id"] = value
elif key == "normalized": tok["added_tokens"][0]["normalized"] = value
else: tok[key] = value
json.dump(tok, open(sys.argv[1], "w"))
EOF
bad_tokenizer() {  # bad_tokenizer NAME KEY VALUE: a copy of the checkpoint with that tokenizer.json
  rm -rf "$work/$1" && cp -r "$work/ckpt" "$work/$1" && /usr/bin/python3 "$work/tok.py" "$work/$1/tokenizer.json" "$2" "$3"
}
bad_tokenizer tok-id id 1000000000
expect_error "an added token of id 1e9" "added_tokens\[0\]: expected an integer id" "$bin" generate --checkpoint "$work/tok-id" --prompt 1+1=
bad_tokenizer tok-norm normalized true
expect_error "added_tokens[].normalized: true" "added_tokens\[0\].normalized: expected false" "$bin" generate --checkpoint "$work/tok-norm" --prompt 1+1=
bad_tokenizer tok-trunc truncation '{"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}'
expect_error "truncation set" "truncation: expected null" "$bin" generate --checkpoint "$work/tok-trunc" --prompt 1+1=
bad_tokenizer tok-pad padding '{"strategy": "BatchLongest", "pad_id": 0}'
expect_error "padding set" "padding: expected null" "$bin" generate --checkpoint "$work/tok-pad" --prompt 1+1=

# -- a model directory without tokenizer.json ---------------------------------------------------------
rm -rf "$work/hf-notok" && cp -r "$work/ckpt" "$work/hf-notok"
/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c.pop("fp8rl_tokenizer"); json.dump(c,open(p,"w"))' "$work/hf-notok/config.json"
expect_error "a model directory without tokenizer.json" "has no tokenizer.json.*tokenizer.name=char" \
  "${train[@]}" grpo.max_num_steps=1 model.checkpoint="$work/hf-notok" logger.log_dir="$work/notok"
"${train[@]}" grpo.max_num_steps=1 model.checkpoint="$work/hf-notok" tokenizer.name=char logger.log_dir="$work/notok-char" > /dev/null &&
  pass "the same with tokenizer.name=char trains" || fail "tokenizer.name=char"

# -- files that are not regular files ------------------------------------------------------------------
mkfifo "$work/fifo.jsonl"
for i in 1 2 3 4; do echo "{\"prompt\": \"$i+$i=\", \"answer\": \"$((i + i))\"}"; done > "$work/val.jsonl"
jsonl=(task.name=jsonl task.jsonl.validation_path="$work/val.jsonl")
expect_error "a dataset that is a FIFO" "is a FIFO" "${train[@]}" "${jsonl[@]}" task.jsonl.train_path="$work/fifo.jsonl" logger.log_dir="$work/fifo"
expect_error "a dataset that is a directory" "is a directory, expected a regular file" \
  "${train[@]}" "${jsonl[@]}" task.jsonl.train_path="$work" logger.log_dir="$work/dir"
rm -rf "$work/shard-fifo" && cp -r "$work/ckpt" "$work/shard-fifo" && rm "$work/shard-fifo/model.safetensors" &&
  mkfifo "$work/shard-fifo/model.safetensors"
expect_error "a weight shard that is a FIFO" "model.safetensors.*not a regular file" "$bin" export "$work/shard-fifo" "$work/x"
head -c 50000000 /dev/zero | tr '\0' 'x' | sed 's/^/{"prompt": "/; s/$/", "answer": "1"}/' > "$work/long.jsonl"
start=$(date +%s)
expect_error "a 50 MB JSONL line" "line 1: longer than 1048576 bytes.*task.jsonl.max_line_bytes" \
  "${train[@]}" "${jsonl[@]}" task.jsonl.train_path="$work/long.jsonl" logger.log_dir="$work/long"
[ $(($(date +%s) - start)) -le 5 ] && pass "the long line is refused within 5 s" || fail "the long line took $(($(date +%s) - start)) s"

# -- divergence --------------------------------------------------------------------------------------
expect_error "policy.optimizer.lr=1e3" "optimizer steps in a row had a non-finite loss or gradient" \
  "${train[@]}" grpo.max_num_steps=20 checkpointing.save_period=1 policy.optimizer.lr=1e3 logger.log_dir="$work/diverge"
if [ -d "$work/diverge/checkpoint" ]; then  # finite weights, perhaps too large for a finite forward
  status=0
  "$bin" generate --checkpoint "$work/diverge/checkpoint" --prompt 1+1= --max-new-tokens 4 > "$work/out" 2> "$work/err" || status=$?
  if { [ "$status" -eq 0 ] && ! grep -qi nan "$work/out"; } ||
     { [ "$status" -eq 1 ] && grep -q "log-probs are NaN or infinite" "$work/err"; }; then
    pass "generate from the diverging run's last checkpoint: finite log-probs, or a clear refusal"
  else
    fail "generate from the diverging run's last checkpoint: exit $status"; tail -n 3 "$work/out" "$work/err"
  fi
fi
rm -rf "$work/nan" && cp -r "$work/ckpt" "$work/nan"
/usr/bin/python3 - "$work/nan/model.safetensors" << 'EOF'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    name = sorted(k for k in header if k != "__metadata__")[0]
    f.seek(8 + n + header[name]["data_offsets"][0])
    f.write(struct.pack("<f", float("nan")))
EOF
expect_error "generate from NaN weights" "holds NaN or infinite values" "$bin" generate --checkpoint "$work/nan" --prompt 1+1=
expect_error "a resume from NaN weights" "holds NaN or infinite values" "${train[@]}" model.checkpoint="$work/nan" logger.log_dir="$work/nan-run"

# -- resume ------------------------------------------------------------------------------------------------
mkdir -p "$work/early" && echo '{"step": 1}' > "$work/early/metrics.jsonl"  # killed before its first checkpoint
"${train[@]}" grpo.max_num_steps=2 logger.log_dir="$work/early" --resume > "$work/out" &&
  grep -q "no checkpoint yet; the run starts from step 0" "$work/out" && [ "$(steps "$work/early")" -eq 2 ] &&
  pass "--resume before the first checkpoint starts the run from step 0" || fail "--resume before the first checkpoint"
cp -r "$work/ref" "$work/neg"
/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; s=json.load(open(p)); s["step"]=-3; json.dump(s,open(p,"w"))' "$work/neg/checkpoint/trainer_state.json"
expect_error "trainer_state.json step -3" "key 'step' must be a non-negative integer" "${train[@]}" grpo.max_num_steps=4 logger.log_dir="$work/neg" --resume
expect_error "a checkpoint beyond the run's steps" "beyond this run's 3 steps" "${train[@]}" grpo.max_num_steps=3 logger.log_dir="$work/ref" --resume

expect_error "generate past the model's length" "exceed the model's max_seq_len 16" \
  "$bin" generate --checkpoint "$work/ckpt" --prompt 1+1= --max-new-tokens 16

# -- values the schema once accepted that made a job impossible, and usage errors ------------------------
for key in task.arithmetic.train_size task.arithmetic.val_size task.running_sum.train_size task.running_sum.val_size; do
  expect_error "$key=0" "$key.*(at least|>=) 1" "${train[@]}" "$key=0" logger.log_dir="$work/zero"
  [ ! -e "$work/zero" ] || fail "$key=0 left a run directory behind"
done
expect_error "sft with task.arithmetic.train_size=0" "task.arithmetic.train_size.*(at least|>=) 1" \
  "$bin" sft "$src/recipes/sft-arithmetic.yaml" task.arithmetic.train_size=0 logger.log_dir="$work/zero"
expect_error "an unknown flag" "--no-such-flag" "$bin" train "$src/recipes/grpo-bf16.yaml" --no-such-flag
expect_error "generate -n 0" "-n" "$bin" generate --checkpoint "$work/ckpt" --prompt 1+1= -n 0
expect_error "report without a run" "run_dirs" "$bin" report
status=0
"$bin" train --help > /dev/null 2>&1 || status=$?
[ "$status" -eq 0 ] && pass "--help exits 0" || fail "--help exits $status"
[ "$failures" -eq 0 ] || { echo "$failures situation(s) failed"; exit 1; }
echo "every situation handled"
