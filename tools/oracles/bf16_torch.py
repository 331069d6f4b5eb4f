#!/usr/bin/python3
"""BF16 rounding oracle: PyTorch's float32 -> bfloat16 conversion.

Usage: bf16_torch.py IN.f32 OUT.u16
Reads little-endian float32 values, writes the bfloat16 bit patterns PyTorch produces.
"""
import sys

import numpy as np
import torch


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: bf16_torch.py IN.f32 OUT.u16")
    x = np.fromfile(sys.argv[1], dtype="<f4")
    h = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().astype("<u2")
    h.tofile(sys.argv[2])


if __name__ == "__main__":
    main()
