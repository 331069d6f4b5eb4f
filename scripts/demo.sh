#!/usr/bin/env bash
# Sets up, builds and runs fp8rl's default job: an FP8 end-to-end GRPO run on the built-in
# arithmetic task, starting from an SFT warm start that is created first if it is missing.
# Prints validation accuracy before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
# The warm start is (re)made when it is missing or was made from a different recipe.
if [ ! -f runs/sft-arithmetic/checkpoint/model.safetensors ] ||
   ! cmp -s <(build/fp8rl config recipes/sft-arithmetic.yaml) runs/sft-arithmetic/config.yaml; then
  echo "== SFT warm start (recipes/sft-arithmetic.yaml) =="
  rm -rf runs/sft-arithmetic
  build/fp8rl sft recipes/sft-arithmetic.yaml
fi
echo "== GRPO, FP8 end to end (recipes/grpo-fp8-e2e.yaml) =="
rm -rf runs/grpo-fp8-e2e
build/fp8rl train recipes/grpo-fp8-e2e.yaml "$@"
