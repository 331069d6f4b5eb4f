// `fp8rl report RUN_DIR... [-o report.html]`: reads the run directories (report/run_metrics.h),
// prints the reader's warnings to stderr, and writes the comparison page (report/report_html.h)
// atomically.
#pragma once

#include <string>
#include <vector>

namespace fp8rl::report {

void run_report_job(const std::vector<std::string>& run_dirs, const std::string& output);

}  // namespace fp8rl::report
