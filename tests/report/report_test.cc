// `fp8rl report`: the tolerant reader of run directories, the grouping and summary, the page, and
// the page drawn by headless Chromium (skipped where Chromium is not installed; scripts/setup.sh
// installs it).
// ctest-file-label: quick
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "report/report_assets.h"
#include "report/report_html.h"
#include "report/run_groups.h"
#include "report/run_metrics.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl::report {
namespace {

namespace fs = std::filesystem;
using fp8rl::testing::error_message;
using fp8rl::testing::read_file_bytes;
using fp8rl::testing::TempDir;
using ::testing::HasSubstr;

// One metrics.jsonl line shaped like the GRPO loop's (src/jobs/grpo.cc), with values that move with
// the step so that every chart has a curve.
std::string metrics_line(int step, double offset, bool with_val) {
  const double t = step;
  std::string line =
      fmt::format(R"({{"step":{},"reward_mean":{},"accuracy":{},"response_length_mean":{},"response_length_max":6,)"
                  R"("token_mult_prob_error":{},"gen_kl_error":{},"is_oob_ratio":{},"grad_norm":{},"lr":5e-05,)"
                  R"("skipped_optimizer_steps":0,"kv_scales":[[1.0,2.0]],)"
                  R"("token_mult_prob_error_by_length":{{"1-16":{},"17-32":{}}},)",
                  step, 0.4 + 0.01 * t + offset, 0.5 + 0.01 * t, 4.0 + 0.05 * t, 1.0 + 0.02 / t + offset, 1e-3 / t,
                  0.01 * offset, 0.5 + 0.1 * std::sin(t), 1.0 + offset, 1.0 + 2 * offset + 0.001 * t);
  if (with_val) line += fmt::format(R"("val_accuracy":{},)", 0.6 + 0.005 * t + offset);
  line += fmt::format(
      R"("timing":{{"generation":{},"logprobs":0.01,"training":{},"optimizer":0.03,"communication":0.01,"refit":0.002,)"
      R"("kv_calibration":{},"total":{}}},)"
      R"("tokens_per_s":{{"generation":1000.0,"training":2000.0}}}})",
      0.02 + offset, 0.14, offset > 0 ? 0.006 : 0.0, 0.172 + offset + (offset > 0 ? 0.006 : 0.0));
  return line + "\n";
}

// A run directory with `steps` steps of synthetic metrics and a config.yaml naming its preset.
fs::path write_run(const TempDir& tmp, const std::string& name, const std::string& preset, int seed, int steps,
                   double offset, const std::string& extra_config = "") {
  std::string metrics;
  for (int s = 1; s <= steps; ++s) metrics += metrics_line(s, offset, s % 5 == 0 || s == steps);
  tmp.write(name + "/metrics.jsonl", metrics);
  tmp.write(name + "/config.yaml",
            fmt::format("generation:\n  kv_cache_dtype: \"bf16\"\n  precision: \"fp8\"\ngrpo:\n  seed: {}\n"
                        "logger:\n  log_dir: \"runs/{}\"\npolicy:\n  precision: \"fp8\"\nrun:\n  name: \"{}\"\n{}",
                        seed, name, preset, extra_config));
  return tmp / name;
}

TEST(RunMetrics, SkipsMalformedLinesWithAWarningNamingTheLineAndKeepsTheRest) {
  TempDir tmp;
  tmp.write("run/metrics.jsonl",
            metrics_line(1, 0, false) +                                       // line 1: valid
                "\n" +                                                        // line 2: blank, skipped silently
                "{\"step\": 2, \"reward_mean\": 0.5, \"timing\": {\"gen\n" +  // line 3: cut short
                "wandb: syncing run\n" +                                      // line 4: a foreign line
                "[1, 2, 3]\n" +                                               // line 5: JSON, not an object
                "{\"reward_mean\": 0.7}\n" +                                  // line 6: no step
                "{\"step\": 2.5, \"reward_mean\": 0.7}\n" +                   // line 7: step not an integer
                R"({"step": 3, "reward_mean": null, "grad_norm": 2.0, "timing": {"generation": 0.5}})"
                "\n" +  // line 8
                R"({"step": 2, "reward_mean": 0.25})"
                "\n" +                                       // line 9: valid, out of order
                "{\"step\": 5, \"reward_mean\": 1e999}\n" +  // line 10: out of range
                R"({"step": 4, "reward_mean": 0.)");         // line 11: killed mid-write, no newline
  const RunMetrics run = read_run_metrics(tmp / "run");

  ASSERT_EQ(run.steps, (std::vector<int64_t>{1, 2, 3}));
  const std::string file = (tmp / "run" / "metrics.jsonl").string();
  std::vector<std::string> lines_warned;
  for (const std::string& w : run.warnings) {
    if (w.starts_with(file + ":"))
      lines_warned.push_back(w.substr(file.size() + 1, w.find(':', file.size() + 1) - file.size() - 1));
  }
  EXPECT_EQ(lines_warned, (std::vector<std::string>{"3", "4", "5", "6", "7", "10", "11"}));
  EXPECT_THAT(run.warnings[0], HasSubstr("not valid JSON"));
  EXPECT_THAT(run.warnings[1], HasSubstr("wandb: syncing run"));
  EXPECT_THAT(run.warnings[3], HasSubstr("integer \"step\""));
  // No config.yaml: one more warning, and the run is grouped by its directory name.
  EXPECT_THAT(run.warnings.back(), HasSubstr("config.yaml: missing"));
  EXPECT_EQ(run_preset(run), "run");

  const std::vector<double>& reward = *run.find("reward_mean");
  EXPECT_DOUBLE_EQ(reward[0], 0.4 + 0.01);
  EXPECT_DOUBLE_EQ(reward[1], 0.25);
  EXPECT_TRUE(std::isnan(reward[2]));  // null reads as NaN
  // Nested numbers are flattened; a step without a metric holds NaN there; arrays are ignored.
  EXPECT_DOUBLE_EQ((*run.find("timing.generation"))[2], 0.5);
  EXPECT_TRUE(std::isnan((*run.find("timing.generation"))[1]));
  EXPECT_DOUBLE_EQ((*run.find("grad_norm"))[2], 2.0);
  EXPECT_EQ(run.find("kv_scales"), nullptr);
  EXPECT_EQ(run.find("step"), nullptr);
}

TEST(RunMetrics, ARepeatedStepKeepsItsLaterLine) {
  TempDir tmp;
  tmp.write("run/metrics.jsonl", R"({"step": 1, "reward_mean": 0.1})"
                                 "\n"
                                 R"({"step": 1, "reward_mean": 0.2})"
                                 "\n");
  const RunMetrics run = read_run_metrics(tmp / "run");
  ASSERT_EQ(run.steps.size(), 1u);
  EXPECT_DOUBLE_EQ((*run.find("reward_mean"))[0], 0.2);
  EXPECT_THAT(run.warnings[0], HasSubstr("metrics.jsonl:2: step 1 repeats line 1"));
}

TEST(RunMetrics, AMissingOrEmptyRunIsAnErrorNamingIt) {
  TempDir tmp;
  EXPECT_THAT(error_message([&] { read_run_metrics(tmp / "nowhere"); }),
              HasSubstr(fmt::format("run directory '{}' does not exist", (tmp / "nowhere").string())));
  fs::create_directories(tmp / "no_metrics");
  EXPECT_THAT(error_message([&] { read_run_metrics(tmp / "no_metrics"); }),
              HasSubstr(fmt::format("'{}' holds no metrics.jsonl", (tmp / "no_metrics").string())));
  tmp.write("empty/metrics.jsonl", "");
  EXPECT_THAT(error_message([&] { read_run_metrics(tmp / "empty"); }), HasSubstr("holds no valid step"));
  tmp.write("garbage/metrics.jsonl", "not json\n");
  EXPECT_THAT(error_message([&] { read_run_metrics(tmp / "garbage"); }),
              HasSubstr(fmt::format("{}' holds no valid step", (tmp / "garbage" / "metrics.jsonl").string())));
}

TEST(RunMetrics, ReadsTheConfigAndAnUnreadableConfigIsAWarning) {
  TempDir tmp;
  const RunMetrics run = read_run_metrics(write_run(tmp, "a-seed1", "grpo-fp8-e2e", 1, 3, 0));
  EXPECT_TRUE(run.warnings.empty());
  EXPECT_EQ(run.config_value("run.name"), "grpo-fp8-e2e");
  EXPECT_EQ(run.config_value("grpo.seed"), "1");
  EXPECT_EQ(run.config_value("no.such.key", "x"), "x");
  EXPECT_EQ(run_preset(run), "grpo-fp8-e2e");

  tmp.write("b-seed2/metrics.jsonl", metrics_line(1, 0, false));
  tmp.write("b-seed2/config.yaml", "run: [unclosed\n");
  const RunMetrics bad = read_run_metrics(tmp / "b-seed2");
  ASSERT_EQ(bad.warnings.size(), 1u);
  EXPECT_THAT(bad.warnings[0], HasSubstr("config.yaml:"));
  EXPECT_THAT(bad.warnings[0], HasSubstr("not valid YAML"));
  EXPECT_EQ(run_preset(bad), "b");  // the directory name less "-seed2"
}

TEST(RunGroups, GroupsByPresetAndSummarizesLikeTheResultsTable) {
  TempDir tmp;
  std::vector<RunMetrics> runs;
  runs.push_back(read_run_metrics(write_run(tmp, "kv-seed1", "grpo-fp8-e2e-kv", 1, 20, 0.1)));
  runs.push_back(read_run_metrics(write_run(tmp, "bf16-seed1", "grpo-bf16", 1, 20, 0.0)));
  runs.push_back(read_run_metrics(write_run(tmp, "kv-seed2", "grpo-fp8-e2e-kv", 2, 10, 0.1)));
  runs.push_back(read_run_metrics(write_run(tmp, "bf16-lr", "grpo-bf16", 2, 20, 0.0, "sft:\n  lr: 1\n")));
  const std::vector<RunGroup> groups = group_runs_by_preset(runs);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].preset, "grpo-fp8-e2e-kv");  // in the order given
  ASSERT_EQ(groups[0].runs.size(), 2u);
  EXPECT_EQ(groups[0].runs[1]->name, "kv-seed2");
  EXPECT_TRUE(groups[0].differing_keys.empty());  // seeds and log directories may differ
  EXPECT_EQ(groups[1].differing_keys, (std::vector<std::string>{"sft.lr"}));

  const GroupSummary s = summarize_group(groups[0]);
  EXPECT_EQ(s.num_runs, 2);
  EXPECT_EQ(s.precision, "fp8 / fp8 / bf16");
  // Final validation accuracy 0.6 + 0.005 * last step + 0.1 for runs of 20 and 10 steps.
  EXPECT_NEAR(s.final_val_accuracy.mean, (0.8 + 0.75) / 2, 1e-12);
  EXPECT_NEAR(s.final_val_accuracy.min, 0.75, 1e-12);
  EXPECT_NEAR(s.final_val_accuracy.max, 0.8, 1e-12);
  // s = 0.05 / sqrt(2), se = 0.025, t_{0.975,1} = 12.706.
  EXPECT_NEAR(s.final_val_accuracy.ci95, 12.706 * 0.025, 1e-12);
  EXPECT_EQ(s.final_val_accuracy_per_run.size(), 2u);
  EXPECT_NEAR(s.reward_first, 0.4 + 0.03 + 0.1, 1e-12);                       // steps 1..5 of both
  EXPECT_NEAR(s.reward_last, 0.4 + 0.1 + (0.01 * 18 + 0.01 * 8) / 2, 1e-12);  // steps 16..20 and 6..10
  EXPECT_NEAR(s.is_oob_ratio, 0.001, 1e-12);
  ASSERT_EQ(s.time_split.size(), 5u);  // the phases: not "optimizer" or "communication", parts of "training"
  EXPECT_EQ(s.time_split[0].first, "generation");
  EXPECT_NEAR(s.time_split[0].second, 0.12, 1e-12);
  EXPECT_EQ(s.time_split[4].first, "kv_calibration");
  EXPECT_NEAR(s.time_split[4].second, 0.006, 1e-12);
  EXPECT_NEAR(s.step_seconds, 0.278, 1e-12);
}

