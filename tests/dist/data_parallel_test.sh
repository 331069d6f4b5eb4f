#!/usr/bin/env bash
# Data parallelism gives one process's bits: SFT and GRPO (bf16, fp8-e2e, fp8-e2e with an FP8 KV cache)
# under `mpirun -np 1, 2, 4`, and fp8-e2e on a Qwen3-MoE model and with a reward plug-in and a
# multi-turn environment under 1 and 2, write the same
# checkpoints, byte for byte, and the same metrics (timings and memory aside), also with each rank's
# AdamW moments offloaded (N = 4); a killed rank ends the job with an error and `--resume` (4 ranks,
# moments offloaded: shards that start inside a tensor) continues to the uninterrupted run's checkpoint.
# Usage: data_parallel_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-dist-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
# Shared memory, or TCP loopback as between machines (FP8RL_TEST_MPI_TRANSPORT=tcp).
[ "${FP8RL_TEST_MPI_TRANSPORT:-}" = tcp ] && mpi+=(--mca btl tcp,self)
export FP8RL_NUM_THREADS=1  # 4 ranks on a 2-core machine
# Open MPI does not free what its plug-ins allocate (they are unloaded first, so a leak report
# cannot even name them): in a sanitizer build, leak checking stays on for the runs without
# mpirun only. mpirun passes this process's environment to the ranks.
mpi=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "${mpi[@]}")

task=(model.preset=tiny model.max_seq_len=16 task.arithmetic.min_operand_digits=1
      task.arithmetic.max_operand_digits=1 task.arithmetic.operators=+ task.arithmetic.val_size=40
      task.arithmetic.train_size=2000 eval.max_examples=40 generation.max_new_tokens=4)
# Validation every 10 steps over 150 examples: 3 greedy batches of 64, spread over the ranks.
sft=(sft.max_num_steps=30 sft.val_period=10 task.arithmetic.max_operand_digits=2 task.arithmetic.val_size=150 eval.max_examples=150
     policy.optimizer.lr=0.005 policy.train_global_batch_size=64 policy.train_micro_batch_size=16)
# 3 micro-batches per optimizer step, 2 optimizer steps per GRPO step: ranks sit out some rounds.
grpo=(model.checkpoint="$work/sft-1/checkpoint" grpo.num_prompts_per_step=6 grpo.num_generations_per_prompt=4
      policy.train_global_batch_size=12 policy.train_micro_batch_size=4 grpo.val_period=2)

run() {  # run N COMMAND ARGS...: the command alone (N = 1) or under mpirun
  local n=$1
  shift
  if [ "$n" -eq 1 ]; then "$bin" "$@"; else "${mpi[@]}" -np "$n" "$bin" "$@"; fi
}

strip_measurements() {  # metrics lines without what is measured rather than computed
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    for k in ("timing", "tokens_per_s", "memory", "kv_waited"): j.pop(k, None)
    print(json.dumps(j, sort_keys=True))' "$1"
}

same_run() {  # same_run DIR_A DIR_B METRICS_FILE
  cmp "$1/checkpoint/model.safetensors" "$2/checkpoint/model.safetensors"
  cmp "$1/checkpoint/optimizer.safetensors" "$2/checkpoint/optimizer.safetensors"
  diff <(strip_measurements "$1/$3") <(strip_measurements "$2/$3") > /dev/null ||
    { echo "FAIL: $3 differs between $1 and $2"; diff <(strip_measurements "$1/$3") <(strip_measurements "$2/$3") | head; exit 1; }
}

offload() {  # offload N: the moments of N = 4's ranks go to spill files
  [ "$1" -eq 4 ] && echo policy.optimizer.offload_moments=true || echo policy.optimizer.offload_moments=false
}

for n in 1 2 4; do
  run $n sft "$src/recipes/sft-arithmetic.yaml" "${task[@]}" "${sft[@]}" "$(offload $n)" logger.log_dir="$work/sft-$n" \
    > "$work/sft-$n.log"
  [ $n -eq 1 ] || same_run "$work/sft-1" "$work/sft-$n" sft_metrics.jsonl
done
echo "sft: N = 1, 2, 4 identical"

