#!/usr/bin/env bash
# The FP8 KV cache ablation of docs/generation.md: recipes/grpo-fp8-e2e-kv.yaml with each way of
# setting the Q/K/V scales, STEPS GRPO steps x SEEDS seeds each, then one table row per variant
# (tools/summarize_runs.py) and the per-step median of token_mult_prob_error. Assumes
# scripts/build.sh release has run and the SFT warm start exists (scripts/results.sh makes it).
# Usage: scripts/kv_ablation.sh [STEPS] [SEEDS] [VARIANT...]
# FROZEN=1 sets the learning rate to 1e-30 (updates vanish in FP32 rounding): every variant then generates from the same weights (the
# warm start) and the same prompts, so the variants differ in their scales only (runs go to
# runs/kv-ablation-frozen/).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-50}
seeds=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
declare -A variants=(
  [layer]=""
  [head]="generation.kv_scale_granularity=head"
  [next-prompts]="generation.kv_calibration_data=batch_and_next_prompts"
  [margin1]="generation.kv_scale_margin=1"
  [margin1.5]="generation.kv_scale_margin=1.5"
  [margin2]="generation.kv_scale_margin=2"
  [margin4]="generation.kv_scale_margin=4"
  [head-next]="generation.kv_scale_granularity=head generation.kv_calibration_data=batch_and_next_prompts"
  [head-next-margin2]="generation.kv_scale_granularity=head generation.kv_calibration_data=batch_and_next_prompts generation.kv_scale_margin=2"
  [next-margin2]="generation.kv_calibration_data=batch_and_next_prompts generation.kv_scale_margin=2"
  [head-margin2]="generation.kv_scale_granularity=head generation.kv_scale_margin=2"
  [q-bf16-head-margin2]="generation.fp8_attention=false generation.kv_scale_granularity=head generation.kv_scale_margin=2"
  [q-bf16]="generation.fp8_attention=false"
  [spp4]="generation.kv_calibration_samples_per_prompt=4"
  [spp2]="generation.kv_calibration_samples_per_prompt=2"
  [trainer-e4m3]="policy.fp8_kv_attention=true"
  [trainer-e4m3-head]="policy.fp8_kv_attention=true generation.kv_scale_granularity=head"
  [trainer-e4m3-spp2]="policy.fp8_kv_attention=true generation.kv_calibration_samples_per_prompt=2"
  [trainer-e4m3-spp1]="policy.fp8_kv_attention=true generation.kv_calibration_samples_per_prompt=1"
  [trainer-e4m3-next-only]="policy.fp8_kv_attention=true generation.kv_calibration_data=next_prompts"
  [trainer-e4m3-next-only-margin2]="policy.fp8_kv_attention=true generation.kv_calibration_data=next_prompts generation.kv_scale_margin=2"
  [bf16-kv]="generation.kv_cache_dtype=bf16"
)
names=("$@")
out=runs/kv-ablation
extra=()
if [ "${FROZEN:-0}" = 1 ]; then
  out=runs/kv-ablation-frozen
  extra=(policy.optimizer.lr=1e-30)
fi
[ ${#names[@]} -gt 0 ] || names=(layer head next-prompts margin2 head-margin2 next-margin2 head-next-margin2 q-bf16 q-bf16-head-margin2 bf16-kv)
for name in "${names[@]}"; do
  for seed in $(seq 1 "$seeds"); do
    dir=$out/$name-seed$seed
    rm -rf "$dir"
    # The recipe's keys, then the variant's overrides.
    # shellcheck disable=SC2086
    build/fp8rl train recipes/grpo-fp8-e2e-kv.yaml generation.kv_scale_granularity=layer \
      generation.kv_calibration_data=batch generation.kv_scale_margin=1.05 \
      generation.kv_calibration_samples_per_prompt=0 policy.fp8_kv_attention=false ${variants[$name]} \
      "grpo.max_num_steps=$steps" grpo.val_period=0 "grpo.seed=$seed" "logger.log_dir=$dir" "${extra[@]}" | tail -1
  done
done
dirs=()
for name in "${names[@]}"; do dirs+=("$out/$name"-seed*); done
python3 tools/summarize_runs.py "${dirs[@]}"
python3 - "$out" "${names[@]}" <<'PY'
import glob, json, statistics, sys
print("| variant | median token_mult_prob_error | max | steps above 1.2 |")
print("|---|---|---|---|")
for name in sys.argv[2:]:
    errs = []
    for path in sorted(glob.glob(f"{sys.argv[1]}/{name}-seed*/metrics.jsonl")):
        errs += [json.loads(line)["token_mult_prob_error"] for line in open(path)]
    print(f"| {name} | {statistics.median(errs):.4f} | {max(errs):.3f} | {sum(e > 1.2 for e in errs)} of {len(errs)} |")
PY
