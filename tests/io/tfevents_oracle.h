// The independent TensorBoard event-file reader and writer (tools/oracles/tfevents_check.js:
// @roboflow/tfrecords framing and CRC32C, protobufjs decoding), run with Node.js. scripts/setup.sh
// installs its npm packages into tools/oracles/node_modules; tests skip when they are missing.
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/check.h"
#include "io/tfevents.h"
#include "tests/test_temp_dir.h"

namespace fp8rl::testing {

inline const std::filesystem::path kTfEventsOracleDir = std::filesystem::path(FP8RL_SOURCE_DIR) / "tools" / "oracles";

// Why the oracle cannot run on this machine, or "" when it can.
inline std::string tfevents_oracle_missing() {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "Node.js (node) is not installed";
  for (const char* package : {"protobufjs", "@roboflow/tfrecords"})
    if (!std::filesystem::exists(kTfEventsOracleDir / "node_modules" / package))
      return fmt::format("tools/oracles/node_modules/{} is missing (scripts/setup.sh installs it)", package);
  return "";
}

// Runs `tfevents_check.js ARGS`; throws Error with the command line if it fails.
inline void run_tfevents_oracle(const std::string& args) {
  const std::string cmd = fmt::format("node '{}' {}", (kTfEventsOracleDir / "tfevents_check.js").string(), args);
  FP8RL_CHECK(std::system(cmd.c_str()) == 0, "oracle failed: {}", cmd);
}

// Every scalar of `file` as the oracle reads it (its CRCs checked); `dump` is the oracle's JSON.
inline std::vector<TfEventsScalar> read_tfevents_with_oracle(const std::filesystem::path& file,
                                                             nlohmann::json* dump = nullptr) {
  const TempDir tmp;
  run_tfevents_oracle(fmt::format("read '{}' '{}'", file.string(), (tmp / "dump.json").string()));
  const nlohmann::json j = nlohmann::json::parse(read_file_bytes(tmp / "dump.json"));
  std::vector<TfEventsScalar> scalars;
  for (const auto& s : j.at("scalars")) {
    const auto bits = static_cast<uint32_t>(std::stoul(s.at("bits").get<std::string>(), nullptr, 16));
    scalars.push_back({s.at("step").get<int64_t>(), s.at("wall_time").get<double>(), s.at("tag").get<std::string>(),
                       std::bit_cast<float>(bits)});
  }
  if (dump != nullptr) *dump = j;
  return scalars;
}

}  // namespace fp8rl::testing
