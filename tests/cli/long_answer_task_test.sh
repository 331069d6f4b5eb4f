#!/usr/bin/env bash
# A short version of the long-answer study (scripts/long_answers.sh): a tiny model, SFT then 3
# GRPO steps per preset on the running-sum task. Checks that every step line has the mismatch by
# response length, that bf16 and fp8-e2e agree exactly (token_mult_prob_error 1 in every length
# bin), that fp8-gen without IS correction runs, and that the report draws the by-length chart's
# data. Usage: long_answer_task_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-long-answers.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

task=(model.preset=tiny model.max_seq_len=128 task.name=running_sum task.running_sum.min_terms=4
      task.running_sum.max_terms=8 task.running_sum.term_digits=1 task.running_sum.train_size=500
      task.running_sum.val_size=8 eval.max_examples=8 generation.max_new_tokens=64)
"$bin" sft "$src/recipes/sft-running-sum.yaml" "${task[@]}" sft.max_num_steps=20 sft.val_period=0 \
  logger.log_dir="$work/sft" > /dev/null
grpo=("${task[@]}" model.checkpoint="$work/sft/checkpoint" grpo.num_prompts_per_step=2 grpo.num_generations_per_prompt=4
      policy.train_global_batch_size=8 policy.train_micro_batch_size=8 grpo.max_num_steps=3 grpo.val_period=0)
"$bin" train "$src/recipes/grpo-bf16.yaml" "${grpo[@]}" logger.log_dir="$work/bf16" > /dev/null
"$bin" train "$src/recipes/grpo-fp8-e2e.yaml" "${grpo[@]}" logger.log_dir="$work/fp8-e2e" > /dev/null
"$bin" train "$src/recipes/grpo-fp8-gen.yaml" "${grpo[@]}" loss_fn.use_importance_sampling_correction=false \
  loss_fn.allow_fp8_generation_without_is=true run.name=grpo-fp8-gen-no-is logger.log_dir="$work/fp8-gen-no-is" > /dev/null

for run in bf16 fp8-e2e fp8-gen-no-is; do
  lines=$(grep -c '"token_mult_prob_error_by_length":{"' "$work/$run/metrics.jsonl" || true)
  if [ "$lines" -eq 3 ]; then
    pass "$run: 3 step lines with token_mult_prob_error_by_length"
  else
    fail "$run: $lines of 3 step lines have token_mult_prob_error_by_length"
  fi
done
for run in bf16 fp8-e2e; do
  # Every value in the by-length object is exactly 1 (the generator and the trainer agree).
  values=$(grep -o '"token_mult_prob_error_by_length":{[^}]*}' "$work/$run/metrics.jsonl" | grep -o '"[0-9+-]*":[^,}]*')
  if [ -z "$values" ] || echo "$values" | grep -vq ':1.0$'; then
    fail "$run: a length bin's token_mult_prob_error is not exactly 1"
  else
    pass "$run: token_mult_prob_error exactly 1 in every length bin"
  fi
done
"$bin" report "$work/bf16" "$work/fp8-e2e" "$work/fp8-gen-no-is" -o "$work/report.html" > /dev/null
if grep -q '"by_length":{"bins":\["' "$work/report.html"; then
  pass "the report carries the by-length chart's bins"
else
  fail "the report has no by-length data"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all long-answer task checks passed"
