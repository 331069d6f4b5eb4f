#!/usr/bin/env bash
# Reproduces the runs of docs/results.md: the SFT warm start (if missing), then the four precision
# presets x three seeds of GRPO, then the summary table, docs/results.html (`fp8rl report` of the
# same runs) and docs/results.png (its screenshot, where chromium is installed). Assumes
# scripts/build.sh release has run.
# About 7 minutes on a 2-vCPU machine (with the warm start made).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f runs/sft-arithmetic/checkpoint/model.safetensors ] ||
   ! cmp -s <(build/fp8rl config recipes/sft-arithmetic.yaml) runs/sft-arithmetic/config.yaml; then
  rm -rf runs/sft-arithmetic
  build/fp8rl sft recipes/sft-arithmetic.yaml
fi
for preset in bf16 fp8-gen fp8-e2e fp8-e2e-kv; do
  for seed in 1 2 3; do
    dir=runs/results/$preset-seed$seed
    rm -rf "$dir"
    echo "== $preset seed $seed"
    build/fp8rl train "recipes/grpo-$preset.yaml" "grpo.seed=$seed" "logger.log_dir=$dir" | tail -1
  done
done
python3 tools/summarize_runs.py runs/results/*-seed*
build/fp8rl report runs/results/*-seed* -o docs/results.html
if command -v chromium > /dev/null; then
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" --window-size=1300,1840 \
    --virtual-time-budget=5000 --screenshot="$PWD/docs/results.png" "file://$PWD/docs/results.html" 2> /dev/null
  rm -rf "$profile"
fi
