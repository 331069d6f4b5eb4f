// A recipe file plus command-line overrides, as `fp8rl train|sft|eval|config RECIPE [key=value ...]`
// reads them (src/cli/main.cc load_recipe): the RunConfig schema, the YAML recipe (with its
// `defaults:` chain), the overrides, then the effective configuration printed with to_yaml().
//
// Input: the recipe text up to the first blank line ("\n\n"); after it, one override per line
// (empty lines skipped). The recipe's directory also holds base.yaml (kBaseRecipe), so that
// `defaults: base.yaml` exercises the chain of base recipes (and `defaults: recipe.yaml` a cycle).
//
// Expected response to bad input: fp8rl::Error. Also checked: to_yaml() of a loaded
// configuration loads back (as a recipe) to the same to_yaml() text, as io/config.h promises; a
// difference aborts with both texts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "fuzz_input_file.h"
#include "io/config.h"
#include "jobs/recipe.h"

namespace {

constexpr std::string_view kBaseRecipe =
    "run:\n  name: base\ngrpo:\n  seed: 7\n  max_num_steps: 3\npolicy:\n  fp8:\n    ignore_layers: [lm_head]\n";

std::vector<std::string> split_overrides(std::string_view tail) {
  std::vector<std::string> out;
  while (!tail.empty()) {
    const size_t end = tail.find('\n');
    const std::string_view line = tail.substr(0, end);
    if (!line.empty()) out.emplace_back(line);
    if (end == std::string_view::npos) break;
    tail.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fp8rl::fuzz::as_text(data, size);
  const size_t split = input.find("\n\n");
  const std::string_view recipe_text = input.substr(0, split);
  const std::vector<std::string> overrides =
      split == std::string_view::npos ? std::vector<std::string>{} : split_overrides(input.substr(split + 2));

  [[maybe_unused]] static const std::filesystem::path base = fp8rl::fuzz::write_input_file("base.yaml", kBaseRecipe);
  // Bound once (binding costs more than a load); every load starts from the defaults.
  struct Bound {
    fp8rl::RunConfig config;
    fp8rl::ConfigSchema schema;
    Bound() { fp8rl::bind_run_config(schema, config); }
  };
  static Bound bound;
  fp8rl::ConfigSchema& schema = bound.schema;

  const std::filesystem::path recipe = fp8rl::fuzz::write_input_file("recipe.yaml", recipe_text);
  try {
    schema.load(recipe, overrides);
  } catch (const fp8rl::Error&) {
    return 0;  // rejected with a message: the expected response to bad input
  }
  const std::string effective = schema.to_yaml();

  // The printed configuration is a recipe that reads back to itself.
  const std::filesystem::path printed = fp8rl::fuzz::write_input_file("effective.yaml", effective);
  std::string reread;
  try {
    schema.load(printed);
    reread = schema.to_yaml();
  } catch (const fp8rl::Error& e) {
    std::fprintf(stderr, "to_yaml() output does not load back: %s\n--- to_yaml() ---\n%s", e.what(), effective.c_str());
    std::abort();
  }
  if (reread != effective) {
    std::fprintf(stderr, "to_yaml() output loads back to another configuration\n--- first ---\n%s--- reread ---\n%s",
                 effective.c_str(), reread.c_str());
    std::abort();
  }
  return 0;
}
