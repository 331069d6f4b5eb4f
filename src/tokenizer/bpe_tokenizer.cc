#include "tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/check.h"
#include "io/input_file.h"
#include "io/json_depth.h"
#include "tokenizer/pretokenize_llama3.h"
#include "tokenizer/unicode_nfc.h"

namespace fp8rl {
namespace {

// Token ids are below this (config.json's vocab_size is bounded the same way).
constexpr int64_t kMaxTokenId = int64_t{1} << 22;

namespace fs = std::filesystem;
using json = nlohmann::json;

// The Split patterns of Llama 3's and Qwen2 / Qwen3's tokenizer.json, the ones pretokenize_llama3
// implements (they differ in digit runs: up to 3, or 1).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode, inverted: for each code point below 324, the byte it stands for in
// vocabulary keys, or -1. Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
// space, 0x7F..0xA0, 0xAD) are written as U+0100 onwards, in byte order.
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> table;
  table.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[printable ? b : next++] = b;
  }
  return table;
}

// Reads a tokenizer.json and reports errors naming the file and the key.
class TokenizerFile {
 public:
  explicit TokenizerFile(const fs::path& path) : path_(path) {
    const std::string text = read_input_file(path, "tokenizer", kMaxJsonFileBytes);
    FP8RL_REQUIRE(json_nesting_depth(text) <= kMaxJsonDepth, "tokenizer '{}': nested deeper than {} levels",
                  path.string(), kMaxJsonDepth);
    try {
      root_ = json::parse(text);
    } catch (const json::exception& e) {
      FP8RL_REQUIRE(false, "tokenizer '{}': not valid JSON ({})", path.string(), e.what());
    }
    if (!root_.is_object()) fail("the file", "a JSON object");
  }

  const json& root() const { return root_; }

  // Throws Error: "tokenizer 'PATH': KEY: expected WHAT, found FOUND".
  [[noreturn]] void fail(std::string_view key, std::string_view what, const json* found = nullptr) const {
    FP8RL_REQUIRE(false, "tokenizer '{}': {}: expected {}{}", path_.string(), key, what,
                found != nullptr ? fmt::format(", found {}", short_dump(*found)) : std::string());
  }
  void check(bool ok, std::string_view key, std::string_view what, const json* found = nullptr) const {
    if (!ok) fail(key, what, found);
  }
  const json& member(const json& object, std::string_view name, std::string_view key) const {
    if (!object.contains(name)) fail(key, "this key (it is missing)");
    return object.at(name);
  }
  // The member's value if present and not null, else `fallback`.
  template <typename T>
  T optional(const json& object, std::string_view name, std::string_view key, T fallback) const {
    if (!object.contains(name) || object.at(name).is_null()) return fallback;
    const json& v = object.at(name);
    if constexpr (std::is_same_v<T, bool>) check(v.is_boolean(), key, "true or false", &v);
    if constexpr (std::is_same_v<T, std::string>) check(v.is_string(), key, "a string", &v);
    return v.get<T>();
  }
  void require_null(const json& object, std::string_view name, std::string_view key) const {
    const bool absent = !object.contains(name) || object.at(name).is_null();
    check(absent, key, "null (not supported)", absent ? nullptr : &object.at(name));
  }

  // The bytes a byte-level vocabulary string stands for; `key` names it in errors.
  template <typename Key>
  std::string to_bytes(const std::string& token, const Key& key) const {
    static const std::array<int, 324> kByteOf = unicode_to_byte();
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const auto b0 = static_cast<unsigned char>(token[i]);
      char32_t cp = b0;  // the JSON parser gave valid UTF-8; only 1- and 2-byte forms can map
      int len = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
      if (len == 2) cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      const bool mapped = len <= 2 && cp < kByteOf.size() && kByteOf[cp] >= 0;
      if (!mapped) {
        const json found = token;
        fail(key(), "byte-level text (characters of GPT-2's bytes_to_unicode)", &found);
      }
      bytes.push_back(static_cast<char>(kByteOf[cp]));
      i += len;
    }
    return bytes;
  }

 private:
  static std::string short_dump(const json& j) {
    std::string s = j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
    return s.size() > 200 ? s.substr(0, 200) + "..." : s;
  }

  fs::path path_;
  json root_;
};

