#!/usr/bin/env bash
# Reward plug-ins (docs/tasks.md): a plug-in that scores like the built-in verifier gives the same
# run, bit for bit; every way a worker can misbehave stops the run with exit 1, naming the worker,
# the request and its stderr, after the last good checkpoint; Ctrl-C, SIGTERM and kill -9 leave
# no worker process behind. Usage: plugin_failures_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d /tmp/fp8rl-plugins.XXXXXX)
marker="fp8rl-plugin-test-$$"
trap 'kill $(jobs -p) 2> /dev/null || true; pkill -KILL -f "$marker" 2> /dev/null || true; rm -rf "$work"' EXIT
export FP8RL_NUM_THREADS=1

tiny=(model.checkpoint=null model.preset=tiny model.max_seq_len=16 task.arithmetic.min_operand_digits=1 task.arithmetic.max_operand_digits=1
      task.arithmetic.operators=+ task.arithmetic.val_size=8 task.arithmetic.train_size=200 eval.max_examples=8
      generation.max_new_tokens=4 grpo.num_prompts_per_step=2 grpo.num_generations_per_prompt=4
      policy.train_global_batch_size=8 policy.train_micro_batch_size=8 grpo.val_period=0 grpo.max_num_steps=4
      checkpointing.save_period=2)
train=("$bin" train "$src/recipes/grpo-bf16.yaml" "${tiny[@]}")
misbehaving="$src/tests/tasks/plugins/misbehaving_worker.py"

failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
orphans() { pgrep -f "$marker" || true; }
# The metrics lines without what is measured (timing, memory, speed) or plug-in only.
science() { /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    for k in ("timing", "tokens_per_s", "memory", "reward_metrics", "reward_timeouts"):
        j.pop(k, None)
    print(json.dumps(j, sort_keys=True))' "$1"; }

# -- a plug-in that scores as the built-in verifier does: the same run --------------------------
"${train[@]}" logger.log_dir="$work/builtin" > /dev/null
"${train[@]}" logger.log_dir="$work/plugin" task.reward.workers=3 \
  "task.reward.command=[python3, $src/tests/tasks/plugins/arithmetic_reward.py]" > /dev/null
if [ "$(science "$work/builtin/metrics.jsonl")" = "$(science "$work/plugin/metrics.jsonl")" ] &&
   cmp -s "$work/builtin/checkpoint/model.safetensors" "$work/plugin/checkpoint/model.safetensors"; then
  pass "a Python plug-in scoring like the built-in verifier gives the same metrics and weights"
else
  fail "the plug-in run differs from the built-in one"
fi
if grep -q '"reward_metrics":{"has_digits":' "$work/plugin/metrics.jsonl" && grep -q '"reward_timeouts":0' "$work/plugin/metrics.jsonl"; then
  pass "the reply's metrics are averaged into reward_metrics.NAME"
else
  fail "no reward_metrics in metrics.jsonl"
fi

# -- each misbehaviour at step 3: exit 1, the message, the step-2 checkpoint, no process left --------
# misbehave NAME MODE PATTERN [extra overrides]
misbehave() {
  local t0=$SECONDS
  local name=$1 mode=$2 pattern=$3 status=0
  shift 3
  rm -rf "$work/run"
  timeout 120 "${train[@]}" logger.log_dir="$work/run" task.reward.timeout_s=2 "$@" \
    "task.reward.command=[python3, $misbehaving, $mode, $marker]" > /dev/null 2> "$work/err" || status=$?
  local left
  left=$(orphans)
  if [ "$status" -ne 1 ]; then
    fail "$name: exit status $status, expected 1"; tail -n 5 "$work/err"
  elif ! grep -qE -- "$pattern" "$work/err"; then
    fail "$name: stderr does not match '$pattern'"; tail -n 5 "$work/err"
  elif ! grep -q "its stderr ends with:" "$work/err" || ! grep -q "misbehaving on request step3/" "$work/err"; then
    fail "$name: the worker's stderr is not in the message"; tail -n 5 "$work/err"
  elif ! grep -q '"step": 2' "$work/run/checkpoint/trainer_state.json" || [ "$(grep -c '"step"' "$work/run/metrics.jsonl")" -ne 2 ]; then
    fail "$name: the step-2 checkpoint and its 2 metrics lines are not what the run left"
  elif [ -n "$left" ]; then
    fail "$name: processes left behind: $left"
  else
    pass "$name ($((SECONDS - t0)) s)"
  fi
}
who="reward worker [0-9] \(pid [0-9]+, \`python3 [^\`]*misbehaving_worker.py"
misbehave "a worker that crashes" crash+child "$who.*\), request 'step3/p[01]/g[0-3]': exited with status 1 before answering.*"
misbehave "a reply that is not JSON" not_json "$who.*\), owing request 'step3/p[01]/g[0-3]' and [0-9]+ more: wrote a line that is not JSON: reward is 1"
misbehave "an id it was not sent" unknown_id "request 'step99/p0/g0': answered a request it was not sent"
misbehave "an id answered twice" repeat_id "request 'step3/p[01]/g[0-3]': answered this request twice"
misbehave "a reward out of range" inf "wrote a line that is not JSON: \{\"id\": \"step3/p[01]/g[0-3]\", \"reward\": 1e999\}"
misbehave "a reward that is not a number" string_reward "request 'step3/p[01]/g[0-3]': the reply's \"reward\" must be a finite number, got \"high\""
misbehave "a metric that is not a number" bad_metric "metric \"format\" must have a non-empty name and a finite number, got null"
misbehave "megabytes without a newline" flood+child "wrote more than task.reward.max_line_bytes = 1048576 bytes without a newline"
misbehave "a worker that exits while owing replies" exit_idle "exited with status 0 before answering"
misbehave "a missing reply" missing+child "request 'step3/p[01]/g[0-3]': no reply within task.reward.timeout_s = 2 s"

# -- on_timeout: zero: late replies count as reward 0, the worker is replaced, the run goes on --------
rm -rf "$work/run"
"${train[@]}" logger.log_dir="$work/run" task.reward.timeout_s=1 task.reward.on_timeout=zero \
  "task.reward.command=[python3, $misbehaving, slow+child, $marker]" > /dev/null 2> "$work/err"
if [ "$(grep -o '"reward_timeouts":[0-9]*' "$work/run/metrics.jsonl" | tr '\n' ' ')" = '"reward_timeouts":0 "reward_timeouts":1 "reward_timeouts":0 "reward_timeouts":0 ' ] &&
   [ -z "$(orphans)" ]; then
  pass "on_timeout: zero counts the late reply in reward_timeouts and finishes the run"
else
  fail "on_timeout: zero: $(grep -o '"reward_timeouts":[0-9]*' "$work/run/metrics.jsonl" | tr '\n' ' ') $(orphans)"
fi

# -- workers that cannot start: the error before anything is written ---------------------------------
expect_start_error() {
  local name=$1 pattern=$2 status=0
  shift 2
  rm -rf "$work/run"
  "${train[@]}" logger.log_dir="$work/run" "$@" > /dev/null 2> "$work/err" || status=$?
  if [ "$status" -eq 1 ] && grep -qE -- "$pattern" "$work/err" && [ ! -e "$work/run/metrics.jsonl" ]; then
    pass "$name"
  else
    fail "$name: exit $status"; tail -n 3 "$work/err"
  fi
}
expect_start_error "a program that does not exist" "reward worker 0: cannot start \`no-such-program x.py\`: 'no-such-program' is not an executable file on PATH" \
  "task.reward.command=[no-such-program, x.py]"
expect_start_error "a script that does not exist" "reward worker [01] .*request 'val/[01]': exited with status 2 before answering; its stderr ends with:" \
  "task.reward.command=[python3, $work/no-such-script.py]"

# -- signals: the run stops, the workers and their children with it ------------------------------------
# interrupt SIGNAL EXPECTED_STATUS: a run whose worker hangs at step 3, signalled once it is there.
interrupt() {
  local sig=$1 expected=$2 status=0
  rm -rf "$work/run"
  "${train[@]}" logger.log_dir="$work/run" task.reward.timeout_s=600 \
    "task.reward.command=[python3, $misbehaving, missing$3, $marker]" > /dev/null 2> "$work/err" &
  local pid=$!
  # Step 2's line written: step 3's requests (which the worker never answers) follow at once.
  for _ in $(seq 300); do [ "$(grep -c '"step"' "$work/run/metrics.jsonl" 2> /dev/null)" = 2 ] && break; sleep 0.1; done
  sleep 0.5
  kill -"$sig" $pid
  wait $pid 2> /dev/null || status=$?
  sleep 0.5  # PR_SET_PDEATHSIG is delivered asynchronously
  local left
  left=$(orphans)
  local said="stopped by SIG$sig; plug-in workers ended"
  [ "$sig" = KILL ] && said="^"  # nothing runs on SIGKILL
  if [ "$status" -eq "$expected" ] && [ -z "$left" ] && grep -q '"step": 2' "$work/run/checkpoint/trainer_state.json" &&
     { [ "$sig" = KILL ] || grep -q "$said" "$work/err"; }; then
    pass "$sig during a step: exit $status, no process left, the step-2 checkpoint kept"
  else
    fail "$sig: exit $status (expected $expected), left: $left"; tail -n 3 "$work/err"
  fi
}
interrupt INT 130 +child
interrupt TERM 143 +child
interrupt KILL 137 ""  # a worker's own children are its to end: kill -9 reaches only the workers

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "every plug-in failure handled"
