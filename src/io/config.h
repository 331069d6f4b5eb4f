// The configuration system of recipes: one schema, registered once in code, drives defaults,
// parsing, validation, help text and printing of the effective configuration.
//
//   struct GrpoConfig { int64_t max_num_steps; double lr; std::string kv_cache_dtype; };
//   void bind(ConfigSchema& s, GrpoConfig& c) {
//     s.add("grpo.max_num_steps", &c.max_num_steps, 100, "optimizer steps to run").at_least(1);
//     s.add("policy.optimizer.lr", &c.lr, 1e-5, "AdamW learning rate").range(0, 1);
//     s.add("kv_cache_dtype", &c.kv_cache_dtype, "bf16", "KV cache storage").choices({"bf16", "fp8"});
//   }
//   ConfigSchema schema; GrpoConfig cfg; bind(schema, cfg);
//   schema.load("recipes/grpo-fp8-e2e.yaml", {"grpo.max_num_steps=20"});  // fills cfg
//   write_file_atomic(run_dir / "config.yaml", schema.to_yaml());
//
// Sources, lowest precedence first: the defaults given to `add`; the recipe's base recipes (key
// `defaults: other.yaml`, a path relative to the including file, applied first, chains allowed,
// cycles rejected); the recipe itself; then the command-line overrides `key.path=value` in order
// (the value is parsed as YAML: a scalar, `[a, b]`, or `null`). YAML maps nest keys: `grpo:
// {max_num_steps: 5}` and `grpo.max_num_steps: 5` are the same key; a later source replaces single
// keys, never whole sections.
//
// Errors are fp8rl::Error with one line naming the source (`recipes/x.yaml:12`, or `command line
// 'key=value'`), the key, and what was expected: unknown keys suggest the nearest valid key, type
// errors name the expected type, range and choice errors the allowed values. Loading is
// all-or-nothing: on error the bound variables keep their previous values.
//
// The schema stores pointers to the bound variables: they must outlive the schema and stay put
// (bind the fields of a struct that is not moved after binding).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace fp8rl {

// A parsed value. std::monostate is YAML `null`, allowed only for std::optional fields.
using ConfigValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<std::string>>;

enum class ConfigType { kBool, kInt, kDouble, kString, kStringList };

// One registered field; `add` returns it so that checks can be chained.
class ConfigField {
 public:
  // Numeric bounds (int and double fields), inclusive unless named otherwise.
  ConfigField& range(double lo, double hi);
  ConfigField& at_least(double lo);
  ConfigField& at_most(double hi);
  ConfigField& greater_than(double lo);
  // The allowed values of a string field (which makes it an enum) or of each list element.
  ConfigField& choices(std::vector<std::string> allowed);

  const std::string& key() const { return key_; }
  const std::string& help() const { return help_; }
  ConfigType type() const { return type_; }
  bool nullable() const { return nullable_; }
  const ConfigValue& default_value() const { return default_; }
  ConfigValue current() const { return get_(); }
  // "an integer >= 1", "one of 'bf16', 'fp8'", "a number in [0, 1]", ...
  std::string expectation() const;
  // Checks `value` against type, bounds and choices; returns "" if valid, else what is wrong.
  std::string validate(const ConfigValue& value) const;

 private:
  friend class ConfigSchema;
  std::string key_, help_;
  ConfigType type_ = ConfigType::kString;
  bool nullable_ = false;
  std::optional<double> lo_, hi_;
  bool lo_exclusive_ = false;
  std::vector<std::string> choices_;
  ConfigValue default_;
  std::function<ConfigValue()> get_;             // reads the bound variable
  std::function<void(const ConfigValue&)> set_;  // writes it (value already validated)
  void check_default() const;
};

class ConfigSchema {
 public:
  ConfigSchema();
  ~ConfigSchema();
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  // Registers `key` (dotted, e.g. "policy.optimizer.lr") bound to `*target`, and sets `*target`
  // to `default_value`. T is one of bool, int, int64_t, uint64_t, double, float, std::string,
  // std::vector<std::string>, or std::optional<int64_t | double | std::string> (which accept
  // `null`). Narrow integer types get their range checked implicitly.
  template <typename T>
  ConfigField& add(std::string key, T* target, std::type_identity_t<T> default_value, std::string help);

  // A C++ enum stored as one of the given names in YAML.
  template <typename E>
  ConfigField& add_enum(std::string key, E* target, E default_value, std::vector<std::pair<std::string, E>> names,
                        std::string help);

  // Sets every field to its default, then applies the recipe (with its base recipes) and the
  // overrides. All-or-nothing: on error nothing is changed.
  void load(const std::filesystem::path& recipe, const std::vector<std::string>& overrides = {});
  // The same without a recipe file: defaults, then overrides.
  void load_overrides(const std::vector<std::string>& overrides);
  void reset_to_defaults();

  // The effective configuration as YAML: nested by key path, sorted, one field per line, which
  // `load` reads back to the same values. With `with_help`, each field is preceded by a comment.
  std::string to_yaml(bool with_help = false) const;
  // One line per field: key, type and checks, default, help.
  std::string help_text() const;

