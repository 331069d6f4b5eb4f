#!/usr/bin/env bash
# The long-answer study (docs/results.md, "Long answers"): the SFT warm start on the running-sum
# task (recipes/sft-running-sum.yaml, then recipes/sft-running-sum-continue.yaml, if missing),
# then GRPO from it with the four precision presets plus FP8 generation without
# importance-sampling correction, SEEDS seeds each, then the
# summary table and the report page (docs/long-answers.html; its "token_mult_prob_error by
# response length" chart shows the mismatch against answer length).
#
# Every run is resumable: a run directory that is complete is kept, one that was interrupted
# continues with --resume, so the study can be spread over several invocations (the runs are
# long on a 2-core machine). STOP_AFTER=N ends each invocation of a run after N steps (with a
# checkpoint); rerun the script to go on. Assumes scripts/build.sh release has run.
# Validation (200 prompts, greedy, through the generator) runs every VAL_PERIOD steps (default 10)
# and after the last step. The page's screenshot, docs/long-answers.png, is taken where chromium
# is installed.
# Usage: [VAL_PERIOD=N] [STOP_AFTER=N] scripts/long_answers.sh [SEEDS] [STEPS] [PRESET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-5}
steps=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(bf16 fp8-gen fp8-gen-no-is fp8-e2e fp8-e2e-kv)

# The warm start in two stages (docs/results.md, "Long answers"), each made again if missing or if
# its recipe changed.
for stage in sft-running-sum sft-running-sum-continue; do
  if [ ! -f "runs/$stage/checkpoint/model.safetensors" ] ||
     ! cmp -s <(build/fp8rl config "recipes/$stage.yaml") "runs/$stage/config.yaml"; then
    rm -rf "runs/$stage"
    build/fp8rl sft "recipes/$stage.yaml"
  fi
done
sft=runs/sft-running-sum-continue

# The long-answer settings on top of each preset's recipe: the running-sum task of the warm start,
# 16 prompts x 8 samples per step, answers of up to 256 tokens, and a learning rate of 5e-6 (the
# presets' 5e-5 took bf16's validation accuracy from 0.260 to 0.090 in 10 steps on this task;
# 5e-6 took it to 0.315: docs/results.md, "Long answers").
long=(model.checkpoint="$sft/checkpoint" model.max_seq_len=336 task.name=running_sum
      task.running_sum.min_terms=12 task.running_sum.max_terms=24 task.running_sum.term_digits=1 task.running_sum.train_size=50000
      task.running_sum.val_size=200 generation.max_new_tokens=256 grpo.num_prompts_per_step=16
      grpo.num_generations_per_prompt=8 policy.train_global_batch_size=128 policy.train_micro_batch_size=64
      policy.optimizer.lr=0.000005
      grpo.max_num_steps="$steps" grpo.val_period="${VAL_PERIOD:-10}" eval.max_examples=200)
for preset in "${presets[@]}"; do
  recipe=recipes/grpo-$preset.yaml
  extra=()
  if [ "$preset" = fp8-gen-no-is ]; then
    recipe=recipes/grpo-fp8-gen.yaml
    extra=(run.name=grpo-fp8-gen-no-is loss_fn.use_importance_sampling_correction=false
           loss_fn.allow_fp8_generation_without_is=true)
  fi
  for seed in $(seq 1 "$seeds"); do
    dir=runs/long-answers/$preset-seed$seed
    args=("$recipe" "${long[@]}" "${extra[@]}" "grpo.seed=$seed" "logger.log_dir=$dir")
    [ -z "${STOP_AFTER:-}" ] || args+=(--stop-after "$STOP_AFTER")
    if [ -f "$dir/metrics.jsonl" ] && grep -q "\"step\":$steps," "$dir/metrics.jsonl"; then
      echo "== $preset seed $seed: complete"
      continue
    fi
    echo "== $preset seed $seed"
    if [ -d "$dir" ]; then
      build/fp8rl train "${args[@]}" --resume | tail -1
    else
      build/fp8rl train "${args[@]}" | tail -1
    fi
  done
done
python3 tools/summarize_runs.py runs/long-answers/*-seed*
build/fp8rl report runs/long-answers/*-seed* -o docs/long-answers.html
if command -v chromium > /dev/null; then
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" --window-size=1600,2300 \
    --virtual-time-budget=5000 --screenshot="$PWD/docs/long-answers.png" "file://$PWD/docs/long-answers.html" 2> /dev/null
  rm -rf "$profile"
fi
