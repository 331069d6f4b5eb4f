// A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the format of the
// `tokenizers` library), as shipped with Llama 3 and GPT-4-style models.
//
// Supported, and checked at load (anything else is an Error naming the file and the key):
//   model          {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a", "b"], ...]}
//                  with optional "ignore_merges" (a pre-token that is itself in the vocabulary is
//                  one id, its merges skipped), "byte_fallback" and "unk_token" (what a byte
//                  that is not in the vocabulary starts as: its <0xNN> token, else unk); "dropout",
//                  "continuing_subword_prefix" and "end_of_word_suffix" must be null or "".
//   added_tokens   [{"id", "content", "special", ...}]: matched verbatim in the text before
//                  pre-tokenization, longest first at the leftmost position; "lstrip", "rstrip"
//                  and "single_word" must be false.
//   normalizer     null, or {"type": "NFC"} (Qwen2 / Qwen3): Unicode NFC (tokenizer/unicode_nfc.h) on
//                  the text between added tokens, as the tokenizers library does for added
//                  tokens that are not "normalized".
//   pre_tokenizer  Sequence[Split{the Llama-3 or the Qwen pattern (tokenizer/pretokenize_llama3.h),
//                  Isolated, invert false}, ByteLevel{add_prefix_space false, use_regex false}].
//   decoder        ByteLevel or null.  post_processor: not applied (see `encode`).
//
// Tokens are stored as the bytes they stand for: vocabulary keys are undone through GPT-2's
// byte-to-unicode table (bytes_to_unicode in openai/gpt-2 encoder.py), so BPE runs on bytes.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fp8rl {

class BpeTokenizer {
 public:
  // Throws Error naming `path` and the key that is missing, malformed or unsupported.
  static BpeTokenizer load(const std::filesystem::path& path);

  // The ids of `text` (any bytes; meant as UTF-8). Adds no <|begin_of_text|> or other framing
  // (the file's post_processor is not applied): callers frame sequences themselves. With
  // `allow_special` false, special added tokens in the text are encoded as plain text.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The bytes of the ids, concatenated (added tokens verbatim). The result is the encoded text
  // for ids from `encode`; a slice of them may end inside a UTF-8 sequence. Throws Error for an
  // id that is no token, naming it and its position.
  std::string decode(std::span<const int32_t> ids) const;

  // The id of a token given as its text (the bytes it stands for, or an added token's content);
  // -1 when there is none.
  int32_t token_id(std::string_view token) const;
  // True for an id that stands for a token (not an id past the end or in a gap of the file's ids).
  bool is_token(int32_t id) const { return id >= 0 && id < vocab_size() && !id_to_bytes_[static_cast<size_t>(id)].empty(); }
  // True for the id of an added token marked "special" (<|begin_of_text|>, <|eot_id|>, ...).
  bool is_special(int32_t id) const;
  // One past the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_bytes_.size()); }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  struct Merge {
    int32_t rank;    // position in "merges": lower merges first
    int32_t merged;  // the id of the two tokens joined
  };

  void encode_ordinary(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;
  std::vector<int32_t> merge_bytes(std::string_view piece) const;

  std::unordered_map<std::string, int32_t> bytes_to_id_;  // the model's vocabulary, by bytes
  std::vector<std::string> id_to_bytes_;                  // (vocab_size): "" for ids of no token
  std::unordered_map<uint64_t, Merge> merges_;            // key: left id << 32 | right id
  std::array<int32_t, 256> byte_ids_{};                   // a byte's first BPE symbol; -1: none
  std::vector<AddedToken> added_;                         // longest content first
  std::array<std::vector<int32_t>, 256> added_by_byte_;   // indices into added_, by first byte
  bool ignore_merges_ = false;
  bool normalize_nfc_ = false;  // normalizer {"type": "NFC"}: applied to text outside added tokens
  size_t max_digits_ = 3;       // of the split pattern: 3 (Llama 3) or 1 (Qwen)

  // Ids of pre-tokens already merged; encode() is const and may run on several threads.
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace fp8rl