TEST(ReportHtml, IsSelfContainedWithTheSummaryChartsDataAndConfigs) {
  TempDir tmp;
  std::vector<RunMetrics> runs;
  runs.push_back(read_run_metrics(write_run(tmp, "bf16-seed1", "grpo-bf16", 1, 10, 0.0)));
  runs.push_back(read_run_metrics(write_run(tmp, "kv-seed1", "grpo-fp8-e2e-kv", 1, 10, 0.1)));
  if (uplot_js().empty()) {
    EXPECT_THAT(error_message([&] { render_report_html(runs); }), HasSubstr("run scripts/setup.sh, then rebuild"));
    GTEST_SKIP() << "built without uPlot (scripts/setup.sh installs it into third_party/uplot)";
  }
  const std::string html = render_report_html(runs);
  EXPECT_THAT(html, HasSubstr("<title>fp8rl report: grpo-bf16, grpo-fp8-e2e-kv (2 runs)</title>"));
  EXPECT_THAT(html, HasSubstr("Permission is hereby granted"));  // uPlot's MIT license
  EXPECT_THAT(html, HasSubstr("uPlot"));                         // the library, inline
  EXPECT_THAT(html, HasSubstr("id=\"report-data\""));            // the data, inline
  EXPECT_THAT(html, HasSubstr("<th>kv_calibration<br>s (share)</th>"));
  EXPECT_THAT(html, HasSubstr("0.650 &plusmn; &ndash; (0.650..0.650)"));  // bf16's final val accuracy (one run)
  EXPECT_THAT(html, HasSubstr("<td>-0.100</td><td>&ndash; (fewer than two runs)</td>"));  // bf16 - kv
  EXPECT_THAT(html, HasSubstr("<details><summary><b>kv-seed1</b>"));
  EXPECT_THAT(html, HasSubstr("name: &quot;grpo-fp8-e2e-kv&quot;"));  // the config, escaped
  // Nothing is fetched when the page is viewed.
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_THAT(error_message([] { render_report_html({}); }), HasSubstr("no run directories"));
}

