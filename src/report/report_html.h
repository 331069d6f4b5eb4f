// The page of `fp8rl report`: one self-contained HTML file (uPlot, the page's script, its styles
// and the data inline; nothing is fetched when it is viewed) that compares runs grouped by preset
// (report/run_groups.h):
//
//   * a summary table, one row per preset, with the columns of docs/results.md;
//   * line charts of validation accuracy, reward, token_mult_prob_error, gen_kl_error,
//     is_oob_ratio, grad norm and response length: a thin line per run (seed), a thick one per
//     preset (the mean of its runs);
//   * the step time split per preset (the `timing.*` phases of metrics.jsonl, stacked: not "total",
//     not the parts of "training", report/run_groups.h);
//   * each run's effective config.yaml in a <details> element, and the reader's warnings.
//
// The tables are static HTML; the charts are drawn by src/report/report_page.js, which also
// records on the page what each chart drew (see there) so that a headless browser can check it.
#pragma once

#include <string>
#include <vector>

#include "report/run_metrics.h"

namespace fp8rl::report {

// Throws fp8rl::Error if `runs` is empty or if this binary was built without uPlot.
std::string render_report_html(const std::vector<RunMetrics>& runs);

}  // namespace fp8rl::report
