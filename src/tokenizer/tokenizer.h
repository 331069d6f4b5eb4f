// What SFT, evaluation, generation and the RL loop need from a tokenizer: the ids a prompt is
// conditioned on (with the model family's framing), the ids of a reference answer, and the text of
// a generated response. Two implementations: CharTokenizer (the built-in tasks' character
// vocabulary) and ChatTokenizer (a Hugging Face tokenizer.json with a chat framing).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int64_t vocab_size() const = 0;
  // The id padding positions hold (never scored, never attended to by real tokens).
  virtual int32_t pad() const = 0;
  // The id that ends a response (generation stops there; SFT appends it to the answer).
  virtual int32_t eos() const = 0;
  // The ids generation starts from: <bos> if the family has one, the chat framing of `prompt`
  // up to where the assistant's response begins. Throws Error for text it cannot encode.
  virtual std::vector<int32_t> encode_prompt(std::string_view prompt) const = 0;
  // The ids of a reference answer as the response that follows encode_prompt (no eos).
  virtual std::vector<int32_t> encode_answer(std::string_view answer) const = 0;
  // The text of the ids before the first eos (all of them if there is none), special tokens
  // left out: what a verifier scores.
  virtual std::string decode_response(std::span<const int32_t> ids) const = 0;

  // Multi-turn (an environment's observations between the model's turns):
  // The ids of observation `text`, appended after the model's turn (which ended with eos when
  // `after_eos`): with a chat format, the family's tool message (the end of the assistant's turn
  // first, if the model had not ended it) and the assistant header that follows; without one,
  // the text. Special-token text in `text` is plain text. Throws Error for text it cannot encode.
  virtual std::vector<int32_t> encode_observation(std::string_view text, bool after_eos) const = 0;
  // The text of all of `ids`, eos and other special tokens left out: a multi-turn transcript.
  virtual std::string decode_transcript(std::span<const int32_t> ids) const = 0;
};

}  // namespace fp8rl
