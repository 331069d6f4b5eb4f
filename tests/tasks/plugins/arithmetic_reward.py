"""The built-in arithmetic verifier as a reward plug-in (fp8rl_plugin): a run scored by it must
be the same bits as one scored by the built-in verifier. Reports one metric, "has_digits"."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import fp8rl_plugin  # noqa: E402


@fp8rl_plugin.reward
def score(prompt, response, data):
    leading = re.match(r"-?[0-9]*", response).group(0)
    return float(leading == data["answer"]), {"has_digits": float(any(c.isdigit() for c in response))}


fp8rl_plugin.serve()
