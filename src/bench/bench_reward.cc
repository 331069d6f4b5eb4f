// `fp8rl bench reward`: what bringing your own reward costs. GRPO steps of 256 samples (the
// `small` preset on 2-digit addition, 32 prompts x 8 samples) scored by the built-in verifier and
// by a trivial Python reward plug-in with 4 workers, in alternating runs of this binary; the
// figure is the median step time over the steps between the first and the last of each run (the
// first warms up, the last validates), with the reward phase's own time (timing.reward). Then
// one sandboxed Python program's wall time (bwrap + interpreter start), one and two at a time.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bench/bench_suites.h"
#include "core/check.h"
#include "core/memory.h"
#include "core/timer.h"
#include "tasks/sandbox.h"

namespace fp8rl::bench {

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 10;
constexpr int kWorkers = 4;
constexpr double kLimitRatio = 1.05;  // the plug-in's step may be at most 5 % slower

constexpr const char* kRecipe = R"(# fp8rl bench reward: 256 samples per step
model:
  preset: small
  seed: 1
  max_seq_len: 32
task:
  name: arithmetic
  arithmetic: {min_operand_digits: 2, max_operand_digits: 2, operators: "+", train_size: 2000, val_size: 32}
policy:
  precision: fp8
  train_global_batch_size: 256
  train_micro_batch_size: 64
grpo:
  num_prompts_per_step: 32
  num_generations_per_prompt: 8
  val_period: 0
generation:
  precision: fp8
  max_new_tokens: 6
eval:
  max_examples: 32
)";

constexpr const char* kTrivialReward = R"(import json, sys
for line in sys.stdin:
    r = json.loads(line)
    sys.stdout.write(json.dumps({"id": r["id"], "reward": float(r["response"].strip() == r["data"]["answer"])}) + "\n")
    sys.stdout.flush()
)";

struct RunTimes {
  std::vector<double> steps, rewards;  // per measured step
};

// One `fp8rl train` of kSteps steps; the step and reward times of steps 2 .. kSteps-1.
RunTimes run_training(const fs::path& dir, const std::string& name, const std::string& extra) {
  const fs::path log_dir = dir / name;
  fs::remove_all(log_dir);
  const std::string cmd = fmt::format("'{}' train '{}' grpo.max_num_steps={} logger.log_dir='{}' {} > /dev/null",
                                      self_executable(), (dir / "recipe.yaml").string(), kSteps, log_dir.string(), extra);
  FP8RL_REQUIRE(std::system(cmd.c_str()) == 0, "bench reward: `{}` failed", cmd);
  RunTimes t;
  std::ifstream in(log_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const int64_t step = j["step"].get<int64_t>();
    if (step == 1 || step == kSteps) continue;
    t.steps.push_back(j["timing"]["total"].get<double>());
    t.rewards.push_back(j["timing"]["reward"].get<double>());
  }
  return t;
}

}  // namespace

void run_reward_bench(const BenchOptions& options) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("fp8rl-bench-reward-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.yaml") << kRecipe;
  std::ofstream(dir / "reward.py") << kTrivialReward;
  const std::string plugin =
      fmt::format("'task.reward.command=[python3, {}]' task.reward.workers={}", (dir / "reward.py").string(), kWorkers);
  // Alternating runs: a slow minute of the host falls on both.
  RunTimes builtin, plug;
  for (int r = 0; r < options.repeats; ++r) {
    for (auto [times, name, extra] : {std::tuple{&builtin, "builtin", std::string()}, {&plug, "plugin", plugin}}) {
      const RunTimes t = run_training(dir, name, extra);
      times->steps.insert(times->steps.end(), t.steps.begin(), t.steps.end());
      times->rewards.insert(times->rewards.end(), t.rewards.begin(), t.rewards.end());
    }
  }
  const double base = median(builtin.steps);
  emit({{"suite", "reward"},
        {"case", "builtin_verifier"},
        {"samples_per_step", 256},
        {"seconds", base},
        {"reward_seconds", median(builtin.rewards)},
        {"steps_measured", builtin.steps.size()},
        {"threads", kernel_threads()}},
       options);
  const double with_plugin = median(plug.steps);
  emit({{"suite", "reward"},
        {"case", fmt::format("python_plugin_{}_workers", kWorkers)},
        {"samples_per_step", 256},
        {"seconds", with_plugin},
        {"reward_seconds", median(plug.rewards)},
        {"steps_measured", plug.steps.size()},
        {"peer", "builtin_verifier"},
        {"peer_seconds", base},
        {"ratio", with_plugin / base},
        {"limit_ratio", kLimitRatio},
        {"threads", kernel_threads()}},
       options);
  fs::remove_all(dir);

  // One sandboxed Python program (python_tests scores each sample with one).
  std::optional<Sandbox> sandbox;
  try {
    sandbox.emplace(Sandbox::open({}));
  } catch (const Error& e) {
    fmt::print(stderr, "bench reward: skipping the sandbox cases: {}\n", e.what());
    return;
  }
  for (int parallel : {1, 2}) {
    const int runs = 20 * parallel;
    const double seconds = time_median(
        [&] {
          Sandbox::Pool pool(*sandbox, parallel);
          for (int i = 0; i < runs; ++i) pool.submit(i, {{{"main.py", "print(6 * 7)"}}, {"python3", "-I", "/code/main.py"}, ""});
          while (pool.outstanding() > 0) pool.poll(/*wait=*/true);
        },
        std::max(1, options.repeats / 2));
    emit({{"suite", "reward"},
          {"case", fmt::format("sandboxed_python_{}_at_once", parallel)},
          {"seconds", seconds / runs},
          {"runs_per_second", runs / seconds},
          {"threads", parallel}},
         options);
  }
}

}  // namespace fp8rl::bench
