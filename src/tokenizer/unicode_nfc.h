// Unicode Normalization Form C (UAX #15): the `{"type": "NFC"}` normalizer of Hugging Face
// tokenizer.json files (Qwen3's among them), applied before pre-tokenization.
//
// NFC = canonical decomposition (recursive, Hangul syllables algorithmically), canonical
// ordering (each run of non-starters stably sorted by combining class), then canonical
// composition (each character joins the last starter unless blocked; primary composites only;
// Hangul L+V and LV+T algorithmically). The tables are tokenizer/unicode_nfc.inc, generated from
// Python's unicodedata by tools/gen_unicode_nfc.py, from the same Unicode version as the
// pre-tokenizer's category tables.
//
// Input is bytes meant as UTF-8. A byte that does not start a valid, shortest-form UTF-8 sequence
// of a scalar value (stray continuation bytes, overlong forms, surrogates, > U+10FFFF, truncated
// sequences) is copied through unchanged and is a barrier: nothing is reordered or composed across
// it, as if the text were split there, each piece normalized, and the pieces joined.
#pragma once

#include <string>
#include <string_view>

namespace fp8rl {

// The NFC form of `utf8` (see above for invalid bytes).
std::string nfc_normalize(std::string_view utf8);

// True when NFC is guaranteed to leave `utf8` unchanged without looking further: it has no code
// point at or above U+0300 (no UTF-8 lead byte >= 0xCC), the bound below which the generator
// verified every code point is NFC in any context. False says nothing (the text may well be NFC).
bool nfc_is_unchanged_fast(std::string_view utf8);

// The Unicode version of the tables, e.g. "14.0.0".
const char* nfc_unicode_version();

}  // namespace fp8rl