// The integer value of the first `name="..."` attribute in the tag that starts at `tag`, or -1.
int attribute(const std::string& html, size_t tag, const std::string& name) {
  const size_t end = html.find('>', tag);
  const size_t at = html.find(name + "=\"", tag);
  if (at == std::string::npos || at > end) return -1;
  return std::atoi(html.c_str() + at + name.size() + 2);
}

// The first of `names` found on PATH, or "".
std::string find_program(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (std::system(("command -v " + name + " > /dev/null 2>&1").c_str()) == 0) return name;
  }
  return "";
}

// Renders the report of three short runs (two presets) in headless Chromium and checks that every
// chart drew data: the page records, per chart, the values plotted and the coloured pixels read
// back from its canvas (report_page.js). Also takes a screenshot.
// ctest-label: browser
TEST(ReportHtml, EveryChartDrawsDataInHeadlessChromium) {
  const std::string chromium = find_program({"chromium", "chromium-browser", "google-chrome"});
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (scripts/setup.sh installs the Debian package)";
  if (uplot_js().empty()) GTEST_SKIP() << "built without uPlot (scripts/setup.sh installs it into third_party/uplot)";
  const auto start = std::chrono::steady_clock::now();
  TempDir tmp;
  std::vector<RunMetrics> runs;
  runs.push_back(read_run_metrics(write_run(tmp, "bf16-seed1", "grpo-bf16", 1, 30, 0.0)));
  runs.push_back(read_run_metrics(write_run(tmp, "bf16-seed2", "grpo-bf16", 2, 30, 0.02)));
  runs.push_back(read_run_metrics(write_run(tmp, "kv-seed1", "grpo-fp8-e2e-kv", 1, 30, 0.1)));
  tmp.write("report.html", render_report_html(runs));

  const std::string browser = chromium + " --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                              (tmp / "profile").string() + " --window-size=1300,2600 --virtual-time-budget=5000 ";
  const std::string url = "file://" + (tmp / "report.html").string();
  ASSERT_EQ(std::system((browser + "--dump-dom " + url + " > " + (tmp / "dom.html").string() + " 2> " +
                         (tmp / "chromium.log").string())
                            .c_str()),
            0)
      << read_file_bytes(tmp / "chromium.log");
  const std::string dom = read_file_bytes(tmp / "dom.html");

  // 7 line charts, mismatch by response length, and one step-time chart per preset.
  const int expected = 7 + 1 + 2;
  const size_t body = dom.find("<body");
  ASSERT_NE(attribute(dom, body, "data-charts-total"), -1) << "the page's script did not run: " << dom.substr(0, 2000);
  EXPECT_EQ(attribute(dom, body, "data-charts-total"), expected);
  EXPECT_EQ(attribute(dom, body, "data-charts-drawn"), expected);
  int charts = 0;
  for (size_t at = dom.find("<div class=\"chart"); at != std::string::npos;
       at = dom.find("<div class=\"chart", at + 1)) {
    const size_t title = dom.find("<h3", at);
    const std::string name = dom.substr(dom.find('>', title) + 1, dom.find("</h3>", title) - dom.find('>', title) - 1);
    EXPECT_GT(attribute(dom, at, "data-points"), 0) << name;
    EXPECT_GT(attribute(dom, at, "data-ink"), 50) << name << ": too few coloured pixels in the plot area";
    ++charts;
  }
  EXPECT_EQ(charts, expected);

  ASSERT_EQ(std::system((browser + "--screenshot=" + (tmp / "report.png").string() + " " + url + " > " +
                         (tmp / "chromium.log").string() + " 2>&1")
                            .c_str()),
            0)
      << read_file_bytes(tmp / "chromium.log");
  const std::string png = read_file_bytes(tmp / "report.png");
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_GT(png.size(), 30000u) << "a screenshot of the drawn report is larger than a blank page";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60) << "the Chromium check should take well under 20 s";
  std::printf("chromium check: %.1f s\n", seconds);
}

}  // namespace
}  // namespace fp8rl::report
