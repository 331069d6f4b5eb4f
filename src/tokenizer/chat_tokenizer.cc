#include "tokenizer/chat_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace fp8rl {

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return "none";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kQwen3: return "qwen3";
    case ChatFormat::kChatml: return "chatml";
  }
  return "?";
}

namespace {

// The chat families' fixed framings: the text around the prompt, the token that ends a response,
// and the other special tokens the framing uses (checked to be in the vocabulary).
struct Framing {
  ChatFormat format;
  const char* before;
  const char* after;
  const char* eos;
  const char* needs[3];  // unused entries nullptr
};
constexpr Framing kFramings[] = {
    {ChatFormat::kLlama3, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
     {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"}},
    {ChatFormat::kQwen3, "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
     "<|im_end|>", {"<|im_start|>", "<think>", "</think>"}},
    {ChatFormat::kChatml, "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>",
     {"<|im_start|>", nullptr, nullptr}},
};

}  // namespace

ChatTokenizer ChatTokenizer::load(const std::filesystem::path& path, std::string_view format) {
  ChatTokenizer t(BpeTokenizer::load(path), ChatFormat::kNone);
  auto has = [&](std::string_view token) { return t.bpe_.token_id(token) >= 0; };
  ChatFormat& f = t.format_;
  if (format == "auto") {
    f = has("<|start_header_id|>") ? ChatFormat::kLlama3
        : has("<|im_start|>")      ? (has("<think>") ? ChatFormat::kQwen3 : ChatFormat::kChatml)
                                   : ChatFormat::kNone;
  } else if (format == "llama3") {
    f = ChatFormat::kLlama3;
  } else if (format == "qwen3") {
    f = ChatFormat::kQwen3;
  } else if (format == "chatml") {
    f = ChatFormat::kChatml;
  } else {
    FP8RL_REQUIRE(format == "none", "tokenizer.chat_format '{}' is not one of auto, llama3, qwen3, chatml, none",
                  format);
  }
  auto id = [&](std::string_view token) {
    const int32_t i = t.bpe_.token_id(token);
    FP8RL_REQUIRE(i >= 0, "tokenizer '{}': the {} chat format needs the token '{}', which the vocabulary lacks",
                path.string(), chat_format_name(f), token);
    return i;
  };
  if (f == ChatFormat::kNone) {
    if (has("<|begin_of_text|>")) t.before_prompt_ = "<|begin_of_text|>";
    for (const char* token : {"<|end_of_text|>", "<|endoftext|>", "</s>"})
      if (t.eos_ < 0 && has(token)) t.eos_ = id(token);
    FP8RL_REQUIRE(t.eos_ >= 0, "tokenizer '{}': no end-of-text token (<|end_of_text|>, <|endoftext|> or </s>)",
                path.string());
  } else {
    const Framing& fr = *std::find_if(std::begin(kFramings), std::end(kFramings),
                                      [&](const Framing& x) { return x.format == f; });
    t.before_prompt_ = fr.before;
    t.after_prompt_ = fr.after;
    t.eos_ = id(fr.eos);
    for (const char* token : fr.needs)
      if (token != nullptr) id(token);
  }
  const int32_t pad = t.bpe_.token_id("<|finetune_right_pad_id|>");
  t.pad_ = pad >= 0 ? pad : t.eos_;
  return t;
}

namespace {

bool is_python_space(char32_t c) {
  // The characters for which Python's str.isspace() is true (bidirectional class WS, B or S, or
  // category Zs): what Jinja's `trim`, i.e. str.strip(), removes.
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace

std::string_view trim_like_python(std::string_view text) {
  size_t begin = text.size(), end = 0;  // of the first and past the last character that is not space
  for (size_t i = 0; i < text.size();) {
    const auto [cp, len] = decode_utf8(text, i);
    const size_t n = len > 0 ? static_cast<size_t>(len) : 1;  // a stray byte is not space
    if (len == 0 || !is_python_space(cp)) {
      begin = std::min(begin, i);
      end = i + n;
    }
    i += n;
  }
  return begin < end ? text.substr(begin, end - begin) : std::string_view();
}

std::vector<int32_t> ChatTokenizer::encode_prompt(std::string_view prompt) const {
  if (format_ == ChatFormat::kLlama3) prompt = trim_like_python(prompt);  // the template's `| trim`
  return bpe_.encode(before_prompt_ + std::string(prompt) + after_prompt_, /*allow_special=*/true);
}

std::vector<int32_t> ChatTokenizer::encode_answer(std::string_view answer) const {
  return bpe_.encode(answer, /*allow_special=*/false);
}

std::vector<int32_t> ChatTokenizer::encode_observation(std::string_view text, bool after_eos) const {
  std::vector<int32_t> ids;
  if (!after_eos && format_ != ChatFormat::kNone) ids.push_back(eos_);
  std::string before;
  if (format_ == ChatFormat::kLlama3) before = "<|start_header_id|>ipython<|end_header_id|>\n\n";
  const bool chatml = format_ == ChatFormat::kQwen3 || format_ == ChatFormat::kChatml;
  if (chatml) before = "\n<|im_start|>user\n<tool_response>\n";
  const std::vector<int32_t> head = bpe_.encode(before, /*allow_special=*/true);
  const std::vector<int32_t> body =
      bpe_.encode(chatml ? std::string(text) + "\n</tool_response>" : std::string(text), /*allow_special=*/false);
  const std::vector<int32_t> tail = bpe_.encode(after_prompt_, /*allow_special=*/true);
  for (const std::vector<int32_t>* part : {&head, &body, &tail}) ids.insert(ids.end(), part->begin(), part->end());
  return ids;
}

std::string ChatTokenizer::decode_transcript(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids)
    if (bpe_.is_token(id) && !bpe_.is_special(id)) text += bpe_.decode(std::span<const int32_t>(&id, 1));
  return text;
}

std::string ChatTokenizer::decode_response(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (id == eos_) break;
    if (!bpe_.is_token(id) || bpe_.is_special(id)) continue;
    text += bpe_.decode(std::span<const int32_t>(&id, 1));
  }
  return text;
}

}  // namespace fp8rl
