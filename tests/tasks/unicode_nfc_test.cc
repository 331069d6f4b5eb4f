// NFC normalization (tokenizer/unicode_nfc.h): published examples (UAX #15 and the Unicode
// normalization FAQ), invalid UTF-8 as a barrier, and a random corpus of combining-heavy strings
// against Python's unicodedata (tools/oracles/nfc_check.py, run with Debian's /usr/bin/python3).
//
// The oracle is only sound when its Unicode version is the tables' one: a code point assigned in
// one version and not the other normalizes differently. Today both the python3 that generated the
// tables and /usr/bin/python3 (Debian 12, Python 3.11) have Unicode 14.0.0, so the corpus draws
// freely from its blocks (unassigned code points included: both sides leave them alone); the test
// checks the versions are equal and fails, naming both, if a regenerated table ever drifts from
// the oracle.
// ctest-file-label: quick
#include "tokenizer/unicode_nfc.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "tokenizer/pretokenize_llama3.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

const std::string kOracle = "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/nfc_check.py";

// "U+0065 U+0301" for valid UTF-8, "\xFF" for a stray byte: readable mismatches.
std::string code_points(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    bool ok = len > 0 && i + len <= s.size();
    char32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    if (!out.empty()) out += ' ';
    if (ok) {
      out += fmt::format("U+{:04X}", static_cast<uint32_t>(cp));
      i += len;
    } else {
      out += fmt::format("\\x{:02X}", b);
      ++i;
    }
  }
  return out;
}

#define EXPECT_NFC(input, expected) \
  EXPECT_EQ(code_points(nfc_normalize(input)), code_points(expected)) << "input: " << code_points(input)

TEST(UnicodeNfc, PublishedExamples) {
  EXPECT_NFC("e\u0301", "\u00e9");                             // composes
  EXPECT_NFC("\u00e9", "\u00e9");                              // already composed
  EXPECT_NFC("A\u030a", "\u00c5");                             // A + ring above
  EXPECT_NFC("\u212b", "\u00c5");                              // ANGSTROM SIGN: singleton, never comes back
  EXPECT_NFC("\u2126", "\u03a9");                              // OHM SIGN: singleton
  EXPECT_NFC("\u1e0b\u0323", "\u1e0d\u0307");                  // d-dot-above + dot-below: reorder, recompose
  EXPECT_NFC("q\u0307\u0323", "q\u0323\u0307");                // no composite for q: reordered only
  EXPECT_NFC("\u0958", "\u0915\u093c");                        // composition exclusion stays decomposed
  EXPECT_NFC("\u0915\u093c", "\u0915\u093c");                  // ... and is not composed into it
  EXPECT_NFC("\u0344", "\u0308\u0301");                        // non-starter decomposition
  EXPECT_NFC("a\u0323\u0302", "\u1ead");                       // Vietnamese a-dot-below-circumflex, two steps
  EXPECT_NFC("a\u0302\u0323", "\u1ead");                       // same, marks in the other order
  EXPECT_NFC("\u00e0\u0323", "\u1ea1\u0300");                  // a precomposed letter reopens for a mark below
  EXPECT_NFC("a\u0301\u0301", "\u00e1\u0301");                 // the second acute is blocked by the first
  EXPECT_NFC("\u03b1\u0313\u0300\u0345", "\u1f82");            // Greek: three marks onto alpha
  EXPECT_NFC("\U0001D15F", "\U0001D158\U0001D165");            // MUSICAL SYMBOL QUARTER NOTE: excluded
  EXPECT_NFC("\U0001D158\U0001D165", "\U0001D158\U0001D165");  // ... so it is never composed
  EXPECT_NFC("\U0001D160", "\U0001D158\U0001D165\U0001D16E");  // two levels of decomposition
}

TEST(UnicodeNfc, Hangul) {
  EXPECT_NFC("\u1100\u1161\u11a8", "\uac01");                    // L V T -> LVT syllable
  EXPECT_NFC("\u1100\u1161", "\uac00");                          // L V -> LV
  EXPECT_NFC("\uac00\u11a8", "\uac01");                          // LV + T -> LVT
  EXPECT_NFC("\uac01\u11a8", "\uac01\u11a8");                    // an LVT syllable takes no second T
  EXPECT_NFC("\u1100\u1161\u0301\u11a8", "\uac00\u0301\u11a8");  // T blocked by a mark
  EXPECT_NFC("\u1100\u11a7", "\u1100\u11a7");                    // U+11A7 is not a T jamo (T index 0)
  EXPECT_NFC("\ud7a3", "\ud7a3");                                // the last syllable
}

