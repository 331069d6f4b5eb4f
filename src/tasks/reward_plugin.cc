#include "tasks/reward_plugin.h"

#include <cmath>

#include "core/check.h"

namespace fp8rl {

namespace {

constexpr size_t kMaxMetrics = 64;

class PluginReward final : public RewardFunction {
 public:
  explicit PluginReward(const WorkerPoolOptions& options) : pool_(options) {}

  std::vector<RewardResult> score(const std::vector<RewardRequest>& requests) override {
    std::vector<nlohmann::json> lines;
    lines.reserve(requests.size());
    for (const RewardRequest& r : requests)
      lines.push_back({{"id", r.id}, {"prompt", r.example->prompt}, {"response", r.response}, {"data", example_data(*r.example)}});
    std::vector<RewardResult> out;
    out.reserve(requests.size());
    for (const WorkerReply& reply : pool_.call(lines)) out.push_back(parse_reward_reply(pool_, reply));
    return out;
  }

 private:
  WorkerPool pool_;
};

}  // namespace

RewardResult parse_reward_reply(WorkerPool& pool, const WorkerReply& reply) {
  if (reply.timed_out) return {0.0, {}, true};
  const nlohmann::json& j = reply.body;
  const auto finite = [](const nlohmann::json& v) { return v.is_number() && std::isfinite(v.get<double>()); };
  if (!j.contains("reward") || !finite(j["reward"]))
    pool.fail(reply.worker, reply.id,
              fmt::format("the reply's \"reward\" must be a finite number, got {}",
                          j.contains("reward") ? j["reward"].dump() : "no \"reward\" field"));
  RewardResult r{j["reward"].get<double>(), {}, false};
  if (j.contains("metrics")) {
    const nlohmann::json& m = j["metrics"];
    if (!m.is_object())
      pool.fail(reply.worker, reply.id, fmt::format("the reply's \"metrics\" must be an object, got {}", m.dump().substr(0, 120)));
    if (m.size() > kMaxMetrics)
      pool.fail(reply.worker, reply.id, fmt::format("the reply has {} metrics, more than {}", m.size(), kMaxMetrics));
    for (const auto& [name, value] : m.items()) {
      if (name.empty() || !finite(value))
        pool.fail(reply.worker, reply.id,
                  fmt::format("metric \"{}\" must have a non-empty name and a finite number, got {}", name, value.dump()));
      r.metrics.emplace_back(name, value.get<double>());
    }
  }
  return r;
}

std::unique_ptr<RewardFunction> make_plugin_reward(const WorkerPoolOptions& options) {
  return std::make_unique<PluginReward>(options);
}

}  // namespace fp8rl
