"""What the example data scripts share: their command line and how they write their splits."""
import argparse
import json
import os


def arguments(doc):
    """OUT_DIR [--train N] [--val N] [--seed S] of a data script whose docstring is `doc`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=5000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


def write_splits(out_dir, train, val):
    """OUT_DIR/train.jsonl and OUT_DIR/val.jsonl, one JSON object per line."""
    os.makedirs(out_dir, exist_ok=True)
    for name, rows in (("train.jsonl", train), ("val.jsonl", val)):
        with open(os.path.join(out_dir, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
