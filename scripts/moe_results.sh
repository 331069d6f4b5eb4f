#!/usr/bin/env bash
# The MoE runs of docs/results.md ("Mixture of Experts"): the SFT warm start on small-moe
# (recipes/sft-arithmetic-moe.yaml, if missing or changed), then GRPO bf16 and fp8-e2e on it
# (recipes/grpo-moe-*.yaml), SEEDS seeds each, then the summary table and docs/moe-results.html.
# Assumes scripts/build.sh release has run. Usage: scripts/moe_results.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
if [ ! -f runs/sft-arithmetic-moe/checkpoint/model.safetensors ] ||
   ! cmp -s <(build/fp8rl config recipes/sft-arithmetic-moe.yaml) runs/sft-arithmetic-moe/config.yaml; then
  rm -rf runs/sft-arithmetic-moe
  build/fp8rl sft recipes/sft-arithmetic-moe.yaml
fi
for preset in bf16 fp8-e2e; do
  for seed in $(seq 1 "$seeds"); do
    dir=runs/moe-results/$preset-seed$seed
    rm -rf "$dir"
    echo "== moe $preset seed $seed"
    build/fp8rl train "recipes/grpo-moe-$preset.yaml" "grpo.seed=$seed" "logger.log_dir=$dir" | tail -1
  done
done
python3 tools/summarize_runs.py runs/moe-results/*-seed*
build/fp8rl report runs/moe-results/*-seed* -o docs/moe-results.html
