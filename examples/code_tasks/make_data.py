"""Writes the code task of the sandbox example (docs/tasks.md): write a one-line Python function from
its description, scored by unit tests in the sandbox (task.reward.builtin: python_tests).

    python3 examples/code_tasks/make_data.py OUT_DIR [--train 5000] [--val 200] [--seed 1]

writes OUT_DIR/train.jsonl and OUT_DIR/val.jsonl (validation: the 45 (form, constant) pairs that
training never shows): {"prompt", "answer" (a reference solution, for
the supervised warm start), "tests": [{"call": "f(3)", "expected": "10"}, ...]} per line. The
expected values are computed here, by the reference solution."""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from splits import arguments, write_splits  # noqa: E402

# (description, body) with the constant A.
FORMS = [
    ("add {A} to x", "x + {A}"),
    ("subtract {A} from x", "x - {A}"),
    ("multiply x by {A}", "x * {A}"),
    ("{A} minus x", "{A} - x"),
    ("square x, then add {A}", "x * x + {A}"),
    ("x modulo {A}", "x % {A}"),
    ("the larger of x and {A}", "max(x, {A})"),
    ("the smaller of x and {A}", "min(x, {A})"),
    ("x times x times {A}", "x * x * {A}"),
    ("double x, then subtract {A}", "2 * x - {A}"),
]
CALLS = [0, 1, 2, 5, -3, 11]


def task(form, A):
    words, body = FORMS[form]
    body = body.format(A=A)
    solution = f"def f(x):\n    return {body}"
    scope = {}
    exec(solution, scope)
    tests = [{"call": f"f({c})", "expected": repr(scope["f"](c))} for c in CALLS]
    return {"prompt": f"Write f(x) in Python: {words.format(A=A)}.", "answer": solution, "tests": tests}


def main():
    args = arguments(__doc__)
    rng = random.Random(args.seed)
    # 10 forms x 18 constants: validation holds out a quarter of the (form, constant) pairs, which
    # training never shows (the model must write the form with a constant it has not seen there).
    pairs = [(form, A) for form in range(len(FORMS)) for A in range(2, 20)]
    rng.shuffle(pairs)
    held_out = pairs[: len(pairs) // 4]
    seen = pairs[len(pairs) // 4:]
    val = [task(*held_out[i % len(held_out)]) for i in range(min(args.val, len(held_out)))]
    train = [task(*rng.choice(seen)) for _ in range(args.train)]
    write_splits(args.out_dir, train, val)


if __name__ == "__main__":
    main()
