#!/usr/bin/python3
"""Python's unicodedata NFC, which fp8rl's nfc_normalize (src/tokenizer/unicode_nfc.cc) is checked
against.

Usage (run by tests/tasks/unicode_nfc_test.cc with Debian's /usr/bin/python3):
  nfc_check.py IN OUT
IN holds UTF-8 strings separated by "\\n" (none contains one). OUT gets the Unicode version of this
Python's unicodedata on its first line, then unicodedata.normalize('NFC', s) of each string, one a
line, in order.
"""
import sys
import unicodedata


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    with open(dst, "wb") as f:
        out = [unicodedata.unidata_version] + [unicodedata.normalize("NFC", s) for s in lines]
        f.write("\n".join(out).encode("utf-8"))


if __name__ == "__main__":
    main()
