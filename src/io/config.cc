#include "io/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "core/check.h"
#include "io/config_sources.h"

namespace fs = std::filesystem;

namespace fp8rl {
namespace {

using config_detail::ConfigEntry;

std::vector<std::string> split_key(std::string_view key) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string_view::npos; start = dot + 1)
    parts.emplace_back(key.substr(start, dot - start));
  parts.emplace_back(key.substr(start));
  return parts;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

// A number as YAML that reads back to the same double: the shortest round-trip form, with ".0"
// added where it would otherwise look like an integer.
std::string format_double(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// A YAML double-quoted scalar: always quoted, so "true", "1e5" or "" stay strings on reload.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string format_value(const ConfigValue& value) {
  struct Formatter {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_double(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<std::string>& list) const {
      std::string out = "[";
      for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + quote(list[i]);
      return out + "]";
    }
  };
  return std::visit(Formatter{}, value);
}

std::string describe_node(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "'" + node.Scalar() + "'";
}

// Parses `node` as the field's type. Returns nullopt when the YAML has the wrong type or syntax.
std::optional<ConfigValue> parse_node(const ConfigField& field, const YAML::Node& node) {
  if (node.IsNull()) return field.nullable() ? std::optional<ConfigValue>(std::monostate{}) : std::nullopt;
  if (field.type() == ConfigType::kStringList) {
    if (!node.IsSequence()) return std::nullopt;
    std::vector<std::string> list;
    for (const auto& item : node) {
      if (!item.IsScalar()) return std::nullopt;
      list.push_back(item.Scalar());
    }
    return ConfigValue(std::move(list));
  }
  if (!node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  switch (field.type()) {
    case ConfigType::kBool:
      if (text == "true" || text == "True" || text == "TRUE") return ConfigValue(true);
      if (text == "false" || text == "False" || text == "FALSE") return ConfigValue(false);
      return std::nullopt;
    case ConfigType::kInt: {
      const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || begin == end) return std::nullopt;
      return ConfigValue(v);
    }
    case ConfigType::kDouble: {
      if (text.empty()) return std::nullopt;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
      return ConfigValue(v);
    }
    case ConfigType::kString: return ConfigValue(text);
    case ConfigType::kStringList: break;
  }
  return std::nullopt;
}

bool less_by_components(const std::string& a, const std::string& b) { return split_key(a) < split_key(b); }

}  // namespace

double config_detail::float_to_shortest_double(float f) {
  return std::strtod(fmt::format("{}", f).c_str(), nullptr);
}

// ---- ConfigField ------------------------------------------------------------------------------

ConfigField& ConfigField::range(double lo, double hi) {
  FP8RL_CHECK(lo <= hi, "config key '{}': empty range [{}, {}]", key_, lo, hi);
  lo_ = lo;
  hi_ = hi;
  lo_exclusive_ = false;
  check_default();
  return *this;
}

ConfigField& ConfigField::at_least(double lo) {
  lo_ = lo;
  lo_exclusive_ = false;
  check_default();
  return *this;
}

ConfigField& ConfigField::at_most(double hi) {
  hi_ = hi;
  check_default();
  return *this;
}

ConfigField& ConfigField::greater_than(double lo) {
  lo_ = lo;
  lo_exclusive_ = true;
  check_default();
  return *this;
}

ConfigField& ConfigField::choices(std::vector<std::string> allowed) {
  FP8RL_CHECK(type_ == ConfigType::kString || type_ == ConfigType::kStringList,
              "config key '{}': choices apply to string fields", key_);
  FP8RL_CHECK(!allowed.empty(), "config key '{}': empty list of choices", key_);
  choices_ = std::move(allowed);
  check_default();
  return *this;
}

void ConfigField::check_default() const {
  FP8RL_CHECK(lo_ || hi_ ? (type_ == ConfigType::kInt || type_ == ConfigType::kDouble) : true,
              "config key '{}': bounds apply to numeric fields", key_);
  const std::string problem = validate(default_);
  FP8RL_CHECK(problem.empty(), "config key '{}': the default {} is invalid: expected {}", key_, format_value(default_),
              expectation());
}