TEST(UnicodeNfc, AsciiAndFastPath) {
  const std::string ascii = "The quick brown fox\tjumps over the lazy dog 0123456789 !@#$%^&*()\n";
  EXPECT_EQ(nfc_normalize(ascii), ascii);
  EXPECT_EQ(nfc_normalize(""), "");
  EXPECT_TRUE(nfc_is_unchanged_fast(ascii));
  EXPECT_TRUE(nfc_is_unchanged_fast("h\u00e9llo w\u00f6rld \u01d5"));  // below U+0300
  EXPECT_FALSE(nfc_is_unchanged_fast("e\u0301"));
  EXPECT_FALSE(nfc_is_unchanged_fast("\u4e2d\u6587"));  // false only means "look closer"
  EXPECT_NFC("\u4e2d\u6587 text", "\u4e2d\u6587 text");
  EXPECT_NFC("caf\u00e9 + cafe\u0301 = ?", "caf\u00e9 + caf\u00e9 = ?");
}

TEST(UnicodeNfc, InvalidUtf8PassesThroughAsABarrier) {
  EXPECT_NFC("e\xff\u0301", "e\xff\u0301");                          // a stray byte splits e from its accent
  EXPECT_NFC("\u0301\xff\u0323", "\u0301\xff\u0323");                // and marks are not reordered across it
  EXPECT_NFC("\u0301\u0323", "\u0323\u0301");                        // (they are without it)
  EXPECT_NFC("a\xcc", "a\xcc");                                      // truncated sequence
  EXPECT_NFC("a\xcc\x81", "\u00e1");                                 // the complete one composes
  EXPECT_NFC("e\xed\xa0\x80\u0301", "e\xed\xa0\x80\u0301");          // a surrogate's three bytes
  EXPECT_NFC("e\xc0\x81\u0301", "e\xc0\x81\u0301");                  // overlong
  EXPECT_NFC("e\xf4\x90\x80\x80\u0301", "e\xf4\x90\x80\x80\u0301");  // above U+10FFFF
  EXPECT_NFC("\x80\xbf\xfe", "\x80\xbf\xfe");
}

TEST(UnicodeNfc, TablesMatchThePreTokenizersUnicodeVersion) {
  EXPECT_STREQ(nfc_unicode_version(), unicode_table_version());
}

// ---- random corpus -------------------------------------------------------------------------------

// Where random code points come from: ranges weighted towards characters that decompose, compose
// or reorder, so most strings exercise something.
struct Pool {
  char32_t first, last;
  uint32_t weight;
};
constexpr Pool kPools[] = {
    {0x0020, 0x007E, 6},    // ASCII (no newline: the corpus is one string a line)
    {0x00A0, 0x024F, 4},    // Latin-1, Latin Extended-A/B: precomposed letters
    {0x0300, 0x036F, 8},    // combining diacritical marks
    {0x0591, 0x05C7, 2},    // Hebrew points: many distinct ccc values
    {0x0900, 0x097F, 3},    // Devanagari, nukta U+093C and the excluded U+0958..U+095F
    {0x1100, 0x11FF, 1},    // Hangul jamo
    {0x1100, 0x1112, 2},    // ... leading consonants L
    {0x1161, 0x1175, 2},    // ... vowels V
    {0x11A7, 0x11C2, 2},    // ... trailing consonants T (U+11A7 is not one)
    {0xAC00, 0xD7A3, 2},    // Hangul syllables
    {0x0370, 0x03FF, 3},    // Greek with tonos and dialytika
    {0x1F00, 0x1FFF, 3},    // Greek Extended
    {0x1EA0, 0x1EF9, 2},    // Vietnamese precomposed letters
    {0x0300, 0x0303, 2},    // Vietnamese tone marks grave, acute, circumflex, tilde
    {0x0306, 0x0309, 1},    // breve, ..., hook above
    {0x031B, 0x031B, 1},    // horn
    {0x0323, 0x0323, 2},    // dot below
    {0xF900, 0xFAFF, 2},    // CJK compatibility ideographs: singletons
    {0x1D150, 0x1D1C0, 2},  // musical symbols, U+1D15E..U+1D164 and U+1D1BB..U+1D1C0 excluded
};

