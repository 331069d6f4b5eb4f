"""The reward plug-in of the word-problem example (docs/tasks.md): full credit for the right final
number after "####", partial credit (0.1) for the format alone, nothing otherwise. Reports both
parts as metrics, which metrics.jsonl averages as reward_metrics.format and reward_metrics.correct.

    task.reward.command: [python3, examples/word_problems/reward.py]"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import fp8rl_plugin  # noqa: E402

FINAL = re.compile(r"####\s*(-?[0-9]+)\s*$")


@fp8rl_plugin.reward
def score(prompt, response, data):
    m = FINAL.search(response)
    formatted = m is not None
    correct = formatted and m.group(1) == data["final"]
    reward = 1.0 if correct else 0.1 if formatted else 0.0
    return reward, {"format": float(formatted), "correct": float(correct)}


fp8rl_plugin.serve()