std::string ConfigField::expectation() const {
  std::string text;
  switch (type_) {
    case ConfigType::kBool: text = "a boolean (true or false)"; break;
    case ConfigType::kInt: text = "an integer"; break;
    case ConfigType::kDouble: text = "a number"; break;
    case ConfigType::kString: text = "a string"; break;
    case ConfigType::kStringList: text = "a list of strings, e.g. [a, b]"; break;
  }
  if (!choices_.empty()) {
    std::string names;
    for (size_t i = 0; i < choices_.size(); ++i) names += (i ? ", '" : "'") + choices_[i] + "'";
    text = type_ == ConfigType::kString ? "one of " + names : "a list of strings, each one of " + names;
  }
  if (lo_ && hi_ && !lo_exclusive_) {
    text += fmt::format(" in [{}, {}]", *lo_, *hi_);
  } else {
    if (lo_) text += fmt::format(" {} {}", lo_exclusive_ ? ">" : ">=", *lo_);
    if (lo_ && hi_) text += " and";
    if (hi_) text += fmt::format(" <= {}", *hi_);
  }
  if (nullable_) text += ", or null";
  return text;
}

std::string ConfigField::validate(const ConfigValue& value) const {
  if (std::holds_alternative<std::monostate>(value)) return nullable_ ? "" : "null";
  double number = 0;
  bool numeric = false;
  if (const auto* i = std::get_if<int64_t>(&value)) {
    if (type_ != ConfigType::kInt) return format_value(value);
    number = static_cast<double>(*i);
    numeric = true;
  } else if (const auto* d = std::get_if<double>(&value)) {
    if (type_ != ConfigType::kDouble) return format_value(value);
    number = *d;
    numeric = true;
  } else if (std::holds_alternative<bool>(value) != (type_ == ConfigType::kBool) ||
             std::holds_alternative<std::string>(value) != (type_ == ConfigType::kString) ||
             std::holds_alternative<std::vector<std::string>>(value) != (type_ == ConfigType::kStringList)) {
    return format_value(value);
  }
  if (numeric) {
    const bool below = lo_ && (lo_exclusive_ ? number <= *lo_ : number < *lo_);
    const bool above = hi_ && number > *hi_;
    if (below || above) return format_value(value);
  }
  auto allowed = [&](const std::string& s) {
    return choices_.empty() || std::find(choices_.begin(), choices_.end(), s) != choices_.end();
  };
  if (const auto* s = std::get_if<std::string>(&value); s && !allowed(*s)) return format_value(value);
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    for (const std::string& s : *list)
      if (!allowed(s)) return quote(s) + " in " + format_value(value);
  }
  return "";
}

// ---- ConfigSchema -----------------------------------------------------------------------------

ConfigSchema::ConfigSchema() = default;
ConfigSchema::~ConfigSchema() = default;

ConfigField& ConfigSchema::register_field(std::string key, ConfigType type, bool nullable, ConfigValue default_value,
                                          std::string help, std::function<ConfigValue()> get,
                                          std::function<void(const ConfigValue&)> set) {
  for (const std::string& part : split_key(key)) {
    FP8RL_CHECK(!part.empty() && std::all_of(part.begin(), part.end(),
                                             [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }),
                "config key '{}' must be dot-separated names of letters, digits, '_' and '-'", key);
  }
  FP8RL_CHECK(key != "defaults", "config key 'defaults' is reserved for recipe includes");
  for (const auto& f : fields_) {
    FP8RL_CHECK(f->key_ != key, "config key '{}' registered twice", key);
    FP8RL_CHECK(!f->key_.starts_with(key + ".") && !key.starts_with(f->key_ + "."),
                "config key '{}' and '{}' conflict: a key cannot also be a section", key, f->key_);
  }
  auto field = std::make_unique<ConfigField>();
  field->key_ = std::move(key);
  field->type_ = type;
  field->nullable_ = nullable;
  field->default_ = std::move(default_value);
  field->help_ = std::move(help);
  field->get_ = std::move(get);
  field->set_ = std::move(set);
  field->check_default();
  field->set_(field->default_);
  fields_.push_back(std::move(field));
  return *fields_.back();
}

