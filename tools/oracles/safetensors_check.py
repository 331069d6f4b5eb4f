#!/usr/bin/python3
"""An independent safetensors reader and writer (NumPy only) that fp8rl's own is checked against.

Debian has no `safetensors` package, so the format is parsed here in a few lines, written from
the format description rather than from fp8rl's code:

  u64 little-endian N | N bytes of JSON header | data buffer (offsets relative to its start)

Usage (run by tests/io/safetensors_oracle_test.cc with Debian's /usr/bin/python3):
  safetensors_check.py read FILE OUT.json   dump every tensor's dtype, shape and bytes (hex)
  safetensors_check.py write FILE           write the fixed tensors of `reference_tensors()`
"""
import json
import struct
import sys

import numpy as np

SIZES = {"F32": 4, "BF16": 2, "F8_E4M3": 1, "I32": 4, "U8": 1}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, spans = {}, []
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        assert end - begin == count * SIZES[entry["dtype"]], f"{name}: size mismatch"
        spans.append((begin, end))
        tensors[name] = {"dtype": entry["dtype"], "shape": entry["shape"], "hex": data[begin:end].hex()}
    covered = 0
    for begin, end in sorted(spans):
        assert begin == covered, f"data not contiguous at {begin}"
        covered = end
    assert covered == len(data), "trailing bytes after the last tensor"
    return {"metadata": metadata, "tensors": tensors}


def reference_tensors():
    """(name, safetensors dtype, numpy array holding the raw little-endian values)."""
    f32 = (np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.25) - np.float32(1.0))
    bf16_source = np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5)
    bf16 = (bf16_source.view(np.uint32) >> 16).astype(np.uint16)  # exact: these values fit BF16
    return [
        ("f32", "F32", f32),
        ("bf16", "BF16", bf16),
        ("e4m3", "F8_E4M3", np.arange(256, dtype=np.uint8).reshape(16, 16)),
        ("i32", "I32", np.array([-3, 0, 7, 2**31 - 1], dtype=np.int32)),
        ("u8_scalar", "U8", np.array(200, dtype=np.uint8)),
        ("empty", "F32", np.zeros((0, 5), dtype=np.float32)),
    ]


def write(path):
    # Another writer's conventions on purpose: data in reverse name order, header padded to 8.
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, array in sorted(reference_tensors(), key=lambda t: t[0], reverse=True):
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "read":
        with open(sys.argv[3], "w") as out:
            json.dump(read(sys.argv[2]), out)
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(__doc__)
