// A Hugging Face config.json (src/model/hf_config.h): nlohmann::json::parse, then
// model_config_from_hf_json, which validates every field, then hf_config_json of the result
// (the export direction) read back to the same ModelConfig.
//
// Expected responses to bad input: an exception from nlohmann::json::parse (parse_error, or
// out_of_range for a number beyond double; read_json_file turns either into an Error) and
// fp8rl::Error. Any other exception escaping model_config_from_hf_json (e.g. a nlohmann
// out_of_range or type_error) is a finding: the header promises an Error naming the source.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "fuzz_input_file.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(fp8rl::fuzz::as_text(data, size));
  } catch (const nlohmann::json::exception&) {  // parse_error, or out_of_range for a number like 1e400
    return 0;
  }
  fp8rl::ModelConfig config;
  try {
    config = fp8rl::model_config_from_hf_json(j, "fuzz");
  } catch (const fp8rl::Error&) {
    return 0;
  }
  // What export writes must load back to the same architecture.
  const nlohmann::json exported = fp8rl::hf_config_json(config, j);
  fp8rl::ModelConfig reread;
  try {
    reread = fp8rl::model_config_from_hf_json(nlohmann::json::parse(exported.dump()), "fuzz (exported)");
  } catch (const fp8rl::Error& e) {
    std::fprintf(stderr, "hf_config_json output does not load back: %s\n%s\n", e.what(), exported.dump(2).c_str());
    std::abort();
  }
  if (fp8rl::hf_config_json(reread, j) != exported) {
    std::fprintf(stderr, "hf_config_json output loads back to another config:\n%s\n%s\n", exported.dump(2).c_str(),
                 fp8rl::hf_config_json(reread, j).dump(2).c_str());
    std::abort();
  }
  return 0;
}
