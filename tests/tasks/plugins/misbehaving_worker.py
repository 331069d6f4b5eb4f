"""A reward worker that answers like a good one until a request of step 3 (ids "step3/..."), then
misbehaves in the way argv[1] names. argv[2] is a marker the test finds the processes by; with
"+child" in argv[1] the worker also starts a grandchild (sleep) that must not outlive the run.
Used by tests/cli/plugin_failures_test.sh."""
import json
import os
import subprocess
import sys
import time

mode = sys.argv[1]
if "+child" in mode:
    mode = mode.replace("+child", "")
    subprocess.Popen(["sh", "-c", "sleep 300; true", sys.argv[2]])  # in the worker's process group
print(f"misbehaving worker {os.getpid()}: mode {mode}", file=sys.stderr, flush=True)


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    rid = request["id"]
    good = {"id": rid, "reward": float(request["response"].strip() == request["data"]["answer"])}
    if not rid.startswith("step3/"):
        if mode == "slow" and rid.startswith("step2/p0/g0"):
            time.sleep(3)  # past task.reward.timeout_s: scored 0 with on_timeout: zero
        reply(good)
        continue
    print(f"misbehaving on request {rid}", file=sys.stderr, flush=True)
    if mode == "crash":
        raise RuntimeError("the reward function crashed")
    elif mode == "not_json":
        sys.stdout.write("reward is 1\n")
        sys.stdout.flush()
    elif mode == "unknown_id":
        reply({"id": "step99/p0/g0", "reward": 1.0})
    elif mode == "repeat_id":
        reply(good)
        reply(good)
    elif mode == "inf":
        sys.stdout.write('{"id": "%s", "reward": 1e999}\n' % rid)
        sys.stdout.flush()
    elif mode == "string_reward":
        reply({"id": rid, "reward": "high"})
    elif mode == "bad_metric":
        reply({"id": rid, "reward": 1.0, "metrics": {"format": None}})
    elif mode == "missing":
        time.sleep(600)
    elif mode == "flood":
        sys.stdout.write("x" * (5 << 20))
        sys.stdout.flush()
        time.sleep(600)
    elif mode == "exit_idle":
        sys.exit(0)
    else:
        reply(good)
