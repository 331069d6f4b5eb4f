// Plug-in worker processes: starting, the JSON Lines exchange, the errors that name the worker,
// timeouts, and that nothing a child starts outlives it. Workers here are small shell and Python
// programs; tests/cli/plugin_failures_test.sh runs the same through `fp8rl train`.
// ctest-file-label: quick
#include "tasks/worker_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "core/check.h"
#include "io/child_process.h"
#include "tasks/reward_plugin.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;
using testing::error_message;

// Running (a zombie nobody has reaped yet counts as gone).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

ChildSpec command(std::vector<std::string> argv, std::string role = "child process") {
  ChildSpec spec;
  spec.argv = std::move(argv);
  spec.role = std::move(role);
  return spec;
}

// A Python worker whose body handles one parsed request `r` (with `reply(obj)` to answer).
WorkerPoolOptions python_worker(const testing::TempDir& tmp, const std::string& body, int64_t workers = 1) {
  const std::string script = "import json, sys, time\n"
                             "def reply(o):\n"
                             "    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n"
                             "for line in sys.stdin:\n"
                             "    r = json.loads(line)\n" +
                             body;
  WorkerPoolOptions o;
  o.role = "test worker";
  o.config_key = "task.reward";
  o.command = {"python3", tmp.write("worker.py", script).string()};
  o.workers = workers;
  o.timeout_s = 5;
  return o;
}

TEST(ChildProcess, AProgramThatCannotStartIsAnErrorNamingIt) {
  EXPECT_THAT(error_message([] { ChildProcess::start(command({"no-such-program-fp8rl", "x"}, "reward worker 3")); }),
              HasSubstr("reward worker 3: cannot start `no-such-program-fp8rl x`: 'no-such-program-fp8rl' is not an "
                        "executable file on PATH"));
  const testing::TempDir tmp;
  const std::string not_executable = tmp.write("plain.txt", "hello").string();
  EXPECT_THAT(error_message([&] { ChildProcess::start(command({not_executable})); }),
              HasSubstr("is not an executable file"));
}