// The longest digit run of the file's split pattern (3: Llama 3, 1: Qwen); throws for any other
// pre-tokenizer.
size_t check_pre_tokenizer(const TokenizerFile& f) {
  const json& pre = f.member(f.root(), "pre_tokenizer", "pre_tokenizer");
  const std::string_view expected =
      "Sequence [Split {the Llama-3 or Qwen pattern, behavior Isolated, invert false}, ByteLevel "
      "{add_prefix_space false, use_regex false}]";
  size_t max_digits = 0;
  const auto ok = [&] {
    if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers")) return false;
    const json& seq = pre.at("pretokenizers");
    if (!seq.is_array() || seq.size() != 2 || !seq[0].is_object() || !seq[1].is_object()) return false;
    const json& split = seq[0];
    const json& byte_level = seq[1];
    if (!split.contains("pattern") || !split.at("pattern").is_object()) return false;
    const std::string regex = split.at("pattern").value("Regex", "");
    max_digits = regex == kLlama3Pattern ? 3 : regex == kQwenPattern ? 1 : 0;
    return split.value("type", "") == "Split" && max_digits > 0 && split.value("behavior", "") == "Isolated" &&
           !split.value("invert", false) && byte_level.value("type", "") == "ByteLevel" &&
           !byte_level.value("add_prefix_space", true) && !byte_level.value("use_regex", true);
  };
  f.check(ok(), "pre_tokenizer", expected, &pre);
  return max_digits;
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const fs::path& path) try {
  const TokenizerFile f(path);
  const json& root = f.root();
  bool nfc = false;
  if (root.contains("normalizer") && !root.at("normalizer").is_null()) {
    const json& n = root.at("normalizer");
    f.check(n.is_object() && n.value("type", "") == "NFC", "normalizer", "null or {\"type\": \"NFC\"}", &n);
    nfc = true;
  }
  const size_t max_digits = check_pre_tokenizer(f);
  if (root.contains("decoder") && !root.at("decoder").is_null())
    f.check(root.at("decoder").is_object() && root.at("decoder").value("type", "") == "ByteLevel", "decoder",
            "ByteLevel or null", &root.at("decoder"));

  // Truncation and padding change the ids a caller gets; fp8rl does neither.
  f.require_null(root, "truncation", "truncation");
  f.require_null(root, "padding", "padding");

  const json& model = f.member(root, "model", "model");
  f.check(model.is_object(), "model", "an object", &model);
  const json& type = f.member(model, "type", "model.type");
  f.check(type == "BPE", "model.type", "\"BPE\"", &type);
  f.require_null(model, "dropout", "model.dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})  // null or "" (Qwen writes "")
    if (model.contains(key) && model.at(key) != "") f.require_null(model, key, std::string("model.") + key);

  BpeTokenizer t;
  t.normalize_nfc_ = nfc;
  t.max_digits_ = max_digits;
  t.ignore_merges_ = f.optional(model, "ignore_merges", "model.ignore_merges", false);
  const bool byte_fallback = f.optional(model, "byte_fallback", "model.byte_fallback", false);

  // Vocabulary: token (byte-level text) -> id.
  const json& vocab = f.member(model, "vocab", "model.vocab");
  f.check(vocab.is_object() && !vocab.empty(), "model.vocab", "a non-empty object {token: id}");
  const auto set_token = [&](const json& id, std::string bytes, const auto& key) {
    // The bound of config.json's vocab_size: a larger id fits no model, and would size the table.
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
      f.fail(key(), fmt::format("an integer id in [0, {})", kMaxTokenId), &id);
    if (t.id_to_bytes_.size() <= id.get<size_t>()) t.id_to_bytes_.resize(id.get<size_t>() + 1);
    std::string& slot = t.id_to_bytes_[id.get<size_t>()];
    if (!slot.empty() && slot != bytes) f.fail(key(), "an id that no other token has", &id);
    slot = std::move(bytes);
  };
  for (const auto& item : vocab.items()) {
    const std::string& token = item.key();  // named, not a structured binding: lambdas capture them
    const json& id = item.value();
    const auto key = [&] { return fmt::format("model.vocab[{}]", json(token).dump()); };
    if (token.empty()) f.fail(key(), "a non-empty token");
    std::string bytes = f.to_bytes(token, key);
    set_token(id, bytes, key);
    t.bytes_to_id_.emplace(std::move(bytes), id.get<int32_t>());
  }

  // Merges, by rank: "a b" or ["a", "b"]; both parts and their join must be tokens.
  const json& merges = f.member(model, "merges", "model.merges");
  f.check(merges.is_array(), "model.merges", "an array", &merges);
  const auto id_of = [&](const std::string& bytes, const auto& key, std::string_view which, const json& found) {
    const auto it = t.bytes_to_id_.find(bytes);
    if (it == t.bytes_to_id_.end()) f.fail(key(), fmt::format("{} in model.vocab", which), &found);
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const auto key = [&] { return fmt::format("model.merges[{}]", rank); };
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        f.fail(key(), "\"a b\" (two tokens, one space) or [\"a\", \"b\"]", &m);
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
        f.fail(key(), "\"a b\" or [\"a\", \"b\"] (two tokens)", &m);
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    }
    const std::string left_bytes = f.to_bytes(left, key), right_bytes = f.to_bytes(right, key);
    const int32_t a = id_of(left_bytes, key, "the first token", m);
    const int32_t b = id_of(right_bytes, key, "the second token", m);
    const int32_t merged = id_of(left_bytes + right_bytes, key, "the joined tokens", m);
    t.merges_[static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b)] = {static_cast<int32_t>(rank), merged};
  }

  // What each byte starts as: its token, else <0xNN> with byte_fallback, else unk_token.
  int32_t unk_id = -1;
  if (const std::string unk = f.optional(model, "unk_token", "model.unk_token", std::string()); !unk.empty()) {
    const auto key = [] { return std::string("model.unk_token"); };
    unk_id = id_of(f.to_bytes(unk, key), key, "a token", model.at("unk_token"));
  }
  for (int b = 0; b < 256; ++b) {
    const auto find = [&](const std::string& bytes) {
      const auto it = t.bytes_to_id_.find(bytes);
      return it == t.bytes_to_id_.end() ? -1 : it->second;
    };
    int32_t id = find(std::string(1, static_cast<char>(b)));
    if (id < 0 && byte_fallback) id = find(fmt::format("<0x{:02X}>", b));
    t.byte_ids_[b] = id >= 0 ? id : unk_id;
  }

  // Added tokens: content verbatim.
  const json& added = f.member(root, "added_tokens", "added_tokens");
  f.check(added.is_array(), "added_tokens", "an array", &added);
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string key = fmt::format("added_tokens[{}]", i);
    f.check(a.is_object() && a.contains("id") && a.at("id").is_number_integer() && a.contains("content") &&
                a.at("content").is_string() && !a.at("content").get_ref<const std::string&>().empty(),
            key, "{\"id\": integer, \"content\": non-empty string, ...}", &a);
    // normalized: true matches the token in normalized text; fp8rl matches added tokens verbatim.
    for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
      f.check(!f.optional(a, flag, key, false), fmt::format("{}.{}", key, flag), "false (not supported)");
    AddedToken token{a.at("content").get<std::string>(), a.at("id").get<int32_t>(),
                     f.optional(a, "special", key + ".special", false)};
    set_token(a.at("id"), token.content, [&] { return key; });
    t.added_.push_back(std::move(token));
  }
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (size_t i = 0; i < t.added_.size(); ++i)
    t.added_by_byte_[static_cast<unsigned char>(t.added_[i].content[0])].push_back(static_cast<int32_t>(i));
  return t;
} catch (const json::exception& e) {  // a value of another JSON type than the checks above expect
  FP8RL_REQUIRE(false, "tokenizer '{}': unexpected JSON ({})", path.string(), e.what());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  size_t plain_begin = 0;  // text[plain_begin, i) has no added token
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const int32_t k : added_by_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added_[k];
      if ((allow_special || !a.special) && text.substr(i).starts_with(a.content)) {
        hit = &a;  // the longest, since added_ is sorted by length
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_ordinary(text.substr(plain_begin, i - plain_begin), ids);
    ids.push_back(hit->id);
    i += hit->content.size();
    plain_begin = i;
  }
  encode_ordinary(text.substr(plain_begin), ids);
  return ids;
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& ids) const {
  if (normalize_nfc_) {
    const std::string normalized = nfc_normalize(text);
    for (const std::string_view piece : pretokenize_llama3(normalized, max_digits_)) encode_piece(piece, ids);
    return;
  }
  for (const std::string_view piece : pretokenize_llama3(text, max_digits_)) encode_piece(piece, ids);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    const auto it = bytes_to_id_.find(std::string(piece));
    if (it != bytes_to_id_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  constexpr size_t kMaxCachedPiece = 256, kMaxCacheEntries = 1 << 18;
  std::vector<int32_t> merged;
  {
    const std::lock_guard lock(*cache_mutex_);
    const auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) merged = it->second;
  }
  if (merged.empty()) {
    merged = merge_bytes(piece);
    if (piece.size() <= kMaxCachedPiece) {
      const std::lock_guard lock(*cache_mutex_);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      cache_.emplace(piece, merged);
    }
  }
  ids.insert(ids.end(), merged.begin(), merged.end());
}

