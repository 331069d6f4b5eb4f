#include "tokenizer/char_tokenizer.h"

#include <fmt/format.h>

#include "core/check.h"

namespace fp8rl {
namespace {

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return fmt::format("'{}'", c);
  if (c == '\t') return "'\\t' (tab)";
  if (c == '\r') return "'\\r' (carriage return)";
  return fmt::format("byte 0x{:02X}{}", u, u >= 0x80 ? " (non-ASCII)" : " (control character)");
}

}  // namespace

bool CharTokenizer::is_encodable(char c) const {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x20 && u <= 0x7E) || c == '\n';
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ids.push_back(kNewline);
    } else if (is_encodable(c)) {
      ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)) - 0x20 + kFirstChar);
    } else {
      throw Error(fmt::format("character tokenizer: {} at position {} of \"{}\" is not in the vocabulary "
                              "(printable ASCII and newline)",
                              describe_char(c), i, text.size() <= 80 ? text : text.substr(0, 80)));
    }
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids, SpecialTokens specials) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= kVocabSize)
      throw Error(fmt::format("character tokenizer: token id {} at position {} is outside the vocabulary [0, {})", id, i,
                              kVocabSize));
    if (id < kFirstChar) {
      if (specials == SpecialTokens::kShow) text += id == kPad ? "<pad>" : id == kBos ? "<bos>" : "<eos>";
    } else if (id == kNewline) {
      text += '\n';
    } else {
      text += static_cast<char>(id - kFirstChar + 0x20);
    }
  }
  return text;
}

std::vector<int32_t> CharTokenizer::encode_prompt(std::string_view prompt) const {
  std::vector<int32_t> ids = {kBos};
  const std::vector<int32_t> chars = encode(prompt);
  ids.insert(ids.end(), chars.begin(), chars.end());
  return ids;
}

std::string CharTokenizer::decode_response(std::span<const int32_t> ids) const {
  size_t end = 0;
  while (end < ids.size() && ids[end] != kEos) ++end;
  return decode(ids.first(end));
}

}  // namespace fp8rl