TEST(ChildProcess, TerminateEndsTheWholeProcessGroup) {
  // The child leaves a background process behind and ignores SIGTERM: both must go.
  ChildProcess c = ChildProcess::start(command({"sh", "-c", "trap '' TERM; sleep 100 & echo $!; wait"}));
  std::string out;
  for (int i = 0; i < 500 && out.find('\n') == std::string::npos; ++i) {
    c.read_some(c.stdout_fd(), out, 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const pid_t grandchild = std::stoi(out);
  const pid_t child = c.pid();
  ASSERT_TRUE(alive(grandchild));
  const int status = c.terminate(0.2);
  EXPECT_EQ(describe_exit_status(status), "killed by signal 9 (Killed)");
  EXPECT_FALSE(alive(child));
  for (int i = 0; i < 100 && alive(grandchild); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(alive(grandchild));
}

TEST(ChildProcess, LimitsAndEnvironmentAreTheSpecs) {
  ChildSpec spec;
  spec.argv = {"sh", "-c", "ulimit -v; ulimit -f; echo \"$FP8RL_X-${HOME:-nohome}\""};
  spec.env = std::vector<std::string>{"PATH=/usr/bin:/bin"};
  spec.extra_env = {"FP8RL_X=7"};
  spec.limits.address_space_bytes = int64_t{512} << 20;
  spec.limits.file_bytes = 1 << 20;
  ChildProcess c = ChildProcess::start(spec);
  std::string out;
  while (c.read_some(c.stdout_fd(), out, 1 << 16)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(out, "524288\n2048\n7-nohome\n");  // ulimit prints KiB and 512-byte blocks
  EXPECT_EQ(describe_exit_status(c.terminate()), "exited with status 0");
}

TEST(WorkerPool, RepliesInAnyOrderComeBackInRequestOrder) {
  const testing::TempDir tmp;
  // Each worker answers its requests in reverse, after it has read them all (3 per worker).
  WorkerPool pool(python_worker(tmp,
                                "    pending = globals().setdefault('pending', [])\n"
                                "    pending.append(r)\n"
                                "    if len(pending) == 3:\n"
                                "        for q in reversed(pending): reply({'id': q['id'], 'n': q['n'], 'w': __import__('os').environ['FP8RL_WORKER_INDEX']})\n"
                                "        pending.clear()\n",
                                2));
  std::vector<nlohmann::json> requests;
  for (int i = 0; i < 6; ++i) requests.push_back({{"id", fmt::format("r{}", i)}, {"n", i}});
  const std::vector<WorkerReply> replies = pool.call(requests);
  ASSERT_EQ(replies.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(replies[static_cast<size_t>(i)].id, fmt::format("r{}", i));
    EXPECT_EQ(replies[static_cast<size_t>(i)].body["n"], i);
    EXPECT_EQ(replies[static_cast<size_t>(i)].worker, i % 2);  // request i went to worker i % 2
    EXPECT_EQ(replies[static_cast<size_t>(i)].body["w"], std::to_string(i % 2));
  }
  EXPECT_EQ(pool.outstanding(), 0);
}

TEST(WorkerPool, TextThatIsNotUtf8IsReplacedNotRefused) {
  const testing::TempDir tmp;
  WorkerPool pool(python_worker(tmp, "    reply({'id': r['id'], 'echo': r['text']})\n"));
  const std::vector<WorkerReply> replies = pool.call({{{"id", "a"}, {"text", std::string("ab\xe2\x82", 4)}}});
  EXPECT_EQ(replies[0].body["echo"], "ab\xef\xbf\xbd");  // U+FFFD
}

TEST(WorkerPool, ALargeBatchDoesNotDeadlockOnFullPipes) {
  // 4 MiB of requests each way: written while replies are read.
  const testing::TempDir tmp;
  WorkerPool pool(python_worker(tmp, "    reply({'id': r['id'], 'pad': r['pad']})\n"));
  std::vector<nlohmann::json> requests;
  for (int i = 0; i < 256; ++i) requests.push_back({{"id", std::to_string(i)}, {"pad", std::string(16384, 'x')}});
  const std::vector<WorkerReply> replies = pool.call(requests);
  EXPECT_EQ(replies.back().body["pad"].get<std::string>().size(), 16384u);
}

TEST(WorkerPool, EachMisbehaviourIsAnErrorNamingTheWorkerTheRequestAndItsStderr) {
  const testing::TempDir tmp;
  const auto run = [&](const std::string& body) {
    return error_message([&] {
      WorkerPoolOptions o = python_worker(tmp, "    print('about to misbehave', file=sys.stderr, flush=True)\n" + body);
      o.timeout_s = o.startup_timeout_s = 3;  // Python may take a second to start on a busy machine
      WorkerPool pool(o);
      pool.call({{{"id", "q1"}}});
    });
  };
  EXPECT_THAT(run("    sys.exit(3)\n"), HasSubstr("request 'q1': exited with status 3 before answering; its stderr ends with:\n"
                                                   "    about to misbehave"));
  EXPECT_THAT(run("    print('hello')\n"), HasSubstr("owing request 'q1': wrote a line that is not JSON: hello"));
  EXPECT_THAT(run("    reply([1, 2])\n"), HasSubstr("not a JSON object with a string \"id\": [1, 2]"));
  EXPECT_THAT(run("    reply({'id': 'other'})\n"), HasSubstr("request 'other': answered a request it was not sent"));
  EXPECT_THAT(run("    time.sleep(30)\n"), HasSubstr("request 'q1': no first reply within task.reward.startup_timeout_s = 3 s"));
  EXPECT_THAT(run("    sys.stdout.write('x' * 3000000); sys.stdout.flush(); time.sleep(30)\n"),
              HasSubstr("without a newline"));
  EXPECT_THAT(run("    raise ValueError('bad input')\n"), HasSubstr("ValueError: bad input"));
  // Nesting that would overflow the parser's stack is refused before it is parsed.
  EXPECT_THAT(run("    sys.stdout.write('{\"id\": \"q1\", \"x\": ' + '[' * 300000 + ']' * 300000 + '}\\n'); sys.stdout.flush()\n"),
              HasSubstr("owing request 'q1': wrote a reply nested deeper than 256 levels"));
  const std::string message = run("    sys.exit(3)\n");
  EXPECT_THAT(message, ::testing::MatchesRegex("test worker 0 \\(pid [0-9]+, `python3 .*worker.py`\\), request 'q1': .*"));
}

TEST(WorkerPool, ATimeoutCanScoreZeroAndRestartTheWorker) {
  const testing::TempDir tmp;
  WorkerPoolOptions o = python_worker(tmp,
                                      "    if r['id'] == 'slow': time.sleep(30)\n"
                                      "    reply({'id': r['id'], 'reward': 1.0})\n");
  o.timeout_s = 1.5;  // the first reply (a, after Python starts) has startup_timeout_s
  o.restart_on_timeout = true;
  WorkerPool pool(o);
  const std::vector<WorkerReply> replies = pool.call({{{"id", "a"}}, {{"id", "slow"}}, {{"id", "b"}}});
  EXPECT_FALSE(replies[0].timed_out);
  EXPECT_TRUE(replies[1].timed_out);
  EXPECT_FALSE(replies[2].timed_out);  // sent again to the restarted worker
  EXPECT_EQ(parse_reward_reply(pool, replies[1]).reward, 0.0);
  EXPECT_TRUE(parse_reward_reply(pool, replies[1]).timed_out);
  EXPECT_EQ(parse_reward_reply(pool, replies[2]).reward, 1.0);
}

TEST(RewardPlugin, RepliesAreChecked) {
  const testing::TempDir tmp;
  const auto run = [&](const std::string& reply) {
    return error_message([&] {
      WorkerPool pool(python_worker(tmp, "    sys.stdout.write(" + reply + " + '\\n'); sys.stdout.flush()\n"));
      parse_reward_reply(pool, pool.call({{{"id", "q"}}})[0]);
    });
  };
  EXPECT_THAT(run("'{\"id\": \"q\"}'"), HasSubstr("\"reward\" must be a finite number, got no \"reward\" field"));
  EXPECT_THAT(run("'{\"id\": \"q\", \"reward\": true}'"), HasSubstr("\"reward\" must be a finite number, got true"));
  EXPECT_THAT(run("'{\"id\": \"q\", \"reward\": 1, \"metrics\": [1]}'"), HasSubstr("\"metrics\" must be an object"));
  EXPECT_THAT(run("'{\"id\": \"q\", \"reward\": 1, \"metrics\": {\"\": 1}}'"), HasSubstr("non-empty name"));
  EXPECT_EQ(run("'{\"id\": \"q\", \"reward\": -2.5, \"metrics\": {\"len\": 3}}'"), "(no error)");
}

}  // namespace
}  // namespace fp8rl
