// A Hugging Face tokenizer.json (src/tokenizer/bpe_tokenizer.h, src/tokenizer/chat_tokenizer.h):
// BpeTokenizer::load, then encode / decode of a fixed text and of the input's last bytes (with and
// without special tokens), decode of ids taken from the input, token_id / is_token / is_special;
// then ChatTokenizer::load(path, "auto") and its prompt / answer / response framing.
//
// Expected response to bad input: fp8rl::Error (the loader turns nlohmann exceptions into one).
// Also checked: encode gives only ids that are tokens, and decode(encode(text)) == text for the
// fixed text (already NFC) when every byte value has a token of its own, as byte-level BPE
// guarantees.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "fuzz_input_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_tokenizer.h"

namespace {

constexpr std::string_view kFixedText = "Hello world! 12+34=46 <|eot_id|>\n\n  tabs\tand \xC3\xA9t\xC3\xA9 123456";

// True if every byte value is a token of its own (so no byte goes through byte_fallback or unk).
bool covers_every_byte(const fp8rl::BpeTokenizer& t) {
  for (int b = 0; b < 256; ++b)
    if (t.token_id(std::string(1, static_cast<char>(b))) < 0) return false;
  return true;
}

void exercise_bpe(const fp8rl::BpeTokenizer& t, std::string_view tail, std::string_view input) {
  for (const bool allow_special : {true, false}) {
    for (const std::string_view text : {kFixedText, tail}) {
      try {
        const std::vector<int32_t> ids = t.encode(text, allow_special);
        for (const int32_t id : ids) {
          if (!t.is_token(id)) {
            std::fprintf(stderr, "encode produced id %d, which is no token (vocab_size %lld)\n", id,
                         static_cast<long long>(t.vocab_size()));
            std::abort();
          }
        }
        const std::string decoded = t.decode(ids);
        if (allow_special && text == kFixedText && covers_every_byte(t) && decoded != text) {
          std::fprintf(stderr, "decode(encode(text)) != text:\n  text    '%.*s'\n  decoded '%s'\n",
                       static_cast<int>(text.size()), text.data(), decoded.c_str());
          std::abort();
        }
      } catch (const fp8rl::Error&) {
        // A byte without a token (no byte_fallback, no unk_token): refused with a message.
      }
    }
  }
  (void)t.token_id("Hello");
  (void)t.token_id(tail);
  // Ids read from the input: decode must refuse the ones that are no token with an Error.
  std::vector<int32_t> ids(std::min<size_t>(input.size() / 4, 16));
  if (!ids.empty()) std::memcpy(ids.data(), input.data(), ids.size() * 4);
  for (const int32_t id : ids) (void)t.is_special(id), (void)t.is_token(id);
  try {
    (void)t.decode(ids);
  } catch (const fp8rl::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fp8rl::fuzz::as_text(data, size);
  const std::string_view tail = input.substr(input.size() - std::min<size_t>(input.size(), 48));
  const std::filesystem::path path = fp8rl::fuzz::write_input_file("tokenizer.json", input);
  try {
    const fp8rl::BpeTokenizer t = fp8rl::BpeTokenizer::load(path);
    exercise_bpe(t, tail, input);
  } catch (const fp8rl::Error&) {
    return 0;
  }
  try {
    const fp8rl::ChatTokenizer chat = fp8rl::ChatTokenizer::load(path, "auto");
    const std::vector<int32_t> prompt = chat.encode_prompt(tail);
    const std::vector<int32_t> answer = chat.encode_answer(kFixedText);
    (void)chat.decode_response(answer);
    (void)chat.decode_response(prompt);
    (void)chat.pad(), (void)chat.eos();
  } catch (const fp8rl::Error&) {
  }
  return 0;
}
