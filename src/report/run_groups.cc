#include "report/run_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "report/intervals.h"

namespace fp8rl::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The mean of the finite values in [first, last); NaN if there are none.
template <typename It>
double finite_mean(It first, It last) {
  double sum = 0;
  int64_t n = 0;
  for (It it = first; it != last; ++it) {
    if (std::isfinite(*it)) {
      sum += *it;
      ++n;
    }
  }
  return n > 0 ? sum / static_cast<double>(n) : kNaN;
}

double finite_mean(const std::vector<double>& v) { return finite_mean(v.begin(), v.end()); }

// The mean over steps of `metric` in `run` (NaN if absent); `head` > 0 takes the first `head`
// steps only, `head` < 0 the last -`head`.
double run_mean(const RunMetrics& run, const std::string& metric, int64_t head = 0) {
  const std::vector<double>* v = run.find(metric);
  if (v == nullptr) return kNaN;
  const int64_t n = static_cast<int64_t>(v->size());
  const int64_t k = std::min<int64_t>(head < 0 ? -head : head, n);
  if (head > 0) return finite_mean(v->begin(), v->begin() + k);
  if (head < 0) return finite_mean(v->end() - k, v->end());
  return finite_mean(*v);
}

double last_finite(const RunMetrics& run, const std::string& metric) {
  const std::vector<double>* v = run.find(metric);
  if (v == nullptr) return kNaN;
  const auto it = std::find_if(v->rbegin(), v->rend(), [](double x) { return std::isfinite(x); });
  return it == v->rend() ? kNaN : *it;
}

Spread spread(const std::vector<double>& per_run) {
  Spread s{finite_mean(per_run), mean_interval(per_run).half_width, kNaN, kNaN};
  for (double x : per_run) {
    if (!std::isfinite(x)) continue;
    s.min = std::isfinite(s.min) ? std::min(s.min, x) : x;
    s.max = std::isfinite(s.max) ? std::max(s.max, x) : x;
  }
  return s;
}

// Keys that may differ between the seeds of one preset.
bool is_per_seed_key(const std::string& key) {
  return key == "logger.log_dir" || key == "seed" || key.ends_with(".seed");
}

std::vector<std::string> keys_that_differ(const std::vector<const RunMetrics*>& runs) {
  std::map<std::string, std::pair<std::set<std::string>, size_t>> seen;  // key -> (values, runs having it)
  for (const RunMetrics* run : runs) {
    if (run->config.empty()) return {};  // nothing to compare
    for (const auto& [key, value] : run->config) {
      seen[key].first.insert(value);
      ++seen[key].second;
    }
  }
  std::vector<std::string> out;
  for (const auto& [key, values] : seen) {
    if ((values.first.size() > 1 || values.second < runs.size()) && !is_per_seed_key(key)) out.push_back(key);
  }
  return out;
}

}  // namespace

std::string run_preset(const RunMetrics& run) {
  const std::string name = run.config_value("run.name");
  if (!name.empty()) return name;
  // The directory name less a "-seed<digits>" suffix.
  const size_t at = run.name.rfind("-seed");
  const bool seed_suffix = at != std::string::npos && at + 5 < run.name.size() &&
                           std::all_of(run.name.begin() + static_cast<std::ptrdiff_t>(at) + 5, run.name.end(),
                                       [](char c) { return c >= '0' && c <= '9'; });
  return seed_suffix ? run.name.substr(0, at) : run.name;
}

std::vector<RunGroup> group_runs_by_preset(const std::vector<RunMetrics>& runs) {
  std::vector<RunGroup> groups;
  for (const RunMetrics& run : runs) {
    const std::string preset = run_preset(run);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const RunGroup& g) { return g.preset == preset; });
    if (it == groups.end()) it = groups.insert(groups.end(), RunGroup{preset, {}, {}});
    it->runs.push_back(&run);
  }
  for (RunGroup& g : groups) g.differing_keys = keys_that_differ(g.runs);
  return groups;
}

std::vector<std::string> timing_keys(const std::vector<const RunMetrics*>& runs) {
  std::vector<std::string> keys;
  for (const RunMetrics* run : runs) {
    for (const std::string& metric : run->metric_order) {
      if (!metric.starts_with("timing.") || metric == "timing.total") continue;
      const std::string key = metric.substr(7);
      if (key == "optimizer" || key == "communication") continue;  // parts of "training"; stacked, counted twice
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  return keys;
}

GroupSummary summarize_group(const RunGroup& group) {
  GroupSummary s;
  s.preset = group.preset;
  s.num_runs = static_cast<int>(group.runs.size());
  const RunMetrics& first = *group.runs.front();
  if (!first.config.empty()) {
    s.precision = fmt::format("{} / {} / {}", first.config_value("policy.precision", "?"),
                              first.config_value("generation.precision", "?"),
                              first.config_value("generation.kv_cache_dtype", "?"));
  }
  // The mean over runs of a per-run figure.
  const auto over_runs = [&](auto per_run) {
    std::vector<double> v;
    for (const RunMetrics* run : group.runs) v.push_back(per_run(*run));
    return v;
  };
  s.final_val_accuracy_per_run = over_runs([](const RunMetrics& r) { return last_finite(r, "val_accuracy"); });
  s.final_val_accuracy = spread(s.final_val_accuracy_per_run);
  s.reward_first = finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "reward_mean", 5); }));
  s.reward_last = finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "reward_mean", -5); }));
  s.token_mult_prob_error =
      finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "token_mult_prob_error"); }));
  s.gen_kl_error = finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "gen_kl_error"); }));
  s.is_oob_ratio = finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "is_oob_ratio"); }));
  double parts = 0;
  for (const std::string& key : timing_keys(group.runs)) {
    const double t = finite_mean(over_runs([&](const RunMetrics& r) { return run_mean(r, "timing." + key); }));
    s.time_split.emplace_back(key, t);
    if (std::isfinite(t)) parts += t;
  }
  s.step_seconds = finite_mean(over_runs([](const RunMetrics& r) { return run_mean(r, "timing.total"); }));
  if (!std::isfinite(s.step_seconds) && !s.time_split.empty()) s.step_seconds = parts;
  return s;
}

std::vector<AccuracyDifference> final_accuracy_differences(const std::vector<GroupSummary>& summaries) {
  std::vector<AccuracyDifference> out;
  for (size_t i = 0; i < summaries.size(); ++i) {
    for (size_t j = i + 1; j < summaries.size(); ++j) {
      const Interval d =
          welch_difference(summaries[i].final_val_accuracy_per_run, summaries[j].final_val_accuracy_per_run);
      out.push_back({summaries[i].preset, summaries[j].preset, d.value, d.half_width});
    }
  }
  return out;
}

}  // namespace fp8rl::report
