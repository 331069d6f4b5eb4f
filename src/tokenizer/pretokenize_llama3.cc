#include "tokenizer/pretokenize_llama3.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "tokenizer/utf8.h"

namespace fp8rl {
namespace {

struct UnicodeRange {
  char32_t first, last;
  UnicodeClass cls;
};
constexpr UnicodeClass L = UnicodeClass::kLetter;
constexpr UnicodeClass N = UnicodeClass::kNumber;
#include "tokenizer/unicode_categories.inc"

// One character of the text: its bytes and what the pattern's classes say about it.
struct Char {
  uint32_t begin, end;  // byte range in the text
  char32_t cp;          // the code point; 0xFFFFFFFF for a byte that starts no valid UTF-8
  UnicodeClass cls;
  bool space;  // \s
};

std::vector<Char> decode_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto [cp, len] = decode_utf8(text, i);
    if (len == 0) {
      chars.push_back(
          {static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1), 0xFFFFFFFF, UnicodeClass::kOther, false});
      ++i;
      continue;
    }
    chars.push_back(
        {static_cast<uint32_t>(i), static_cast<uint32_t>(i + len), cp, unicode_class(cp), unicode_is_white_space(cp)});
    i += len;
  }
  return chars;
}

// The length in characters of the pattern's match at chars[i]: at least 1, since every character
// is a letter, a number, \s or the rest ([^\s\p{L}\p{N}]).
size_t match_length(const std::vector<Char>& chars, size_t i, size_t max_digits) {
  const size_t n = chars.size();
  const auto cp_at = [&](size_t k) { return k < n ? chars[k].cp : 0; };
  const auto lower_at = [&](size_t k) { return cp_at(k) < 0x80 ? static_cast<char32_t>(cp_at(k) | 0x20) : 0; };
  const auto letter = [&](size_t k) { return k < n && chars[k].cls == UnicodeClass::kLetter; };
  const auto number = [&](size_t k) { return k < n && chars[k].cls == UnicodeClass::kNumber; };
  const auto space = [&](size_t k) { return k < n && chars[k].space; };
  const auto rest = [&](size_t k) { return k < n && !chars[k].space && chars[k].cls == UnicodeClass::kOther; };
  const auto newline = [&](size_t k) { return cp_at(k) == '\r' || cp_at(k) == '\n'; };
  const auto run_end = [&](size_t k, auto pred) {  // first index at or after k where pred fails
    while (pred(k)) ++k;
    return k;
  };

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (cp_at(i) == '\'') {
    const char32_t a = lower_at(i + 1), b = lower_at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (letter(i)) return run_end(i, letter) - i;
  if (!newline(i) && !number(i) && letter(i + 1)) return run_end(i + 1, letter) - i;
  // \p{N}{1,3} (Qwen: \p{N})
  if (number(i)) return std::min<size_t>(run_end(i, number) - i, max_digits);
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t first_rest = cp_at(i) == ' ' && rest(i + 1) ? i + 1 : i;
  if (rest(first_rest)) return run_end(run_end(first_rest, rest), newline) - i;
  // chars[i] is \s from here on; `end` is the end of its run.
  const size_t end = run_end(i, space);
  // \s*[\r\n]+ : \s* backtracks to the run's last newline, [\r\n]+ takes it (and nothing after).
  for (size_t k = end; k > i; --k)
    if (newline(k - 1)) return k - i;
  // \s+(?!\S) : the whole run before the end of the text, all but its last character before a
  // non-space (which needs a run of two or more).
  if (end == n) return end - i;
  if (end - i >= 2) return end - 1 - i;
  // \s+
  return end - i;
}

}  // namespace

std::vector<std::string_view> pretokenize_llama3(std::string_view text, size_t max_digits) {
  const std::vector<Char> chars = decode_chars(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < chars.size();) {
    const size_t len = match_length(chars, i, max_digits);
    pieces.push_back(text.substr(chars[i].begin, chars[i + len - 1].end - chars[i].begin));
    i += len;
  }
  return pieces;
}

UnicodeClass unicode_class(char32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return L;
    return cp >= '0' && cp <= '9' ? N : UnicodeClass::kOther;
  }
  const auto it = std::upper_bound(std::begin(kUnicodeRanges), std::end(kUnicodeRanges), cp,
                                   [](char32_t c, const UnicodeRange& r) { return c < r.first; });
  if (it == std::begin(kUnicodeRanges)) return UnicodeClass::kOther;
  const UnicodeRange& r = *(it - 1);
  return cp <= r.last ? r.cls : UnicodeClass::kOther;
}

bool unicode_is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

const char* unicode_table_version() { return kUnicodeVersion; }

}  // namespace fp8rl
