// A small byte-level BPE tokenizer.json for tests: the 256 byte tokens (ids 0..255, keyed by
// GPT-2's byte-to-unicode table as real files are), a few merges, the Llama-3 pre-tokenizer, and
// the given added tokens from id 256 on.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace fp8rl::testing {

// The vocabulary key of byte `b`: the byte itself for printable Latin-1, else U+0100 + n for the
// n-th other byte (GPT-2 encoder.py's bytes_to_unicode), as UTF-8.
inline std::string byte_level_key(int b) {
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  int code = b;
  if (!printable(b)) {
    code = 256;
    for (int c = 0; c < b; ++c) code += printable(c) ? 0 : 1;
  }
  std::string s;
  if (code < 0x80) {
    s += static_cast<char>(code);
  } else {
    s += static_cast<char>(0xC0 | (code >> 6));
    s += static_cast<char>(0x80 | (code & 0x3F));
  }
  return s;
}

// The pre_tokenizer of Llama 3's tokenizer.json: its Split pattern, then ByteLevel.
inline nlohmann::json llama3_pre_tokenizer_json() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

// `added`: (content, special) pairs, given ids 256, 257, ...
inline std::string byte_level_tokenizer_json(const std::vector<std::pair<std::string, bool>>& added) {
  using json = nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_key(b)] = b;
  // Merges: "1" "2" -> "12" (id after the added tokens), "Ġ" "=" -> "Ġ=".
  const int first_merged = 256 + static_cast<int>(added.size());
  vocab["12"] = first_merged;
  vocab[byte_level_key(' ') + "="] = first_merged + 1;
  json added_tokens = json::array();
  for (size_t i = 0; i < added.size(); ++i)
    added_tokens.push_back({{"id", 256 + static_cast<int>(i)}, {"content", added[i].first}, {"special", added[i].second}});
  const json j = {
      {"version", "1.0"},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", llama3_pre_tokenizer_json()},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"1 2", byte_level_key(' ') + " ="})}}}};
  return j.dump();
}

// The Llama-3 special tokens the llama3 chat framing uses.
inline std::vector<std::pair<std::string, bool>> llama3_specials() {
  return {{"<|begin_of_text|>", true}, {"<|end_of_text|>", true}, {"<|start_header_id|>", true},
          {"<|end_header_id|>", true}, {"<|eot_id|>", true}};
}

}  // namespace fp8rl::testing
