// Character-level vocabulary of the built-in tasks.
//
// Token ids (vocab_size() == 99, fixed: checkpoints depend on it):
//   0        <pad>
//   1        <bos>
//   2        <eos>
//   3 .. 97  the printable ASCII characters ' ' (0x20) .. '~' (0x7E), in code order:
//            id = character - 0x20 + 3, so '0' is 19, '+' is 14, '=' is 32, 'a' is 68
//   98       '\n'
// Any other byte (tab, other control characters, non-ASCII UTF-8) is not in the vocabulary.
//
// `encode` maps characters only; it adds no <bos>/<eos> (callers frame sequences themselves).
// `decode` maps every id, skipping <pad>/<bos>/<eos> (or showing them as "<pad>", "<bos>",
// "<eos>" with SpecialTokens::kShow); `decode_response` stops at the first <eos>, which is how a
// generated response is turned into the text a verifier scores.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fp8rl {

class CharTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kPad = 0;
  static constexpr int32_t kBos = 1;
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kFirstChar = 3;    // id of ' '
  static constexpr int32_t kNewline = 98;     // id of '\n'
  static constexpr int32_t kVocabSize = 99;

  enum class SpecialTokens { kSkip, kShow };

  int64_t vocab_size() const override { return kVocabSize; }
  int32_t pad() const override { return kPad; }
  int32_t bos() const { return kBos; }
  int32_t eos() const override { return kEos; }
  // <bos> and the prompt's characters (no other framing).
  std::vector<int32_t> encode_prompt(std::string_view prompt) const override;
  std::vector<int32_t> encode_answer(std::string_view answer) const override { return encode(answer); }

  bool is_encodable(char c) const;
  // Throws Error naming the offending character (printable or as \xNN) and its byte position.
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws Error for an id outside [0, vocab_size()), naming the id and its position.
  std::string decode(std::span<const int32_t> ids, SpecialTokens specials = SpecialTokens::kSkip) const;
  // The text of the ids before the first <eos> (all of them if there is none); other special
  // tokens are skipped.
  std::string decode_response(std::span<const int32_t> ids) const override;
  // The text, as it is (no framing).
  std::vector<int32_t> encode_observation(std::string_view text, bool) const override { return encode(text); }
  std::string decode_transcript(std::span<const int32_t> ids) const override { return decode(ids); }
};

}  // namespace fp8rl
