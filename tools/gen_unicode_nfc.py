#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_nfc.inc: the tables behind fp8rl's NFC normalizer (UAX #15),
src/tokenizer/unicode_nfc.cc.

The data is Python's `unicodedata`, whose Unicode version is written into the file and must equal
the version of src/tokenizer/unicode_categories.inc (tools/gen_unicode_categories.py), so that the
tokenizer's normalizer and pre-tokenizer agree on which characters exist; the script fails
otherwise. Run from the repository root with the python3 first on PATH:

    python3 tools/gen_unicode_nfc.py > src/tokenizer/unicode_nfc.inc

Tables:
  kCccRanges             maximal ranges of equal canonical combining class != 0, sorted.
  kCanonicalDecompositions  one level of each canonical (not <compat>) decomposition, sorted by
                         code point; `second` is 0 for singletons. Hangul syllables are left out:
                         the C++ code decomposes them algorithmically.
  kCompositionPairs      (first, second) -> primary composite, sorted by (first, second): the
                         two-code-point decompositions whose composite is not in the full
                         composition exclusion set. Hangul is algorithmic here too.
  kCompositionSeconds    the distinct `second`s of kCompositionPairs, sorted: the characters that
                         can combine with a preceding starter (NFC_Quick_Check=Maybe, less
                         Hangul V and T jamo).
  kNfcQuickBound         every code point below it is unchanged by NFC in any context; checked
                         here, relied on by the C++ fast path.

