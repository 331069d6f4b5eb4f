"""Reward functions and environments for fp8rl, as plain Python functions.

fp8rl starts a plug-in as long-lived worker processes and speaks JSON Lines with them over
stdin/stdout (docs/tasks.md). This module is the Python side of that protocol, with no
dependency beyond the standard library:

    import fp8rl_plugin

    @fp8rl_plugin.reward
    def score(prompt, response, data):
        return 1.0 if response.strip() == data["answer"] else 0.0   # or (reward, {"name": value})

    fp8rl_plugin.serve()

and for a multi-turn environment:

    @fp8rl_plugin.environment
    def step(prompt, transcript, turn, data):
        if "calc(" in transcript:                 # the model asked for a tool
            return "= 42"                           # an observation: appended to the sample
        return fp8rl_plugin.done()                  # the sample ends; its reward comes from task.reward
        # or fp8rl_plugin.done(reward=0.5)          # the sample ends with this reward

An exception in the function ends the worker with its traceback on stderr: fp8rl stops the run
and shows that traceback with the request it was answering. Printing to stdout would corrupt the
protocol, so print() inside the functions goes to stderr.
"""

import json
import math
import sys
import traceback

__all__ = ["reward", "environment", "done", "serve"]

_handler = None
_kind = None


def reward(fn):
    """Registers fn(prompt, response, data) -> float | (float, {name: float}) as the reward."""
    return _register(fn, "reward")


def environment(fn):
    """Registers fn(prompt, transcript, turn, data) -> str (an observation) | done(...)."""
    return _register(fn, "environment")


def done(reward=None):
    """The environment's answer that ends a sample, with its reward or without (task.reward scores it)."""
    out = {"done": True}
    if reward is not None:
        out["reward"] = float(reward)
    return out


def _register(fn, kind):
    global _handler, _kind
    if _handler is not None:
        raise RuntimeError(f"fp8rl_plugin: a {_kind} function is registered already")
    _handler, _kind = fn, kind
    return fn


def _reward_reply(request):
    result = _handler(request["prompt"], request["response"], request.get("data", {}))
    metrics = {}
    if isinstance(result, tuple):
        result, metrics = result
    value = float(result)
    if not math.isfinite(value):
        raise ValueError(f"the reward of request {request['id']!r} is {value}")
    reply = {"id": request["id"], "reward": value}
    if metrics:
        reply["metrics"] = {str(k): float(v) for k, v in metrics.items()}
    return reply


def _environment_reply(request):
    result = _handler(request["prompt"], request["transcript"], request["turn"], request.get("data", {}))
    if isinstance(result, str):
        return {"id": request["id"], "observation": result}
    if isinstance(result, dict) and result.get("done"):
        return {"id": request["id"], **result}
    raise TypeError(f"an environment returns a str (an observation) or fp8rl_plugin.done(...), got {result!r}")


def serve():
    """Answers requests on stdin until it closes (fp8rl closes it when the run ends)."""
    if _handler is None:
        raise RuntimeError("fp8rl_plugin.serve(): decorate a function with @reward or @environment first")
    answer = _reward_reply if _kind == "reward" else _environment_reply
    out = sys.stdout
    sys.stdout = sys.stderr  # print() in the user's function must not reach the protocol
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            reply = answer(request)
        except Exception:
            traceback.print_exc()
            print(f"fp8rl_plugin: the {_kind} function failed on request {request.get('id')!r}", file=sys.stderr)
            sys.stderr.flush()
            sys.exit(1)
        out.write(json.dumps(reply) + "\n")
        out.flush()