void append_utf8(std::string& s, char32_t cp) {
  const auto byte = [&](uint32_t b) { s += static_cast<char>(b); };
  if (cp < 0x80) {
    byte(cp);
  } else if (cp < 0x800) {
    byte(0xC0 | (cp >> 6)), byte(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    byte(0xE0 | (cp >> 12)), byte(0x80 | ((cp >> 6) & 0x3F)), byte(0x80 | (cp & 0x3F));
  } else {
    byte(0xF0 | (cp >> 18)), byte(0x80 | ((cp >> 12) & 0x3F)), byte(0x80 | ((cp >> 6) & 0x3F)),
        byte(0x80 | (cp & 0x3F));
  }
}

std::string random_string(RandomStream& rng) {
  uint32_t total = 0;
  for (const Pool& p : kPools) total += p.weight;
  const uint32_t length = 1 + rng.next_below(16);
  std::string s;
  for (uint32_t n = 0; n < length; ++n) {
    uint32_t pick = rng.next_below(total);
    const Pool* pool = kPools;
    while (pick >= pool->weight) pick -= (pool++)->weight;
    const char32_t cp = pool->first + rng.next_below(pool->last - pool->first + 1);
    append_utf8(s, cp);
  }
  return s;
}

std::vector<std::string> random_corpus(size_t count) {
  RandomStream rng(/*seed=*/0x4E4643, /*stream=*/0);
  std::vector<std::string> corpus;
  for (size_t i = 0; i < count; ++i) corpus.push_back(random_string(rng));
  return corpus;
}

// ctest-label: oracle
TEST(UnicodeNfc, AgreesWithPythonUnicodedata) {
  if (const std::string why = testing::python_oracle_unavailable("unicodedata"); !why.empty()) GTEST_SKIP() << why;
  const std::vector<std::string> corpus = random_corpus(5000);
  testing::TempDir tmp;
  std::string joined;
  for (const std::string& s : corpus) joined += s + '\n';
  joined.pop_back();
  const auto in = tmp.write("corpus.txt", joined);
  const auto out = tmp / "nfc.txt";
  const std::string cmd = kOracle + " " + in.string() + " " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd;

  std::vector<std::string> lines;
  const std::string text = testing::read_file_bytes(out);
  for (size_t i = 0;;) {
    const size_t j = text.find('\n', i);
    lines.push_back(text.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  ASSERT_EQ(lines.size(), corpus.size() + 1) << "the oracle wrote a version line and one line per string";
  ASSERT_EQ(lines[0], nfc_unicode_version())
      << "/usr/bin/python3's unicodedata has Unicode " << lines[0] << ", the tables " << nfc_unicode_version()
      << ": the comparison is unsound (code points new in one version differ); regenerate the tables with a "
         "Python of the oracle's version or restrict the corpus to code points both versions agree on";

  size_t equal = 0, changed = 0, reported = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string ours = nfc_normalize(corpus[i]);
    const std::string& expected = lines[i + 1];
    changed += expected != corpus[i];
    if (ours == expected) {
      ++equal;
    } else if (reported++ < 10) {
      ADD_FAILURE() << "string " << i << ": " << code_points(corpus[i]) << "\n  ours:   " << code_points(ours)
                    << "\n  python: " << code_points(expected);
    }
    EXPECT_EQ(nfc_normalize(ours), ours) << "NFC is not idempotent on string " << i;
  }
  EXPECT_EQ(equal, corpus.size());
  std::printf("%zu of %zu random strings equal to Python's unicodedata NFC (Unicode %s); %zu of them changed by NFC\n",
              equal, corpus.size(), lines[0].c_str(), changed);
}

// A stray byte acts as if the text were split there: NFC(a + 0xFF + b) == NFC(a) + 0xFF + NFC(b).
TEST(UnicodeNfc, InvalidByteSplitsRandomText) {
  const std::vector<std::string> corpus = random_corpus(1000);
  for (size_t i = 0; i + 1 < corpus.size(); i += 2) {
    const std::string& a = corpus[i];
    const std::string& b = corpus[i + 1];
    EXPECT_EQ(code_points(nfc_normalize(a + '\xff' + b)), code_points(nfc_normalize(a) + '\xff' + nfc_normalize(b)))
        << "strings " << i << " and " << i + 1;
  }
}

}  // namespace
}  // namespace fp8rl
