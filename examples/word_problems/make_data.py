"""Writes the word-problem task of the plug-in example (docs/tasks.md): one-step arithmetic stories
whose answers show the working and end GSM8K-style, "3+5=8 #### 8". Half of the training answers
stop after the working ("3+5=8"), so that a model warm-started on them uses the format half of the
time: what the reward's partial credit for the format then teaches.

    python3 examples/word_problems/make_data.py OUT_DIR [--train 5000] [--val 200] [--seed 1]

writes OUT_DIR/train.jsonl and OUT_DIR/val.jsonl, {"prompt", "answer", "final"} per line (the
reward plug-in reads "final"; validation answers always have the format). The same seed writes the
same files; validation prompts are not in the training set."""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from splits import arguments, write_splits  # noqa: E402

NAMES = ["Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lu", "Max", "Ned", "Oli", "Pam"]
THINGS = ["apples", "pens", "cards", "coins", "books", "shells", "stamps", "beads"]


def story(rng):
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kind = rng.choice(["more", "fewer", "groups"])
    if kind == "more":
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        text = f"{name} has {a} {thing}. {name} gets {b} more. How many {thing} does {name} have now?"
        work, final = f"{a}+{b}={a + b}", a + b
    elif kind == "fewer":
        a = rng.randint(10, 90)
        b = rng.randint(1, a - 1)
        text = f"{name} has {a} {thing} and gives {b} away. How many {thing} are left?"
        work, final = f"{a}-{b}={a - b}", a - b
    else:
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        text = f"{name} fills {a} bags with {b} {thing} each. How many {thing} is that?"
        work, final = f"{a}*{b}={a * b}", a * b
    formatted = rng.random() < 0.5
    return {"prompt": text, "answer": f"{work} #### {final}" if formatted else work, "final": str(final)}


def main():
    args = arguments(__doc__)
    rng = random.Random(args.seed)
    val, seen = [], set()
    while len(val) < args.val:
        x = story(rng)
        if x["prompt"] not in seen:
            seen.add(x["prompt"])
            val.append(dict(x, answer=x["answer"].split(" ####")[0] + f" #### {x['final']}"))
    train = []
    while len(train) < args.train:
        x = story(rng)
        if x["prompt"] not in seen:
            train.append(x)
    write_splits(args.out_dir, train, val)


if __name__ == "__main__":
    main()