Every claim the C++ code relies on is asserted below; a new Unicode version that breaks one makes
this script fail rather than write a wrong table.
"""
import re
import sys
import unicodedata
from pathlib import Path

NFC_QUICK_BOUND = 0x300
HANGUL_S_BASE, HANGUL_S_COUNT = 0xAC00, 11172
# The most code points one character decomposes into (fully, recursively); the C++ code sizes a
# stack buffer by it. Hangul syllables give 3.
MAX_DECOMPOSITION_LENGTH = 4


def is_hangul_syllable(cp):
    return HANGUL_S_BASE <= cp < HANGUL_S_BASE + HANGUL_S_COUNT


def categories_version():
    """The Unicode version written into unicode_categories.inc, which this file must match."""
    inc = Path(__file__).resolve().parent.parent / "src/tokenizer/unicode_categories.inc"
    m = re.search(r'kUnicodeVersion\[\] = "([0-9.]+)"', inc.read_text())
    if not m:
        sys.exit("gen_unicode_nfc.py: no kUnicodeVersion line in %s" % inc)
    return m.group(1)


def ccc_ranges():
    out = []  # [first, last, ccc], maximal, sorted
    for cp in range(0x110000):
        ccc = unicodedata.combining(chr(cp))
        if ccc == 0:
            continue
        if out and out[-1][2] == ccc and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp, ccc])
    return out


def canonical_decompositions():
    out = []  # (cp, first, second or 0)
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if is_hangul_syllable(cp):
            assert d == "", "U+%04X: Hangul syllable with a table decomposition" % cp
            continue
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, "U+%04X: canonical decomposition of %d code points" % (cp, len(parts))
        out.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
    return out


def composition_pairs(decomps):
    # A two-code-point decomposition is a composition pair iff its composite survives NFC of its
    # own NFD: exactly the characters outside the full composition exclusion set (singletons are
    # one code point; non-starter decompositions and CompositionExclusions.txt decompose for good).
    out = []
    for cp, a, b in decomps:
        if b and unicodedata.normalize("NFC", unicodedata.normalize("NFD", chr(cp))) == chr(cp):
            assert unicodedata.combining(chr(cp)) == 0 and unicodedata.combining(chr(a)) == 0, \
                "U+%04X: primary composite or its first element is not a starter" % cp
            out.append((a, b, cp))
    out.sort()
    for i in range(1, len(out)):
        assert out[i - 1][:2] != out[i][:2], "two composites for one pair"
    return out


def full_decomposition(cp, table):
    if is_hangul_syllable(cp):
        return list(unicodedata.normalize("NFD", chr(cp)))
    if cp not in table:
        return [chr(cp)]
    a, b = table[cp]
    return full_decomposition(a, table) + (full_decomposition(b, table) if b else [])


def canonical_order(chars):
    """Stable sort of each run of non-starters by ccc (UAX #15 canonical ordering)."""
    out = list(chars)
    for i in range(1, len(out)):
        j = i
        while j > 0 and unicodedata.combining(out[j - 1]) > unicodedata.combining(out[j]) > 0:
            out[j - 1], out[j] = out[j], out[j - 1]
            j -= 1
    return out


def check_decompositions(decomps):
    """Recursive expansion of the one-level table is NFD of every single character, before
    canonical ordering; and no character expands past MAX_DECOMPOSITION_LENGTH."""
    table = {cp: (a, b) for cp, a, b in decomps}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        full = full_decomposition(cp, table)
        assert len(full) <= MAX_DECOMPOSITION_LENGTH, "U+%04X decomposes into %d" % (cp, len(full))
        assert "".join(canonical_order(full)) == unicodedata.normalize("NFD", chr(cp)), \
            "U+%04X: NFD mismatch" % cp


def check_quick_bound(pairs):
    """Every code point below NFC_QUICK_BOUND is unchanged by NFC in any context: a starter
    (ccc 0), not the second element of a composition pair (nor a Hangul V/T jamo, which are far
    above), and its own NFC. Then NFC leaves any string of them alone, and a code point at or above
    the bound is needed for anything to change."""
    seconds = {b for _, b, _ in pairs}
    for cp in range(NFC_QUICK_BOUND):
        c = chr(cp)
        assert unicodedata.combining(c) == 0, "U+%04X below the quick bound has ccc != 0" % cp
        assert cp not in seconds, "U+%04X below the quick bound composes with a preceding starter" % cp
        assert unicodedata.normalize("NFC", c) == c, "U+%04X below the quick bound changes under NFC" % cp
    # The bound is tight: U+0300 is the first combining mark.
    assert unicodedata.combining(chr(NFC_QUICK_BOUND)) != 0
    # Belt and braces: every pair of printable code points below the bound is NFC already.
    sample = [chr(cp) for cp in range(0x20, NFC_QUICK_BOUND) if not (0x7F <= cp < 0xA0)]
    for a in sample:
        for b in sample:
            assert unicodedata.is_normalized("NFC", a + b), "U+%04X U+%04X not NFC" % (ord(a), ord(b))


def write_rows(w, entries, per_line):
    for i in range(0, len(entries), per_line):
        w("   " + "".join(" " + e + "," for e in entries[i:i + per_line]) + "\n")


def main():
    version = unicodedata.unidata_version
    if version != categories_version():
        sys.exit("gen_unicode_nfc.py: this Python has Unicode %s but unicode_categories.inc was made "
                 "from Unicode %s; run both generators with the same interpreter"
                 % (version, categories_version()))
    cccs = ccc_ranges()
    decomps = canonical_decompositions()
    pairs = composition_pairs(decomps)
    seconds = sorted({b for _, b, _ in pairs})
    check_decompositions(decomps)
    check_quick_bound(pairs)

    w = sys.stdout.write
    w("// Generated by tools/gen_unicode_nfc.py from Python's unicodedata, Unicode %s. Do not edit.\n" % version)
    w("// Same Unicode version as unicode_categories.inc (the generator checks it).\n")
    w("// Included where CccRange {char32_t first, last; uint8_t ccc;}, Decomposition {char32_t cp,\n")
    w("// first, second;} and CompositionPair {char32_t first, second, composite;} are visible.\n")
    w("inline constexpr char kNfcUnicodeVersion[] = \"%s\";\n" % version)
    w("// Every code point below this is unchanged by NFC in any context (verified by the generator).\n")
    w("inline constexpr char32_t kNfcQuickBound = 0x%04X;\n" % NFC_QUICK_BOUND)
    w("// The most code points one character fully decomposes into.\n")
    w("inline constexpr int kMaxDecompositionLength = %d;\n" % MAX_DECOMPOSITION_LENGTH)
    w("\n// Canonical combining class != 0: %d maximal ranges, sorted.\n" % len(cccs))
    w("inline constexpr CccRange kCccRanges[] = {\n")
    write_rows(w, ["{0x%05X, 0x%05X, %d}" % (a, b, c) for a, b, c in cccs], 4)
    w("};\n")
    w("\n// Canonical decompositions, one level, sorted by code point; second 0 = singleton: %d entries.\n"
      % len(decomps))
    w("inline constexpr Decomposition kCanonicalDecompositions[] = {\n")
    write_rows(w, ["{0x%05X, 0x%05X, 0x%05X}" % d for d in decomps], 4)
    w("};\n")
    w("\n// Primary composites by (first, second), sorted: %d pairs.\n" % len(pairs))
    w("inline constexpr CompositionPair kCompositionPairs[] = {\n")
    write_rows(w, ["{0x%05X, 0x%05X, 0x%05X}" % p for p in pairs], 4)
    w("};\n")
    w("\n// The distinct second elements of kCompositionPairs, sorted: %d code points.\n" % len(seconds))
    w("inline constexpr char32_t kCompositionSeconds[] = {\n")
    write_rows(w, ["0x%05X" % s for s in seconds], 10)
    w("};\n")


if __name__ == "__main__":
    main()