// BPE on the bytes of one pre-token: repeatedly join the adjacent pair of lowest merge rank (the
// leftmost of equal ones), as the `tokenizers` library does, with a heap of candidate pairs.
std::vector<int32_t> BpeTokenizer::merge_bytes(std::string_view piece) const {
  struct Symbol {
    int32_t id;          // -1 once joined into the symbol on its left
    int32_t prev, next;  // neighbours' indices; -1 at the ends
  };
  struct Candidate {
    int32_t rank, pos, left, right, merged;  // pos: index of the left symbol
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(piece[i])];
    FP8RL_REQUIRE(id >= 0,
                  "tokenizer: byte 0x{:02X} of pre-token {} has no token (the vocabulary lacks it and "
                  "neither byte_fallback nor unk_token covers it)",
                  static_cast<unsigned char>(piece[i]),
                  json(std::string(piece)).dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace));
    symbols[i] = {id, i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const int32_t a = symbols[pos].id, b = symbols[next].id;
    const auto it = merges_.find(static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b));
    if (it != merges_.end()) heap.push({it->second.rank, pos, a, b, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;  // stale
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    right.id = -1;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  std::vector<int32_t> ids;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    FP8RL_REQUIRE(is_token(id),
                "token id {} at position {} is no token of this tokenizer (vocab_size {})", id, i, vocab_size());
    text += id_to_bytes_[id];
  }
  return text;
}

bool BpeTokenizer::is_special(int32_t id) const {
  for (const AddedToken& a : added_)
    if (a.id == id) return a.special;
  return false;
}

int32_t BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  const auto it = bytes_to_id_.find(std::string(token));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

}  // namespace fp8rl
