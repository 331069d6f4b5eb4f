// A Hugging Face model directory's tokenizer (tokenizer.json, tokenizer/bpe_tokenizer.h) with a fixed
// chat framing per model family, as the Tokenizer the jobs use.
//
// Framings (`tokenizer.chat_format`; "auto" picks llama3 when the vocabulary has
// <|start_header_id|>, qwen3 when it has <|im_start|> and <think>, chatml when it has
// <|im_start|> alone (Qwen2 / Qwen2.5), else none):
//   llama3  <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>
//           <|start_header_id|>assistant<|end_header_id|>\n\n          response ends: <|eot_id|>
//           (Llama 3.0's template: the prompt trimmed as Python's str.strip() does, Unicode
//           spaces such as U+00A0 and U+3000 included (trim_like_python), no system
//           message; 3.1+ templates add a dated system turn)
//   qwen3   <|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
//                                                                      response ends: <|im_end|>
//           (Qwen3's template with enable_thinking=False)
//   chatml  <|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n   response ends: <|im_end|>
//           (Qwen2 / Qwen2.5's template less the default system turn those templates add when
//           the conversation has none)
//   none    <|begin_of_text|> if the vocabulary has it, then {prompt}; response ends with
//           <|end_of_text|>, <|endoftext|> or </s>, the first the vocabulary has
// As transformers' apply_chat_template does, the framed text is encoded in one piece with special
// tokens recognized, so special-token text inside a prompt is read as that token.
// Padding uses <|finetune_right_pad_id|> if present, else the end-of-response token.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

enum class ChatFormat : uint8_t { kNone, kLlama3, kQwen3, kChatml };

// `text` without the leading and trailing characters that Python's str.isspace() calls space
// (what Jinja's `trim` filter, hence the Llama 3 chat template, removes).
std::string_view trim_like_python(std::string_view text);
const char* chat_format_name(ChatFormat format);

class ChatTokenizer final : public Tokenizer {
 public:
  // Loads `path` (a tokenizer.json). `format`: "auto", "llama3", "qwen3", "chatml" or "none"; a format
  // whose special tokens the vocabulary lacks is an Error naming the file and the token.
  static ChatTokenizer load(const std::filesystem::path& path, std::string_view format);

  ChatFormat format() const { return format_; }
  const BpeTokenizer& bpe() const { return bpe_; }

  int64_t vocab_size() const override { return bpe_.vocab_size(); }
  int32_t pad() const override { return pad_; }
  int32_t eos() const override { return eos_; }
  std::vector<int32_t> encode_prompt(std::string_view prompt) const override;
  std::vector<int32_t> encode_answer(std::string_view answer) const override;
  // Ids that are no token (a model's vocabulary may be padded past the tokenizer's) and special
  // tokens are left out.
  std::string decode_response(std::span<const int32_t> ids) const override;
  // llama3: <|eot_id|>? <|start_header_id|>ipython<|end_header_id|>\n\n{text} + the prompt's closing
  //         framing (<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n), as Llama 3.1+'s
  //         template renders a tool result;
  // qwen3, chatml: <|im_end|>? \n<|im_start|>user\n<tool_response>\n{text}\n</tool_response> +
  //         the prompt's closing framing, as Qwen3's and Qwen2.5's templates render a tool message;
  // none:   the text.
  std::vector<int32_t> encode_observation(std::string_view text, bool after_eos) const override;
  std::string decode_transcript(std::span<const int32_t> ids) const override;

 private:
  ChatTokenizer(BpeTokenizer bpe, ChatFormat format) : bpe_(std::move(bpe)), format_(format) {}
  BpeTokenizer bpe_;
  ChatFormat format_;
  std::string before_prompt_, after_prompt_;  // the framing around the prompt's text
  int32_t eos_ = -1, pad_ = -1;
};

}  // namespace fp8rl