for recipe in grpo-bf16 grpo-fp8-e2e grpo-fp8-e2e-kv; do
  for n in 1 2 4; do
    run $n train "$src/recipes/$recipe.yaml" "${task[@]}" "${grpo[@]}" grpo.max_num_steps=3 "$(offload $n)" \
      logger.log_dir="$work/$recipe-$n" > "$work/$recipe-$n.log"
    [ $n -eq 1 ] || same_run "$work/$recipe-1" "$work/$recipe-$n" metrics.jsonl
  done
  echo "$recipe: N = 1, 2, 4 identical"
done

# Qwen3-MoE: the generator's record of every position's experts travels with its rollouts from
# each rank (routing_mismatch, exactly 0 for fp8-e2e), and the runs are the same bits.
run 1 sft "$src/recipes/sft-arithmetic.yaml" "${task[@]}" "${sft[@]}" model.preset=tiny-moe \
  logger.log_dir="$work/sft-moe" > "$work/sft-moe.log"
for n in 1 2; do
  run $n train "$src/recipes/grpo-fp8-e2e.yaml" "${task[@]}" "${grpo[@]}" model.checkpoint="$work/sft-moe/checkpoint" \
    grpo.max_num_steps=2 logger.log_dir="$work/moe-$n" > "$work/moe-$n.log"
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)["routing_mismatch"]
    if m != 0: sys.exit("FAIL: routing_mismatch %r in %s" % (m, sys.argv[1]))' "$work/moe-$n/metrics.jsonl"
done
same_run "$work/moe-1" "$work/moe-2" metrics.jsonl
echo "moe fp8-e2e: N = 1, 2 identical, routing_mismatch 0"

# Rewards and environments of one's own (docs/tasks.md): each rank starts its own plug-in workers
# and scores the samples it generated; the runs are the same bits.
own=(grpo.max_num_steps=2 generation.max_new_tokens=10 "task.environment.stop=[5, 7]"
     "task.reward.command=[python3, $src/tests/tasks/plugins/arithmetic_reward.py]"
     "task.environment.command=[python3, $src/tests/tasks/plugins/echo_environment.py]")
for n in 1 2; do
  run $n train "$src/recipes/grpo-fp8-e2e.yaml" "${task[@]}" "${grpo[@]}" "${own[@]}" logger.log_dir="$work/own-$n" \
    > "$work/own-$n.log"
done
grep -q '"observation_tokens_mean":[1-9]' "$work/own-1/metrics.jsonl" || { echo "FAIL: no observations"; exit 1; }
same_run "$work/own-1" "$work/own-2" metrics.jsonl
echo "reward plug-in and environment: N = 1, 2 identical"

# A rank killed mid-run: the job fails, and naming the rank is mpirun's; the last checkpoint is
# whole, and --resume (with another N) ends where the uninterrupted run does.
steps=(grpo.max_num_steps=12 checkpointing.save_period=1)
run 1 train "$src/recipes/grpo-bf16.yaml" "${task[@]}" "${grpo[@]}" "${steps[@]}" logger.log_dir="$work/whole" > "$work/whole.log"
killer="$work/kill-rank-1.sh"
cat > "$killer" <<SCRIPT
#!/usr/bin/env bash
# Rank 1 is killed (SIGKILL) once the run has a checkpoint of step 2 (the watcher kills this
# shell's pid, which exec makes fp8rl's).
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
  (until grep -qs '"step": *[2-9]' "$work/killed/checkpoint/trainer_state.json"; do sleep 0.005; done
   kill -9 \$\$) &
fi
exec "\$@"
SCRIPT
chmod +x "$killer"
if "${mpi[@]}" -np 2 "$killer" "$bin" train "$src/recipes/grpo-bf16.yaml" "${task[@]}" "${grpo[@]}" "${steps[@]}" \
    logger.log_dir="$work/killed" > "$work/killed.log" 2>&1; then
  echo "FAIL: the job went on with a killed rank"; cat "$work/killed.log"; exit 1
fi
grep -q "rank 1" "$work/killed.log" || { echo "FAIL: the error does not name rank 1"; cat "$work/killed.log"; exit 1; }
run 4 train "$src/recipes/grpo-bf16.yaml" "${task[@]}" "${grpo[@]}" "${steps[@]}" "$(offload 4)" \
  logger.log_dir="$work/killed" --resume > "$work/resumed.log"
same_run "$work/whole" "$work/killed" metrics.jsonl
echo "killed rank: error, and --resume on 4 ranks matches the uninterrupted run"
