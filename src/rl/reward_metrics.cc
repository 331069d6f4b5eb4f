#include "rl/reward_metrics.h"

#include <map>
#include <string>

namespace fp8rl {

RewardMetrics gather_reward_metrics(const dist::Communicator& comm, const std::vector<RewardResult>& mine) {
  // Each rank's results as JSON ([timed out, {name: value}] per response); doubles round-trip.
  nlohmann::json local = nlohmann::json::array();
  for (const RewardResult& r : mine) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [name, value] : r.metrics) m[name] = value;
    local.push_back({r.timed_out, std::move(m)});
  }
  std::vector<nlohmann::json> ranks;
  if (comm.size() == 1) {
    ranks.push_back(std::move(local));
  } else {
    const std::string text = local.dump();
    for (const std::vector<std::byte>& bytes : comm.allgather(std::as_bytes(std::span(text))))
      ranks.push_back(nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  }
  std::map<std::string, std::pair<double, int64_t>> sums;  // name -> (sum, responses)
  RewardMetrics out;
  for (const nlohmann::json& rank : ranks)
    for (const nlohmann::json& r : rank) {
      out.timeouts += r[0].get<bool>();
      for (const auto& [name, value] : r[1].items()) {
        auto& [sum, n] = sums[name];
        sum += value.get<double>();
        ++n;
      }
    }
  for (const auto& [name, s] : sums) out.means[name] = s.first / static_cast<double>(s.second);
  return out;
}

}  // namespace fp8rl
