#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "tokenizer/utf8.h"

namespace fp8rl {
namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;  // second == 0: singleton
};
struct CompositionPair {
  char32_t first, second, composite;
};
#include "tokenizer/unicode_nfc.inc"

// The fast paths look at bytes, not code points: a code point >= kNfcQuickBound (a multiple of 64
// below U+0800) has a lead byte >= kQuickLeadByte, and every byte of a smaller one, or of an
// invalid sequence that starts below it, is smaller.
static_assert(kNfcQuickBound >= 0x80 && kNfcQuickBound < 0x800 && kNfcQuickBound % 64 == 0);
constexpr unsigned char kQuickLeadByte = static_cast<unsigned char>(0xC0 | (kNfcQuickBound >> 6));

// Hangul syllables decompose and compose by arithmetic (Unicode chapter 3.12): S = SBase +
// (L index * VCount + V index) * TCount + T index, with T index 0 meaning no trailing consonant.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;
static_assert(kMaxDecompositionLength >= 3, "a Hangul LVT syllable decomposes into 3 jamo");

// A code point of the segment being normalized, with its canonical combining class looked up once.
struct Unit {
  char32_t cp;
  uint8_t ccc;
};

uint8_t ccc_of(char32_t cp) {
  if (cp < kNfcQuickBound) return 0;
  const auto* it = std::upper_bound(std::begin(kCccRanges), std::end(kCccRanges), cp,
                                    [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == std::begin(kCccRanges)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

// Writes the full canonical decomposition of `cp` to out[0..n) and returns n, at most
// kMaxDecompositionLength (the generator checked every code point).
int decompose(char32_t cp, char32_t* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase, t = s % kTCount;
    out[0] = kLBase + s / (kVCount * kTCount);
    out[1] = kVBase + (s % (kVCount * kTCount)) / kTCount;
    if (t == 0) return 2;
    out[2] = kTBase + t;
    return 3;
  }
  const auto* it = std::lower_bound(std::begin(kCanonicalDecompositions), std::end(kCanonicalDecompositions), cp,
                                    [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != std::end(kCanonicalDecompositions) && it->cp == cp) {
    const int n = decompose(it->first, out);
    return it->second ? n + decompose(it->second, out + n) : n;
  }
  out[0] = cp;
  return 1;
}

// The primary composite of (first, second), or 0 when there is none.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto key = std::pair(first, second);
  const auto* it =
      std::lower_bound(std::begin(kCompositionPairs), std::end(kCompositionPairs), key,
                       [](const CompositionPair& p, const auto& k) { return std::pair(p.first, p.second) < k; });
  if (it != std::end(kCompositionPairs) && it->first == first && it->second == second) return it->composite;
  return 0;
}

// Whether `cp` can compose with a starter before it: the second of a composition pair, or a
// Hangul V or T jamo.
bool combines_backward(char32_t cp) {
  if ((cp >= kVBase && cp < kVBase + kVCount) || (cp > kTBase && cp < kTBase + kTCount)) return true;
  return std::binary_search(std::begin(kCompositionSeconds), std::end(kCompositionSeconds), cp);
}

// Canonically orders and composes `seg` (fully decomposed code points, starting at a boundary:
// nothing before it can interact with it), appends it to `out` as UTF-8 and empties it.
void flush_segment(std::vector<Unit>& seg, std::string& out) {
  const size_t n = seg.size();
  // Canonical ordering: a stable insertion sort of each run of non-starters by ccc; runs are a
  // few marks long. A starter (ccc 0) never moves and nothing moves across it.
  for (size_t i = 1; i < n; ++i)
    for (size_t j = i; j > 0 && seg[j].ccc != 0 && seg[j - 1].ccc > seg[j].ccc; --j) std::swap(seg[j - 1], seg[j]);

  // Canonical composition, in place: seg[0..w) is the output so far, seg[starter] its last
  // starter. A character between the starter and c blocks c when its ccc is 0 or >= c's; after
  // ordering, everything left between them is a non-starter of ccc <= c's (a starter there would
  // be the last starter), so only the one just before c needs looking at.
  size_t w = 0, starter = SIZE_MAX;
  for (size_t r = 0; r < n; ++r) {
    const Unit c = seg[r];
    if (starter != SIZE_MAX && (w == starter + 1 || seg[w - 1].ccc < c.ccc)) {
      if (const char32_t composite = compose(seg[starter].cp, c.cp)) {
        seg[starter].cp = composite;  // a primary composite is a starter (the generator checks)
        continue;
      }
    }
    if (c.ccc == 0) starter = w;
    seg[w++] = c;
  }
  for (size_t i = 0; i < w; ++i) append_utf8(out, seg[i].cp);
  seg.clear();
}

}  // namespace

bool nfc_is_unchanged_fast(std::string_view utf8) {
  const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
  const size_t n = utf8.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // ASCII-only words skip the per-byte test
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    if ((word & 0x8080808080808080ull) == 0) continue;
    for (size_t k = 0; k < 8; ++k)
      if (p[i + k] >= kQuickLeadByte) return false;
  }
  for (; i < n; ++i)
    if (p[i] >= kQuickLeadByte) return false;
  return true;
}

std::string nfc_normalize(std::string_view utf8) {
  if (nfc_is_unchanged_fast(utf8)) return std::string(utf8);
  std::string out;
  out.reserve(utf8.size() + utf8.size() / 8);
  // The decomposed code points since the last boundary: a position before which nothing can
  // reorder or compose with what follows. Flushed at each boundary, so it holds a starter and its
  // marks, not the text.
  std::vector<Unit> seg;
  seg.reserve(32);
  for (size_t i = 0; i < utf8.size();) {
    const auto [cp, len] = decode_utf8(utf8, i);
    if (len == 0) {  // invalid byte: a barrier, copied through
      flush_segment(seg, out);
      out += utf8[i++];
      continue;
    }
    const size_t next = i + static_cast<size_t>(len);
    if (cp < kNfcQuickBound) {
      // Below the bound a code point is a starter that combines with nothing before it: a
      // boundary. When the next byte starts nothing at or above the bound, no mark follows
      // either and the character is final as it stands.
      flush_segment(seg, out);
      if (next == utf8.size() || static_cast<unsigned char>(utf8[next]) < kQuickLeadByte) {
        out.append(utf8.data() + i, static_cast<size_t>(len));
        i = next;
        continue;
      }
    }
    char32_t parts[kMaxDecompositionLength];
    const int count = decompose(cp, parts);
    const uint8_t first_ccc = ccc_of(parts[0]);
    if (first_ccc == 0 && !combines_backward(parts[0])) flush_segment(seg, out);  // a boundary
    seg.push_back({parts[0], first_ccc});
    for (int k = 1; k < count; ++k) seg.push_back({parts[k], ccc_of(parts[k])});
    i = next;
  }
  flush_segment(seg, out);
  return out;
}

const char* nfc_unicode_version() { return kNfcUnicodeVersion; }

}  // namespace fp8rl