const ConfigField* ConfigSchema::find(std::string_view key) const {
  for (const auto& f : fields_)
    if (f->key_ == key) return f.get();
  return nullptr;
}

std::vector<std::string> ConfigSchema::keys() const {
  std::vector<std::string> out;
  for (const auto& f : fields_) out.push_back(f->key_);
  std::sort(out.begin(), out.end(), less_by_components);
  return out;
}

void ConfigSchema::reset_to_defaults() {
  for (const auto& f : fields_) f->set_(f->default_);
}

void ConfigSchema::load(const fs::path& recipe, const std::vector<std::string>& overrides) { apply(&recipe, overrides); }

void ConfigSchema::load_overrides(const std::vector<std::string>& overrides) { apply(nullptr, overrides); }

void ConfigSchema::apply(const fs::path* recipe, const std::vector<std::string>& overrides) {
  std::vector<ConfigEntry> entries;
  if (recipe != nullptr) entries = config_detail::read_recipe_entries(*recipe);
  for (ConfigEntry& e : config_detail::parse_override_entries(overrides)) entries.push_back(std::move(e));

  // Parse and check everything before touching a bound variable (all-or-nothing).
  std::map<const ConfigField*, ConfigValue> staged;
  for (const ConfigEntry& entry : entries) {
    const ConfigField* field = find(entry.key);
    if (field == nullptr) {
      const std::string section = entry.key + ".";
      const auto member = std::find_if(fields_.begin(), fields_.end(), [&](const auto& f) { return f->key_.starts_with(section); });
      if (member != fields_.end()) {
        if (entry.value.IsNull()) continue;  // `grpo:` with nothing under it
        throw Error(fmt::format("key '{}' in {} is a section (e.g. '{}'), not a value; found {}", entry.key, entry.source,
                                (*member)->key_, describe_node(entry.value)));
      }
      const ConfigField* nearest = nullptr;
      size_t best = SIZE_MAX;
      const std::string leaf = split_key(entry.key).back();
      for (const auto& f : fields_) {
        size_t d = edit_distance(entry.key, f->key_);
        if (split_key(f->key_).back() == leaf) d = std::min<size_t>(d, 1);  // right name, wrong section
        if (d < best) best = d, nearest = f.get();
      }
      const bool close = nearest != nullptr && best <= std::max<size_t>(3, entry.key.size() / 3);
      throw Error(fmt::format("unknown key '{}' in {}{}", entry.key, entry.source,
                              close ? fmt::format(" (did you mean '{}'?)", nearest->key_) : std::string()));
    }
    const std::optional<ConfigValue> value = parse_node(*field, entry.value);
    const std::string problem = value ? field->validate(*value) : describe_node(entry.value);
    if (!problem.empty())
      throw Error(fmt::format("key '{}' in {} expects {}, found {}", entry.key, entry.source, field->expectation(), problem));
    staged[field] = *value;
  }
  for (const auto& f : fields_) {
    const auto it = staged.find(f.get());
    f->set_(it != staged.end() ? it->second : f->default_);
  }
}

std::string ConfigSchema::to_yaml(bool with_help) const {
  std::vector<const ConfigField*> sorted;
  for (const auto& f : fields_) sorted.push_back(f.get());
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return less_by_components(a->key_, b->key_); });
  std::string out;
  std::vector<std::string> open;  // the sections printed last, outermost first
  for (const ConfigField* f : sorted) {
    std::vector<std::string> parts = split_key(f->key_);
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (size_t i = common; i < parts.size(); ++i) out += std::string(2 * i, ' ') + parts[i] + ":\n";
    open = parts;
    const std::string indent(2 * parts.size(), ' ');
    if (with_help && !f->help_.empty()) out += indent + "# " + f->help_ + "\n";
    out += indent + leaf + ": " + format_value(f->get_()) + "\n";
  }
  return out;
}

std::string ConfigSchema::help_text() const {
  std::string out;
  for (const std::string& key : keys()) {
    const ConfigField* f = find(key);
    out += fmt::format("  {} = {}\n      {}; {}\n", key, format_value(f->default_), f->expectation(), f->help_);
  }
  return out;
}

}  // namespace fp8rl
