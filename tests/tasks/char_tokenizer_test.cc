// ctest-file-label: quick
#include "tokenizer/char_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

TEST(CharTokenizer, DocumentedIds) {
  const CharTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 99);
  EXPECT_EQ(tok.pad(), 0);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.encode(" ~\n"), (std::vector<int32_t>{3, 97, 98}));
  EXPECT_EQ(tok.encode("0+=a"), (std::vector<int32_t>{19, 14, 32, 68}));
}

TEST(CharTokenizer, EveryCharacterRoundTrips) {
  const CharTokenizer tok;
  std::string all;
  for (int c = 0x20; c <= 0x7E; ++c) all += static_cast<char>(c);
  all += '\n';
  const std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<int32_t>(i) + 3) << "distinct, dense ids";
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.decode(tok.encode("123+456=579\n\\boxed{-7}")), "123+456=579\n\\boxed{-7}");
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(CharTokenizer, SpecialTokensAreSkippedOrShown) {
  const CharTokenizer tok;
  std::vector<int32_t> ids = {1};
  for (int32_t id : tok.encode("12")) ids.push_back(id);
  ids.insert(ids.end(), {2, 0, 0});
  EXPECT_EQ(tok.decode(ids), "12");
  EXPECT_EQ(tok.decode(ids, CharTokenizer::SpecialTokens::kShow), "<bos>12<eos><pad><pad>");
}

TEST(CharTokenizer, DecodeResponseStopsAtFirstEos) {
  const CharTokenizer tok;
  std::vector<int32_t> ids = tok.encode("579");
  ids.push_back(tok.eos());
  for (int32_t id : tok.encode("junk")) ids.push_back(id);
  EXPECT_EQ(tok.decode_response(ids), "579");
  EXPECT_EQ(tok.decode_response(tok.encode("no eos")), "no eos");
  EXPECT_EQ(tok.decode_response(std::vector<int32_t>{2}), "");
}

TEST(CharTokenizer, ErrorsNameTheCharacterOrIdAndPosition) {
  const CharTokenizer tok;
  auto message = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(message([&] { tok.encode("12\t3"); }), HasSubstr("'\\t' (tab) at position 2 of"));
  EXPECT_THAT(message([&] { tok.encode("x\xC3\xA9"); }), HasSubstr("byte 0xC3 (non-ASCII) at position 1"));
  EXPECT_THAT(message([&] { tok.decode(std::vector<int32_t>{5, 99}); }),
              HasSubstr("token id 99 at position 1 is outside the vocabulary [0, 99)"));
  EXPECT_THAT(message([&] { tok.decode(std::vector<int32_t>{-1}); }), HasSubstr("token id -1 at position 0"));
}

}  // namespace
}  // namespace fp8rl
