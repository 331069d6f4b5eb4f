#include "report/report_job.h"

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "report/report_html.h"
#include "report/run_groups.h"
#include "report/run_metrics.h"

namespace fp8rl::report {

void run_report_job(const std::vector<std::string>& run_dirs, const std::string& output) {
  std::vector<RunMetrics> runs;
  for (const std::string& dir : run_dirs) {
    runs.push_back(read_run_metrics(dir));
    for (const std::string& w : runs.back().warnings) fmt::print(stderr, "fp8rl: warning: {}\n", w);
  }
  const std::string html = render_report_html(runs);
  write_file_atomic(output, html);
  const size_t presets = group_runs_by_preset(runs).size();
  fmt::print("report: wrote {} ({} run{} in {} preset{}, {} KiB)\n", output, runs.size(), runs.size() == 1 ? "" : "s",
             presets, presets == 1 ? "" : "s", (html.size() + 1023) / 1024);
}

}  // namespace fp8rl::report
