#!/usr/bin/env bash
# `fp8rl generate --recipe`: a run's config.yaml gives the generator that run used (linears, KV
# cache, attention precision, scale granularity and margin, sampling), the same samples and
# log-probs as the flags and overrides that spell the same settings, and other ones than the
# flags alone. Usage: generate_recipe_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-generate-recipe.XXXXXX)
trap 'rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

tiny=(model.checkpoint=null model.preset=tiny model.max_seq_len=16 task.arithmetic.min_operand_digits=1
      task.arithmetic.max_operand_digits=1 task.arithmetic.operators=+ task.arithmetic.val_size=8
      task.arithmetic.train_size=200 eval.max_examples=8 generation.max_new_tokens=4 grpo.num_prompts_per_step=2
      grpo.num_generations_per_prompt=4 policy.train_global_batch_size=8 policy.train_micro_batch_size=8
      grpo.val_period=0 grpo.max_num_steps=2)
settings=(policy.attention_precision=bf16 generation.kv_scale_granularity=head generation.kv_scale_margin=1.5
          generation.temperature=0.7)
"$bin" train "$src/recipes/grpo-fp8-e2e-kv.yaml" "${tiny[@]}" "${settings[@]}" logger.log_dir="$work/run" > /dev/null
ckpt=$work/run/checkpoint
gen=("$bin" generate --checkpoint "$ckpt" --prompt 1+2= -n 4 --seed 3)

"${gen[@]}" --recipe "$work/run/config.yaml" > "$work/recipe.out" 2> /dev/null
"${gen[@]}" --precision fp8 --kv-cache-dtype fp8 --max-new-tokens 4 "${settings[@]}" > "$work/flags.out" 2> /dev/null
"${gen[@]}" --precision fp8 --kv-cache-dtype fp8 --max-new-tokens 4 > "$work/plain.out" 2> /dev/null
if cmp -s "$work/recipe.out" "$work/flags.out"; then
  pass "--recipe config.yaml: the same samples and log-probs as the same settings given as flags and overrides"
else
  fail "--recipe config.yaml differs from the same settings as flags"; diff "$work/recipe.out" "$work/flags.out" || true
fi
if grep -q "1.5 \* amax / 448 per head" "$work/recipe.out" && ! cmp -s "$work/recipe.out" "$work/plain.out"; then
  pass "--recipe: the run's attention precision, scale granularity, margin and temperature are used"
else
  fail "--recipe: the output does not show the run's generator settings"; cat "$work/recipe.out"
fi
# A flag after the recipe wins over it: --temperature 0 is greedy, so every sample is the same.
"${gen[@]}" --recipe "$work/run/config.yaml" --temperature 0 2> /dev/null | grep '^\[' | cut -d' ' -f2- | sort -u > "$work/greedy"
if [ "$(wc -l < "$work/greedy")" -eq 1 ]; then
  pass "--temperature 0 after --recipe: greedy, 4 identical samples"
else
  fail "--temperature 0 after --recipe: $(wc -l < "$work/greedy") distinct samples"
fi

status=0
"$bin" generate --prompt 1+2= > /dev/null 2> "$work/err" || status=$?
if [ "$status" -eq 1 ] && grep -q "generate needs a model directory" "$work/err"; then
  pass "no --checkpoint and no model directory in the recipe: exit 1, saying what is needed"
else
  fail "generate without a model directory: exit status $status"; cat "$work/err"
fi
status=0
"${gen[@]}" --recipe "$work/run/config.yaml" generation.kv_cache_dtype=fp9 > /dev/null 2> "$work/err" || status=$?
if [ "$status" -eq 1 ] && grep -q "expects one of 'bf16', 'fp8'" "$work/err"; then
  pass "a misspelt override: exit 1 naming the allowed values"
else
  fail "a misspelt override: exit status $status"; cat "$work/err"
fi

# Without --recipe or a generation.kv_cache_bytes override the KV budget holds every sample at
# once; a budget given as an override is kept (here 4,096 bytes: at most one page, less than one
# sample needs).
"$bin" generate --checkpoint "$ckpt" --prompt 1+2= -n 12 --max-new-tokens 4 > /dev/null 2> "$work/err"
if grep -q "12 samples at once, 0 waited for KV pages" "$work/err"; then
  pass "no budget chosen: the 12 samples decode together"
else
  fail "no budget chosen: not all samples at once"; cat "$work/err"
fi
status=0
"${gen[@]}" --max-new-tokens 4 generation.kv_cache_bytes=4096 > /dev/null 2> "$work/err" || status=$?
if [ "$status" -eq 1 ] && grep -q "generation.kv_cache_bytes" "$work/err"; then
  pass "an override's budget is kept: too small for one sample, exit 1 naming generation.kv_cache_bytes"
else
  fail "generation.kv_cache_bytes=4096: exit status $status"; cat "$work/err"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all generate --recipe checks passed"
