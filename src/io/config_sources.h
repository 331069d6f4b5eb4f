// Reading configuration sources into flat (dotted key, YAML value, where it came from) entries:
// recipe files with their `defaults:` base recipes, and command-line `key=value` overrides.
// Internal to io/config.cc, which validates the entries against the schema.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

namespace fp8rl::config_detail {

struct ConfigEntry {
  std::string key;     // dotted path, e.g. "policy.optimizer.lr"
  YAML::Node value;    // a scalar, a sequence or null; never a map (maps are flattened into keys)
  std::string source;  // "recipes/x.yaml:12" or "command line 'grpo.seed=3'"
};

// The entries of `recipe` after its chain of base recipes, in precedence order (later entries
// override earlier ones with the same key). Throws Error for an unreadable file, invalid YAML,
// a non-map document, a duplicate key within one file, or an include cycle.
std::vector<ConfigEntry> read_recipe_entries(const std::filesystem::path& recipe);

// The entries of `key=value` overrides, in order. Throws Error for a malformed override.
std::vector<ConfigEntry> parse_override_entries(const std::vector<std::string>& overrides);

}  // namespace fp8rl::config_detail
