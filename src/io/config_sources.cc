#include "io/config_sources.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "io/input_file.h"

namespace fs = std::filesystem;

namespace fp8rl::config_detail {
namespace {

std::string location(const std::string& file, const YAML::Mark& mark) {
  return mark.is_null() ? file : fmt::format("{}:{}", file, mark.line + 1);
}

// Appends the leaves of `node` under `prefix` to `out`. `first_seen` catches a key given twice
// in one source (YAML itself would silently keep one of them).
void flatten(const YAML::Node& node, const std::string& prefix, const std::string& file, std::vector<ConfigEntry>& out,
             std::map<std::string, std::string>& first_seen) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!kv.first.IsScalar() || kv.first.Scalar().empty())
        throw Error(fmt::format("{}: keys must be non-empty strings", location(file, kv.first.Mark())));
      flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(), file, out, first_seen);
    }
    if (node.size() == 0 && !prefix.empty()) out.push_back({prefix, YAML::Node(YAML::NodeType::Null), location(file, node.Mark())});
    return;
  }
  const std::string where = location(file, node.Mark());
  if (auto [it, inserted] = first_seen.emplace(prefix, where); !inserted)
    throw Error(fmt::format("{}: key '{}' is given twice in this source (first at {})", where, prefix, it->second));
  out.push_back({prefix, node, where});
}

YAML::Node load_yaml_file(const fs::path& path, const std::string& included_by) {
  const std::string text = read_input_file(path, "recipe", kMaxRecipeBytes,
                                          included_by.empty() ? "" : "(named by `defaults` at " + included_by + ")");
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}:{}:{}: invalid YAML: {}", path.string(), e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

void read_recursive(const fs::path& path, const std::string& included_by, std::vector<fs::path>& chain,
                    std::vector<ConfigEntry>& out) {
  const fs::path canonical = fs::weakly_canonical(path);
  for (const fs::path& p : chain) {
    if (p == canonical) {
      std::string cycle;
      for (const fs::path& q : chain) cycle += q.string() + " -> ";
      throw Error(fmt::format("recipe include cycle: {}{} (via `defaults` at {})", cycle, canonical.string(), included_by));
    }
  }
  const YAML::Node root = load_yaml_file(path, included_by);
  const std::string file = path.string();
  if (root.IsNull()) return;  // an empty recipe
  if (!root.IsMap())
    throw Error(fmt::format("{}: a recipe must be a mapping of keys to values at the top level", location(file, root.Mark())));

  chain.push_back(canonical);
  if (const YAML::Node base = root["defaults"]; base) {
    if (!base.IsScalar() || base.Scalar().empty())
      throw Error(fmt::format("{}: `defaults` must name one base recipe file (a path relative to this file)",
                              location(file, base.Mark())));
    fs::path base_path = base.Scalar();
    if (base_path.is_relative()) base_path = path.parent_path() / base_path;
    read_recursive(base_path, location(file, base.Mark()), chain, out);
  }
  chain.pop_back();

  std::vector<ConfigEntry> own;
  std::map<std::string, std::string> first_seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar() || kv.first.Scalar().empty())
      throw Error(fmt::format("{}: keys must be non-empty strings", location(file, kv.first.Mark())));
    if (kv.first.Scalar() == "defaults") continue;
    flatten(kv.second, kv.first.Scalar(), file, own, first_seen);
  }
  out.insert(out.end(), own.begin(), own.end());
}

}  // namespace

std::vector<ConfigEntry> read_recipe_entries(const fs::path& recipe) {
  std::vector<fs::path> chain;
  std::vector<ConfigEntry> out;
  read_recursive(recipe, "", chain, out);
  return out;
}

std::vector<ConfigEntry> parse_override_entries(const std::vector<std::string>& overrides) {
  std::vector<ConfigEntry> out;
  for (const std::string& text : overrides) {
    const std::string source = fmt::format("command line '{}'", text);
    const size_t eq = text.find('=');
    if (eq == std::string::npos)
      throw Error(fmt::format("{}: an override has the form key.path=value (e.g. grpo.max_num_steps=20)", source));
    std::string key = text.substr(0, eq);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    while (!key.empty() && key.front() == ' ') key.erase(key.begin());
    if (key.empty()) throw Error(fmt::format("{}: the key before '=' is empty", source));
    YAML::Node value;
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw Error(fmt::format("{}: the value is not valid YAML: {} (quote strings with special characters)", source, e.msg));
    }
    std::vector<ConfigEntry> entries;
    std::map<std::string, std::string> first_seen;
    flatten(value, key, source, entries, first_seen);
    for (ConfigEntry& e : entries) e.source = source;  // marks inside the value's text mean nothing here
    out.insert(out.end(), entries.begin(), entries.end());
  }
  return out;
}

}  // namespace fp8rl::config_detail
