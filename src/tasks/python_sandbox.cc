#include "tasks/python_sandbox.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/check.h"
#include "io/json_depth.h"

namespace fp8rl {

namespace {

// Runs /code/solution.py, then each call of /code/calls.json; one JSON line per call on the
// results' channel (the original stdout), the repr of its value or null. The solution's prints,
// and its errors, go to stderr.
constexpr const char* kHarness = R"PY(import json, os, sys
calls = json.load(open('/code/calls.json'))
results = os.fdopen(os.dup(1), 'w')
os.dup2(2, 1)
sys.stdout = sys.stderr
namespace = {'__name__': 'solution'}
try:
    exec(compile(open('/code/solution.py').read(), 'solution.py', 'exec'), namespace)
    loaded = True
except BaseException as e:
    loaded = False
    print('the code raised %s: %s' % (type(e).__name__, e))
for call in calls:
    value = None
    if loaded:
        try:
            value = repr(eval(call, namespace))
        except BaseException as e:
            print('%s raised %s: %s' % (call, type(e).__name__, e))
    results.write(json.dumps(value) + '\n')
    results.flush()
)PY";

constexpr size_t kMaxObservationBytes = 2000;

std::string cut(const std::string& s, size_t n) { return s.size() > n ? s.substr(0, n) + "..." : s; }

class PythonTestsReward final : public RewardFunction {
 public:
  PythonTestsReward(const SandboxLimits& limits, int64_t parallel) : sandbox_(Sandbox::open(limits)), parallel_(parallel) {}

  std::vector<RewardResult> score(const std::vector<RewardRequest>& requests) override {
    Sandbox::Pool pool(sandbox_, parallel_);
    std::vector<std::vector<std::string>> expected(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const nlohmann::json data = example_data(*requests[i].example);
      const nlohmann::json& tests = data.contains("tests") ? data["tests"] : nlohmann::json();
      bool ok = tests.is_array() && !tests.empty();
      nlohmann::json calls = nlohmann::json::array();
      for (size_t t = 0; ok && t < tests.size(); ++t) {
        const nlohmann::json& x = tests[t];
        ok = x.is_object() && x.contains("call") && x["call"].is_string() && x.contains("expected") && x["expected"].is_string();
        if (!ok) break;
        calls.push_back(x["call"]);
        expected[i].push_back(x["expected"].get<std::string>());
      }
      FP8RL_REQUIRE(ok,
                    "task.reward.builtin: python_tests: the example of request '{}' needs \"tests\": a non-empty list of "
                    "{{\"call\": \"f(2)\", \"expected\": \"5\"}} (the repr of the value), got {}",
                    requests[i].id, tests.dump().substr(0, 200));
      pool.submit(static_cast<int64_t>(i), {{{"harness.py", kHarness},
                                             {"solution.py", python_code_of(requests[i].response)},
                                             {"calls.json", calls.dump()}},
                                            {"python3", "-I", "/code/harness.py"},
                                            ""});
    }
    std::vector<RewardResult> out(requests.size());
    while (pool.outstanding() > 0)
      for (auto& [i, result] : pool.poll(/*wait=*/true)) out[static_cast<size_t>(i)] = judge(result, expected[static_cast<size_t>(i)]);
    return out;
  }

 private:
  static RewardResult judge(const SandboxResult& r, const std::vector<std::string>& expected) {
    size_t passed = 0, lines = 0;
    size_t begin = 0;
    for (size_t nl; lines < expected.size() && (nl = r.out.find('\n', begin)) != std::string::npos; begin = nl + 1, ++lines) {
      const std::string_view line(r.out.data() + begin, nl - begin);
      const nlohmann::json v = json_nesting_depth(line) > kMaxJsonDepth ? nlohmann::json() : nlohmann::json::parse(line, nullptr, false);
      passed += v.is_string() && v.get<std::string>() == expected[lines];
    }
    const double fraction = static_cast<double>(passed) / static_cast<double>(expected.size());
    return {fraction,
            {{"tests_passed", fraction},
             {"all_passed", passed == expected.size() ? 1.0 : 0.0},
             {"timed_out", r.timed_out ? 1.0 : 0.0},
             {"crashed", lines == 0 ? 1.0 : 0.0}},
            false};
  }

  Sandbox sandbox_;
  int64_t parallel_;
};

class PythonToolEnvironment final : public Environment {
 public:
  PythonToolEnvironment(const SandboxLimits& limits, int64_t parallel) : sandbox_(Sandbox::open(limits)), pool_(sandbox_, parallel) {}

  void submit(const std::string& id, int64_t, int64_t, const Example&, const std::string& transcript) override {
    static constexpr std::string_view kOpen = "<python>", kClose = "</python>";
    const size_t close = transcript.rfind(kClose);
    const size_t open = close == std::string::npos ? std::string::npos : transcript.rfind(kOpen, close);
    if (close == std::string::npos || close + kClose.size() != transcript.size() || open == std::string::npos) {
      ready_.push_back({id, true, std::nullopt, ""});  // no program at the end of the turn: the sample ends
      return;
    }
    const std::string code = transcript.substr(open + kOpen.size(), close - open - kOpen.size());
    ids_.push_back(id);
    pool_.submit(static_cast<int64_t>(ids_.size() - 1), {{{"main.py", code}}, {"python3", "-I", "/code/main.py"}, ""});
  }

  std::vector<EnvironmentReply> poll(bool wait) override {
    std::vector<EnvironmentReply> out = std::move(ready_);
    ready_.clear();
    for (auto& [tag, r] : pool_.poll(wait && out.empty())) {
      std::string text = r.out;
      if (!r.ok()) text += fmt::format("\n[{}] {}", r.describe(), r.err.size() > 500 ? "..." + r.err.substr(r.err.size() - 500) : r.err);
      out.push_back({ids_[static_cast<size_t>(tag)], false, std::nullopt, cut(text, kMaxObservationBytes)});
    }
    return out;
  }

  void reject(const std::string& id, const std::string& what) override {
    throw Error(fmt::format("the python tool's answer to '{}': {}", id, what));
  }

 private:
  Sandbox sandbox_;
  Sandbox::Pool pool_;
  std::vector<EnvironmentReply> ready_;
  std::vector<std::string> ids_;  // tag -> request id
};

}  // namespace

std::string python_code_of(std::string_view response) {
  // The last fenced block: ```python\n...``` or ```\n...```.
  const size_t close = response.rfind("```");
  if (close != std::string_view::npos && close > 0) {
    const size_t open = response.rfind("```", close - 1);
    if (open != std::string_view::npos && open + 3 <= close) {
      std::string_view block = response.substr(open + 3, close - open - 3);
      const size_t nl = block.find('\n');
      if (nl != std::string_view::npos && block.substr(0, nl).find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+- ") == std::string_view::npos)
        block.remove_prefix(nl + 1);  // the language tag
      return std::string(block);
    }
  }
  return std::string(response);
}

std::unique_ptr<RewardFunction> make_python_tests_reward(const SandboxLimits& limits, int64_t parallel) {
  return std::make_unique<PythonTestsReward>(limits, parallel);
}

std::unique_ptr<Environment> make_python_tool_environment(const SandboxLimits& limits, int64_t parallel) {
  return std::make_unique<PythonToolEnvironment>(limits, parallel);
}

}  // namespace fp8rl
