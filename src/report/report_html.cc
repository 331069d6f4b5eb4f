#include "report/report_html.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/check.h"
#include "report/report_assets.h"
#include "report/run_groups.h"

namespace fp8rl::report {

namespace {

// The line charts, in page order: the metric of metrics.jsonl and the chart's title.
struct LineChart {
  const char* metric;
  const char* title;
};
constexpr std::array<LineChart, 7> kLineCharts{{
    {"val_accuracy", "Validation accuracy (greedy, held-out prompts)"},
    {"reward_mean", "Reward (mean over the step's rollouts)"},
    {"token_mult_prob_error", "token_mult_prob_error (1 = generator and trainer agree)"},
    {"gen_kl_error", "gen_kl_error (KL(generator || trainer), k3 estimate on sampled tokens)"},
    {"is_oob_ratio", "is_oob_ratio (importance weights outside the truncation bounds)"},
    {"grad_norm", "Gradient norm"},
    {"response_length_mean", "Response length (mean tokens)"},
}};

// Preset colours (Tableau 10, every one saturated enough for the page's drawn-pixel check), and the
// colours of the stacked timing keys.
constexpr std::array<const char*, 10> kPresetColors{"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                                    "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#17becf"};
constexpr std::array<const char*, 8> kTimingColors{"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                                   "#b07aa1", "#edc948", "#76b7b2", "#9c755f"};

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// `text` made safe inside <script>: "</" cannot end the element early ("<\/" means the same in
// JSON strings and JavaScript string literals).
std::string escape_script(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

// A number for the table, or an en dash where there is none.
std::string number(double v, int decimals) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : "&ndash;";
}
std::string number_g(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : "&ndash;"; }

nlohmann::json values_json(const std::vector<double>& v) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : v) out.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
  return out;
}

// token_mult_prob_error by response length: the length bins any run has (metrics.jsonl's
// token_mult_prob_error_by_length.<bin>, e.g. "17-32", ordered by their first length) and, per
// preset, the mean over its runs and steps of each bin's value (null where none has it).
nlohmann::json mismatch_by_length(const std::vector<RunGroup>& groups) {
  const std::string prefix = "token_mult_prob_error_by_length.";
  std::map<int64_t, std::string> by_start;
  for (const RunGroup& g : groups)
    for (const RunMetrics* run : g.runs)
      for (const std::string& metric : run->metric_order)
        if (metric.starts_with(prefix)) {
          const std::string bin = metric.substr(prefix.size());
          by_start.emplace(std::atoll(bin.c_str()), bin);
        }
  std::vector<std::string> bins;
  for (const auto& [start, bin] : by_start) bins.push_back(bin);
  nlohmann::json out = {{"bins", bins}, {"groups", nlohmann::json::array()}};
  for (const RunGroup& g : groups) {
    nlohmann::json values = nlohmann::json::array();
    for (const std::string& bin : bins) {
      double sum = 0;
      int64_t n = 0;
      for (const RunMetrics* run : g.runs)
        if (const auto* v = run->find(prefix + bin))
          for (double x : *v)
            if (std::isfinite(x)) sum += x, ++n;
      values.push_back(n > 0 ? nlohmann::json(sum / static_cast<double>(n)) : nlohmann::json(nullptr));
    }
    out["groups"].push_back(std::move(values));
  }
  return out;
}

// The line charts of these runs: the fixed ones, then what a task brings where any run has it:
// a reward plug-in's metrics (reward_metrics.NAME) and timeouts, a multi-turn environment's turns
// and observation tokens.
std::vector<std::pair<std::string, std::string>> line_charts(const std::vector<RunGroup>& groups) {
  std::vector<std::pair<std::string, std::string>> charts;
  for (const LineChart& chart : kLineCharts) charts.emplace_back(chart.metric, chart.title);
  std::vector<std::string> found;
  for (const RunGroup& g : groups)
    for (const RunMetrics* run : g.runs)
      for (const std::string& metric : run->metric_order)
        if ((metric.starts_with("reward_metrics.") || metric == "reward_timeouts" || metric == "env_turns_mean" ||
             metric == "observation_tokens_mean") &&
            std::find(found.begin(), found.end(), metric) == found.end())
          found.push_back(metric);
  for (const std::string& metric : found) {
    std::string title = metric;
    if (metric.starts_with("reward_metrics.")) title = fmt::format("{} (the reward plug-in's metric, mean over the step)", metric);
    if (metric == "reward_timeouts") title = "reward_timeouts (plug-in replies too late, scored 0)";
    if (metric == "env_turns_mean") title = "env_turns_mean (environment turns per sample)";
    if (metric == "observation_tokens_mean") title = "observation_tokens_mean (environment tokens per sample)";
    charts.emplace_back(metric, title);
  }
  return charts;
}

// The data the page's script draws (its shape is documented in report_page.js).
nlohmann::json page_data(const std::vector<RunGroup>& groups, const std::vector<std::string>& time_keys) {
  const std::vector<std::pair<std::string, std::string>> charts = line_charts(groups);
  nlohmann::json data;
  data["groups"] = nlohmann::json::array();
  for (size_t g = 0; g < groups.size(); ++g) {
    nlohmann::json runs = nlohmann::json::array();
    for (const RunMetrics* run : groups[g].runs) {
      nlohmann::json metrics = nlohmann::json::object();
      for (const auto& [metric, title] : charts)
        if (const auto* v = run->find(metric)) metrics[metric] = values_json(*v);
      for (const std::string& key : time_keys) {
        if (const auto* v = run->find("timing." + key)) metrics["timing." + key] = values_json(*v);
      }
      runs.push_back({{"name", run->name}, {"steps", run->steps}, {"metrics", std::move(metrics)}});
    }
    data["groups"].push_back(
        {{"preset", groups[g].preset}, {"color", kPresetColors[g % kPresetColors.size()]}, {"runs", std::move(runs)}});
  }
  data["charts"] = nlohmann::json::array();
  for (const auto& [metric, title] : charts) data["charts"].push_back({{"metric", metric}, {"title", title}});
  data["by_length"] = mismatch_by_length(groups);
  data["timing"] = {{"keys", time_keys}, {"colors", nlohmann::json::array()}};
  for (size_t k = 0; k < time_keys.size(); ++k)
    data["timing"]["colors"].push_back(kTimingColors[k % kTimingColors.size()]);
  return data;
}

std::string swatch(const char* color) {
  return fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", color);
}

std::string summary_table(const std::vector<RunGroup>& groups, const std::vector<GroupSummary>& summaries) {
  std::string html =
      "<div class=\"table\"><table class=\"summary\">\n<tr><th>preset</th><th>runs</th><th>precision<br>policy / gen. "
      "/ KV</th><th>final val "
      "accuracy<br>mean &plusmn; 95 % interval (min..max)</th><th>reward<br>first 5 &rarr; last 5 "
      "steps</th><th>mean<br>token_mult_prob_error"
      "</th><th>mean<br>gen_kl_error</th><th>mean<br>is_oob_ratio</th><th>mean<br>step s</th></tr>\n";
  for (size_t g = 0; g < summaries.size(); ++g) {
    const GroupSummary& s = summaries[g];
    const Spread& val = s.final_val_accuracy;
    html += fmt::format(
        "<tr><td class=\"preset\">{}{}</td><td>{}</td><td>{}</td><td>{} &plusmn; {} ({}..{})</td><td>{} &rarr; {}</td>"
        "<td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
        swatch(kPresetColors[g % kPresetColors.size()]), escape_html(s.preset), s.num_runs, escape_html(s.precision),
        number(val.mean, 3), number(val.ci95, 3), number(val.min, 3), number(val.max, 3), number(s.reward_first, 3),
        number(s.reward_last, 3), number(s.token_mult_prob_error, 5), number_g(s.gen_kl_error),
        number(s.is_oob_ratio, 4), number(s.step_seconds, 3));
  }
  html += "</table></div>\n";
  for (const RunGroup& g : groups) {
    if (g.differing_keys.empty()) continue;
    std::string keys;
    for (const std::string& k : g.differing_keys) keys += (keys.empty() ? "" : ", ") + escape_html(k);
    html += fmt::format("<p class=\"note\">The runs of {} differ in {}: they are not seeds of one configuration.</p>\n",
                        escape_html(g.preset), keys);
  }
  return html;
}

// Each pair of presets' difference in final validation accuracy with its 95 % interval (Welch).
std::string difference_table(const std::vector<GroupSummary>& summaries) {
  const std::vector<AccuracyDifference> differences = final_accuracy_differences(summaries);
  if (differences.empty()) return "";
  std::string html =
      "<div class=\"table\"><table class=\"summary\">\n<tr><th>a</th><th>b</th><th>final val accuracy a &minus; b"
      "</th><th>95 % interval (Welch)</th></tr>\n";
  for (const AccuracyDifference& d : differences) {
    html += fmt::format("<tr><td class=\"preset\">{}</td><td class=\"preset\">{}</td><td>{}</td><td>{}</td></tr>\n",
                        escape_html(d.a), escape_html(d.b), number(d.difference, 3),
                        std::isfinite(d.ci95) ? fmt::format("{} .. {}", number(d.difference - d.ci95, 3),
                                                            number(d.difference + d.ci95, 3))
                                              : std::string("&ndash; (fewer than two runs)"));
  }
  return html + "</table></div>\n";
}

// Mean seconds per step of each timing key and its share of the step, per preset.
std::string time_table(const std::vector<GroupSummary>& summaries, const std::vector<std::string>& time_keys) {
  std::string html = "<div class=\"table\"><table class=\"summary\">\n<tr><th>preset</th><th>step s</th>";
  for (const std::string& key : time_keys) html += fmt::format("<th>{}<br>s (share)</th>", escape_html(key));
  html += "</tr>\n";
  for (size_t g = 0; g < summaries.size(); ++g) {
    const GroupSummary& s = summaries[g];
    html +=
        fmt::format("<tr><td class=\"preset\">{}{}</td><td>{}</td>", swatch(kPresetColors[g % kPresetColors.size()]),
                    escape_html(s.preset), number(s.step_seconds, 3));
    for (const std::string& key : time_keys) {
      double t = NAN;
      for (const auto& [k, seconds] : s.time_split) {
        if (k == key) t = seconds;
      }
      html += fmt::format("<td>{} ({} %)</td>", number(t, 4), number(100 * t / s.step_seconds, 1));
    }
    html += "</tr>\n";
  }
  return html + "</table></div>\n";
}

std::string run_details(const std::vector<RunGroup>& groups) {
  std::string html;
  for (const RunGroup& g : groups) {
    for (const RunMetrics* run : g.runs) {
      const std::string seed = run->config_value("grpo.seed", run->config_value("sft.seed"));
      html +=
          fmt::format("<details><summary><b>{}</b> ({}): <code>{}</code>, {} steps ({}..{}){}{}</summary>\n",
                      escape_html(run->name), escape_html(g.preset), escape_html(run->dir.string()), run->steps.size(),
                      run->steps.front(), run->steps.back(), seed.empty() ? "" : ", seed " + escape_html(seed),
                      run->warnings.empty() ? "" : fmt::format(", {} warning(s)", run->warnings.size()));
      html += run->config_yaml.empty() ? "<p>no config.yaml</p>\n"
                                       : fmt::format("<pre>{}</pre>\n", escape_html(run->config_yaml));
      html += "</details>\n";
    }
  }
  return html;
}

std::string warning_list(const std::vector<RunMetrics>& runs) {
  std::string items;
  for (const RunMetrics& run : runs) {
    for (const std::string& w : run.warnings) items += fmt::format("<li><code>{}</code></li>\n", escape_html(w));
  }
  return items.empty() ? "" : "<h2>Warnings</h2>\n<ul class=\"warnings\">\n" + items + "</ul>\n";
}

std::string legend(const std::vector<RunGroup>& groups) {
  std::string html = "<div class=\"legend\">";
  for (size_t g = 0; g < groups.size(); ++g) {
    html += fmt::format("<span class=\"item\">{}{} ({} run{})</span>", swatch(kPresetColors[g % kPresetColors.size()]),
                        escape_html(groups[g].preset), groups[g].runs.size(), groups[g].runs.size() == 1 ? "" : "s");
  }
  return html +
         "<br>thin lines: single runs (seeds); thick lines: the mean of a preset's runs. Drag to zoom, "
         "double-click to reset.</div>\n";
}

std::string timing_legend(const std::vector<std::string>& time_keys) {
  std::string html = "<div class=\"legend\">";
  for (size_t k = 0; k < time_keys.size(); ++k) {
    html += fmt::format("<span class=\"item\">{}{}</span>", swatch(kTimingColors[k % kTimingColors.size()]),
                        escape_html(time_keys[k]));
  }
  return html + "</div>\n";
}

}  // namespace

std::string render_report_html(const std::vector<RunMetrics>& runs) {
  FP8RL_REQUIRE(!runs.empty(), "report: no run directories given");
  FP8RL_CHECK(!uplot_js().empty() && !uplot_css().empty(),
              "report: this fp8rl was built without uPlot (third_party/uplot/node_modules/uplot was missing): run "
              "scripts/setup.sh, then rebuild");
  FP8RL_CHECK(uplot_js().find("</script") == std::string_view::npos &&
                  page_js().find("</script") == std::string_view::npos &&
                  uplot_license().find("*/") == std::string_view::npos,
              "report: an embedded asset would end its <script> element or comment early");
  const std::vector<RunGroup> groups = group_runs_by_preset(runs);
  std::vector<const RunMetrics*> all;
  for (const RunMetrics& run : runs) all.push_back(&run);
  const std::vector<std::string> time_keys = timing_keys(all);
  std::vector<GroupSummary> summaries;
  for (const RunGroup& g : groups) summaries.push_back(summarize_group(g));

  std::string presets;
  for (const RunGroup& g : groups) presets += (presets.empty() ? "" : ", ") + g.preset;
  const std::string title =
      fmt::format("fp8rl report: {} ({} run{})", presets, runs.size(), runs.size() == 1 ? "" : "s");

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>{}</title>\n", escape_html(title));
  html += fmt::format("<style>\n{}\n</style>\n<style>\n{}</style>\n</head>\n<body>\n", uplot_css(), page_css());
  html += fmt::format("<h1>{}</h1>\n", escape_html(title));
  html +=
      "<p class=\"sub\">Made by <code>fp8rl report</code> from each run's metrics.jsonl and config.yaml; runs "
      "are grouped by <code>run.name</code>. Charts drawn with uPlot, all inline.</p>\n";
  html += warning_list(runs);
  html += "<h2>Summary</h2>\n" + summary_table(groups, summaries);
  if (summaries.size() > 1) html += "<h3>Differences in final validation accuracy</h3>\n" + difference_table(summaries);
  html += "<h2>Curves</h2>\n" + legend(groups) + "<div class=\"grid\" id=\"line-charts\"></div>\n";
  html += "<h2>Step time split</h2>\n" + time_table(summaries, time_keys) + timing_legend(time_keys) +
          "<div class=\"grid\" id=\"time-charts\"></div>\n";
  html += "<h2>Runs and their effective configuration</h2>\n" + run_details(groups);
  html += fmt::format(
      "<script id=\"report-data\" type=\"application/json\">{}</script>\n",
      escape_script(
          page_data(groups, time_keys).dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace)));
  html += fmt::format("<script>\n/* uPlot, embedded under its license:\n{}*/\n{}\n</script>\n", uplot_license(),
                      uplot_js());
  html += fmt::format("<script>\n{}</script>\n</body>\n</html>\n", page_js());
  return html;
}

}  // namespace fp8rl::report
