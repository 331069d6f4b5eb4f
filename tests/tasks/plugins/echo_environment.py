"""A deterministic test environment (tests/cli/multi_turn_test.sh, tests/dist/data_parallel_test.sh):
turn 1 is answered with the observation "[1:N]" (N: the transcript's length), turn 2 ends the
sample, with reward 0.5 when the sample's id has an even sample number, else without a reward
(task.reward scores it). argv[1], if given, names a misbehaviour at turn 2 of step 2."""
import json
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""


def reply(request):
    rid, turn = request["id"], request["turn"]
    if mode and rid.startswith("step2/") and turn == 2:
        print(f"misbehaving on request {rid}", file=sys.stderr, flush=True)
        if mode == "crash":
            raise RuntimeError("the environment crashed")
        if mode == "neither":
            return {"id": rid, "reward": 1.0}
        if mode == "unencodable":
            return {"id": rid, "observation": "caf\u00e9\t"}
    if turn == 1:
        return {"id": rid, "observation": f"[1:{len(request['transcript'])}]"}
    sample = int(rid.split("/g")[1].split("/")[0]) if "/g" in rid else 0
    return {"id": rid, "done": True, "reward": 0.5} if sample % 2 == 0 else {"id": rid, "done": True}


for line in sys.stdin:
    sys.stdout.write(json.dumps(reply(json.loads(line))) + "\n")
    sys.stdout.flush()
