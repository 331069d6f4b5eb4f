"""A calculator tool as a multi-turn environment (docs/tasks.md): when the model's turn ends with a
call such as calc(12+7) (task.environment.stop: [")"]), the observation is "=19"; a turn that ends
otherwise (the model's end of response) ends the sample, which task.reward then scores.

    task.environment.command: [python3, examples/calculator/calculator.py]

Expressions are integers joined by + - * (evaluated left to right with the usual precedence of *);
anything else gets "=?"."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import fp8rl_plugin  # noqa: E402

CALL = re.compile(r"calc\(([0-9+\-* ]{1,60})\)$")
TERM = re.compile(r"\s*(-?[0-9]+)\s*")


def evaluate(expr):
    """+, - and * over integers, * first; None if expr is not that."""
    sums, sign, pos = [], 1, 0
    product = None
    while True:
        m = TERM.match(expr, pos)
        if not m:
            return None
        value = int(m.group(1))
        product = value if product is None else product * value
        pos = m.end()
        if pos == len(expr):
            sums.append(sign * product)
            return sum(sums)
        op = expr[pos]
        pos += 1
        if op == "*":
            continue
        if op not in "+-":
            return None
        sums.append(sign * product)
        sign, product = (1 if op == "+" else -1), None


@fp8rl_plugin.environment
def step(prompt, transcript, turn, data):
    m = CALL.search(transcript)
    if not m:
        return fp8rl_plugin.done()
    value = evaluate(m.group(1))
    return "=?" if value is None else f"={value}"


fp8rl_plugin.serve()
