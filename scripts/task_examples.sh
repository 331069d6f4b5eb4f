#!/usr/bin/env bash
# The example tasks of docs/tasks.md, with the figures of docs/results.md ("Your own tasks"):
#   word problems scored by a Python reward plug-in (partial credit for the format),
#   the running-sum task with a calculator tool (a multi-turn environment) against the same
#     warm start without the tool, SEEDS seeds each,
#   short Python functions scored by their unit tests in the sandbox.
# Each writes its data (examples/*/make_data.py into runs/data/), makes its SFT warm start if
# missing or if its recipe changed, then runs GRPO. A complete run directory is kept, an
# interrupted one continues with --resume. Then the summary tables (tools/summarize_runs.py) and
# the report pages docs/task-examples.html and docs/calculator.html.
# Assumes scripts/build.sh release has run. Usage: scripts/task_examples.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}

python3 examples/word_problems/make_data.py runs/data/word-problems
python3 examples/code_tasks/make_data.py runs/data/code-tasks
for stage in sft-word-problems sft-calculator sft-code-tasks; do
  if [ ! -f "runs/$stage/checkpoint/model.safetensors" ] ||
     ! cmp -s <(build/fp8rl config "recipes/$stage.yaml") "runs/$stage/config.yaml"; then
    rm -rf "runs/$stage"
    build/fp8rl sft "recipes/$stage.yaml" | tail -1
  fi
done

# train DIR RECIPE [OVERRIDES...]: a complete run is kept, an interrupted one resumed.
train() {
  local dir=$1 recipe=$2
  shift 2
  local steps
  steps=$(build/fp8rl config "$recipe" "$@" | awk '/^grpo:/ {g = 1} g && /max_num_steps:/ {print $2; exit}')
  if [ -f "$dir/metrics.jsonl" ] && grep -q "\"step\":$steps," "$dir/metrics.jsonl"; then
    echo "== $dir: complete"
    return
  fi
  echo "== $dir"
  local resume=()
  [ -d "$dir" ] && resume=(--resume)
  build/fp8rl train "$recipe" "$@" logger.log_dir="$dir" "${resume[@]}" | tail -1
}

out=runs/task-examples
train "$out/word-problems" recipes/grpo-word-problems.yaml
train "$out/code-tasks" recipes/grpo-code-tasks.yaml
for seed in $(seq 1 "$seeds"); do
  train "$out/calculator-tool-seed$seed" recipes/grpo-calculator.yaml grpo.seed="$seed" run.name=calculator-tool
  train "$out/calculator-no-tool-seed$seed" recipes/grpo-calculator.yaml grpo.seed="$seed" run.name=calculator-no-tool \
    'task.environment.command=[]'
done

python3 tools/summarize_runs.py "$out"/calculator-*-seed*
build/fp8rl report "$out"/calculator-*-seed* -o docs/calculator.html
build/fp8rl report "$out/word-problems" "$out/code-tasks" -o docs/task-examples.html