  std::vector<std::string> keys() const;  // sorted
  const ConfigField* find(std::string_view key) const;

 private:
  ConfigField& register_field(std::string key, ConfigType type, bool nullable, ConfigValue default_value,
                              std::string help, std::function<ConfigValue()> get,
                              std::function<void(const ConfigValue&)> set);
  void apply(const std::filesystem::path* recipe, const std::vector<std::string>& overrides);

  std::vector<std::unique_ptr<ConfigField>> fields_;  // stable addresses for the returned refs
};

// ---- template implementation -------------------------------------------------------------------

namespace config_detail {
// The double with the shortest decimal form that rounds to `f`: 0.1f is stored and printed as
// 0.1, not as 0.10000000149011612.
double float_to_shortest_double(float f);

template <typename Stored, typename T>
Stored to_stored(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    return float_to_shortest_double(v);
  } else {
    return static_cast<Stored>(v);
  }
}

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Inner = T;
};
}  // namespace config_detail

template <typename T>
ConfigField& ConfigSchema::add(std::string key, T* target, std::type_identity_t<T> default_value, std::string help) {
  if constexpr (config_detail::IsOptional<T>::value) {
    using Inner = typename config_detail::IsOptional<T>::Inner;
    static_assert(std::is_same_v<Inner, int64_t> || std::is_same_v<Inner, double> || std::is_same_v<Inner, std::string>,
                  "optional config fields hold int64_t, double or std::string");
    constexpr ConfigType type = std::is_same_v<Inner, int64_t>  ? ConfigType::kInt
                                : std::is_same_v<Inner, double> ? ConfigType::kDouble
                                                                : ConfigType::kString;
    auto to_value = [](const T& v) -> ConfigValue { return v ? ConfigValue(*v) : ConfigValue(std::monostate{}); };
    return register_field(
        std::move(key), type, /*nullable=*/true, to_value(default_value), std::move(help),
        [target, to_value] { return to_value(*target); },
        [target](const ConfigValue& v) {
          if (std::holds_alternative<std::monostate>(v)) {
            target->reset();
          } else {
            *target = std::get<Inner>(v);
          }
        });
  } else {
    using Stored = std::conditional_t<std::is_same_v<T, bool>, bool,
                   std::conditional_t<std::is_integral_v<T>, int64_t,
                   std::conditional_t<std::is_floating_point_v<T>, double, T>>>;
    static_assert(std::is_same_v<Stored, bool> || std::is_same_v<Stored, int64_t> || std::is_same_v<Stored, double> ||
                      std::is_same_v<Stored, std::string> || std::is_same_v<Stored, std::vector<std::string>>,
                  "unsupported config field type");
    constexpr ConfigType type = std::is_same_v<Stored, bool>          ? ConfigType::kBool
                                : std::is_same_v<Stored, int64_t>     ? ConfigType::kInt
                                : std::is_same_v<Stored, double>      ? ConfigType::kDouble
                                : std::is_same_v<Stored, std::string> ? ConfigType::kString
                                                                      : ConfigType::kStringList;
    ConfigField& field = register_field(
        std::move(key), type, /*nullable=*/false, ConfigValue(config_detail::to_stored<Stored>(default_value)),
        std::move(help), [target] { return ConfigValue(config_detail::to_stored<Stored>(*target)); },
        [target](const ConfigValue& v) { *target = static_cast<T>(std::get<Stored>(v)); });
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, int64_t>) {
      // The C++ type's own limits (int, uint64_t, ...), as far as an int64 YAML value reaches.
      const double lo = std::is_signed_v<T> ? static_cast<double>(std::numeric_limits<T>::min()) : 0.0;
      const double hi = sizeof(T) < sizeof(int64_t) ? static_cast<double>(std::numeric_limits<T>::max())
                                                    : static_cast<double>(std::numeric_limits<int64_t>::max());
      field.range(lo, hi);
    }
    if constexpr (std::is_same_v<T, float>) {
      field.range(-std::numeric_limits<float>::max(), std::numeric_limits<float>::max());
    }
    return field;
  }
}

template <typename E>
ConfigField& ConfigSchema::add_enum(std::string key, E* target, E default_value,
                                    std::vector<std::pair<std::string, E>> names, std::string help) {
  std::vector<std::string> allowed;
  std::string default_name;
  for (const auto& [name, value] : names) {
    allowed.push_back(name);
    if (value == default_value) default_name = name;
  }
  auto get = [target, names] {
    for (const auto& [name, value] : names)
      if (value == *target) return ConfigValue(name);
    return ConfigValue(std::string("<unnamed enum value>"));
  };
  auto set = [target, names](const ConfigValue& v) {
    for (const auto& [name, value] : names)
      if (name == std::get<std::string>(v)) *target = value;
  };
  ConfigField& field = register_field(std::move(key), ConfigType::kString, /*nullable=*/false,
                                      ConfigValue(default_name), std::move(help), std::move(get), std::move(set));
  field.choices(std::move(allowed));
  *target = default_value;
  return field;
}

}  // namespace fp8rl
