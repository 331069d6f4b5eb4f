// A run directory's metrics.jsonl as `fp8rl report` reads it (src/report/run_metrics.h):
// read_run_metrics on a directory holding the input as metrics.jsonl (and no config.yaml, which
// is a warning), then the invariants the report relies on: steps ascending and unique, every
// series aligned with them, metric_order naming each series once. The reader is tolerant: bad
// lines become warnings; fp8rl::Error only when no line is a valid step.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/check.h"
#include "fuzz_input_file.h"
#include "report/run_metrics.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "read_run_metrics: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path file = fp8rl::fuzz::write_input_file("metrics.jsonl", fp8rl::fuzz::as_text(data, size));
  fp8rl::report::RunMetrics run;
  try {
    run = fp8rl::report::read_run_metrics(file.parent_path());
  } catch (const fp8rl::Error&) {
    return 0;
  }
  if (run.steps.empty()) fail("no steps, but no Error");
  for (size_t i = 1; i < run.steps.size(); ++i)
    if (run.steps[i - 1] >= run.steps[i]) fail("steps not ascending and unique");
  if (run.metric_order.size() != run.series.size()) fail("metric_order and series differ in size");
  for (const std::string& name : run.metric_order) {
    const std::vector<double>* values = run.find(name);
    if (values == nullptr) fail("a metric of metric_order has no series");
    if (values->size() != run.steps.size()) fail("a series is not aligned with the steps");
  }
  (void)run.config_value("run.name", "none");
  return 0;
}
