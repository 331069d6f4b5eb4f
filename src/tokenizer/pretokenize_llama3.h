// The Llama-3 / GPT-4 pre-tokenizer: the `Split` pattern of their tokenizer.json,
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
//
// and Qwen2 / Qwen3's, the same with `\p{N}` (one digit per piece) for `\p{N}{1,3}`,
// with "Isolated" behaviour, implemented by hand as a scanner (std::regex has no \p{..}). Every
// character is matched by some alternative, so the pieces cover the text exactly: concatenated
// they give it back.
//
// Character classes, on code points decoded from UTF-8:
//   \p{L}, \p{N}  general categories L* and N* (tokenizer/unicode_categories.inc, generated from
//                 Python's unicodedata; `unicode_table_version()` says which Unicode version);
//   \s            the White_Space property (PropList.txt), as in Oniguruma and Rust's regex:
//                 U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
//                 U+2029, U+202F, U+205F, U+3000. (JavaScript's \s differs: it adds U+FEFF and
//                 leaves out U+0085.)
//   (?i:...)      ASCII case-insensitive: 's 'S 'll 'LL 'Ll ...
// A byte that does not start a valid UTF-8 sequence counts as one character of no class (like
// punctuation), so any bytes split, and round-trip.
#pragma once

#include <string_view>
#include <vector>

namespace fp8rl {

enum class UnicodeClass : unsigned char { kOther, kLetter, kNumber };

UnicodeClass unicode_class(char32_t cp);
bool unicode_is_white_space(char32_t cp);
const char* unicode_table_version();

// The pattern's matches in order; views into `text`. `max_digits`: 3 for Llama 3's \p{N}{1,3},
// 1 for Qwen's \p{N}.
std::vector<std::string_view> pretokenize_llama3(std::string_view text, size_t max_digits = 3);

}  // namespace fp8rl
