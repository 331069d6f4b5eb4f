// The sandbox of model-written code (tasks/sandbox.h) against hostile programs: each row of the
// table is a program and what must happen to it; the test prints the table with what did happen.
// Afterwards no process of any sandbox is left, and nothing outside was written or read. Also the
// python_tests reward (tasks/python_sandbox.h): right code passes, wrong code fails, and code
// that prints the results' format itself cannot make a pass.
// ctest-file-label: quick
#include "tasks/sandbox.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/check.h"
#include "tasks/python_sandbox.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

// The sandbox, or the reason it cannot start here (the tests then skip, saying why).
std::optional<Sandbox> sandbox_or_skip(std::string* why, SandboxLimits limits = {}) {
  try {
    return Sandbox::open(limits);
  } catch (const Error& e) {
    *why = e.what();
    return std::nullopt;
  }
}

// Whether any process's command line contains `marker`.
bool process_with(const std::string& marker) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(marker) != std::string::npos && cmd.find("pgrep") == std::string::npos) return true;
  }
  return false;
}

SandboxResult python(const Sandbox& s, const std::string& code) {
  return s.run({{{"main.py", code}}, {"python3", "/code/main.py"}, ""});
}

TEST(Sandbox, HostileProgramsAreContained) {
  SandboxLimits limits;
  limits.wall_seconds = 3;
  limits.cpu_seconds = 2;
  limits.output_bytes = 4096;
  std::string why;
  const std::optional<Sandbox> s = sandbox_or_skip(&why, limits);
  if (!s) GTEST_SKIP() << why;
  const testing::TempDir tmp;
  const fs::path secret = tmp.write("secret.txt", "the parent's file");
  ::setenv("FP8RL_SANDBOX_TEST_SECRET", "s3cret", 1);
  // A server on the host's loopback.
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);

  struct Row {
    std::string name, code;
    std::function<bool(const SandboxResult&)> contained;
  };
  const auto prints = [](const std::string& text) { return [text](const SandboxResult& r) { return r.out.find(text) != std::string::npos; }; };
  const std::vector<Row> rows = {
      {"connect to 127.0.0.1 (a host server listening)",
       fmt::format("import socket\ntry:\n    socket.create_connection(('127.0.0.1', {}), timeout=1); print('CONNECTED')\n"
                   "except OSError as e:\n    print('blocked:', e)\n", port),
       prints("blocked")},
      {"resolve and reach the internet",
       "import socket\ntry:\n    socket.create_connection(('deb.debian.org', 80), timeout=1); print('CONNECTED')\n"
       "except OSError as e:\n    print('blocked:', e)\n",
       prints("blocked")},
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
       [](const SandboxResult& r) { return r.timed_out || !r.ok(); }},
      {"allocate 10 GB", "x = bytearray(10 << 30)\nprint('ALLOCATED')\n",
       [](const SandboxResult& r) { return !r.ok() && r.out.find("ALLOCATED") == std::string::npos && r.err.find("MemoryError") != std::string::npos; }},
      {"write to /etc", "open('/etc/fp8rl-sandbox-test', 'w').write('x')\nprint('WROTE')\n",
       [](const SandboxResult& r) { return !r.ok() && !fs::exists("/etc/fp8rl-sandbox-test"); }},
      {"write to the parent's $HOME", fmt::format("open('{}/fp8rl-sandbox-test', 'w').write('x')\nprint('WROTE')\n",
                                                  std::getenv("HOME") ? std::getenv("HOME") : "/root"),
       [](const SandboxResult& r) {
         return !r.ok() && !fs::exists(fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / "fp8rl-sandbox-test");
       }},
      {"write a file larger than file_bytes", "open('/tmp/big', 'wb').write(b'x' * (32 << 20))\nprint('WROTE')\n",
       [](const SandboxResult& r) { return !r.ok() && r.out.find("WROTE") == std::string::npos; }},
      {"read the parent's environment",
       "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ', 'rb').read())\n"
       "print('FP8RL_SANDBOX_TEST_SECRET' in os.environ)\n",
       [](const SandboxResult& r) { return r.out.find("s3cret") == std::string::npos && r.out.find("False") != std::string::npos; }},
      {"read files outside", fmt::format("for p in ['{}', '/root/.bashrc', '/etc/passwd', '/proc/1/root/etc/hostname']:\n"
                                         "    try:\n        print(p, open(p).read()[:40])\n    except OSError as e:\n        print(p, 'blocked', type(e).__name__)\n",
                                         secret.string()),
       [](const SandboxResult& r) { return r.out.find("parent's file") == std::string::npos && r.out.find("root:") == std::string::npos; }},
      {"infinite loop", "while True:\n    pass\n", [](const SandboxResult& r) { return !r.ok(); }},
      {"print 1 GB", "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n",
       [](const SandboxResult& r) { return r.output_cut && r.out.size() <= 4096; }},
      {"a background process meant to outlive the run",
       "import subprocess\nsubprocess.Popen(['sleep', '987.654321'], start_new_session=True)\n"
       "subprocess.Popen(['sh', '-c', 'sleep 987.654321 &'])\nprint('STARTED')\n",
       [](const SandboxResult& r) { return r.out.find("STARTED") != std::string::npos; }},
  };
  std::string table = "\n  hostile program                                   | what happened\n";
  bool all = true;
  for (const Row& row : rows) {
    const SandboxResult r = python(*s, row.code);
    const bool ok = row.contained(r);
    all = all && ok;
    std::string first_line = r.out.substr(0, r.out.find('\n'));
    if (first_line.size() > 60) first_line = first_line.substr(0, 60) + "...";
    table += fmt::format("  {:<50}| {} in {:.2f} s{}{}\n", row.name, r.describe(), r.seconds,
                         first_line.empty() ? "" : "; stdout: " + first_line, ok ? "" : "  <-- NOT CONTAINED");
    EXPECT_TRUE(ok) << row.name << ": " << r.describe() << "\nstdout: " << r.out.substr(0, 300) << "\nstderr: " << r.err.substr(0, 300);
  }
  std::printf("%s", table.c_str());
  ::close(server);
  ::unsetenv("FP8RL_SANDBOX_TEST_SECRET");
  // Nothing of any run is left: the fork bomb's children, the background sleeps.
  for (int i = 0; i < 50 && process_with("987.654321"); ++i) ::usleep(20000);
  EXPECT_FALSE(process_with("987.654321")) << "a sandboxed process outlived its run";
  if (::geteuid() == 0) {
    int left = 0;
    for (uint32_t run = 0; run < 64; ++run)
      left += std::system(fmt::format("pgrep -u {} > /dev/null", sandbox_uid(run)).c_str()) == 0;
    EXPECT_EQ(left, 0) << "processes of the sandbox users are left";
  }
}

TEST(Sandbox, MissingBubblewrapIsAnErrorSayingWhatToInstall) {
  const char* path = std::getenv("PATH");
  const std::string saved = path ? path : "";
  ::setenv("PATH", "/nonexistent", 1);
  std::string message;
  try {
    Sandbox::open({});
  } catch (const Error& e) {
    message = e.what();
  }
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_THAT(message, ::testing::HasSubstr("install it (Debian: apt-get install bubblewrap"));
  EXPECT_THAT(message, ::testing::HasSubstr("never runs such code outside it"));
}

TEST(PythonSandbox, CodeIsTheLastFencedBlock) {
  EXPECT_EQ(python_code_of("def f(x):\n  return x"), "def f(x):\n  return x");
  EXPECT_EQ(python_code_of("Here:\n```python\ndef f(x):\n  return 1\n```\nand\n```python\ndef f(x):\n  return 2\n```\n"),
            "def f(x):\n  return 2\n");
  EXPECT_EQ(python_code_of("```\nprint(3)\n```"), "print(3)\n");
}

TEST(PythonSandbox, TestsScoreTheCodeAndCannotBeForged) {
  std::string why;
  if (!sandbox_or_skip(&why)) GTEST_SKIP() << why;
  const std::unique_ptr<RewardFunction> reward = make_python_tests_reward(SandboxLimits{}, 2);
  const Example e{"add three", "def f(x):\n    return x + 3",
                  R"J({"tests": [{"call": "f(0)", "expected": "3"}, {"call": "f(4)", "expected": "7"},
                                {"call": "f(-3)", "expected": "0"}, {"call": "f(10)", "expected": "13"}]})J"};
  const std::vector<RewardRequest> requests = {
      {"right", &e, "```python\ndef f(x):\n    return x + 3\n```"},
      {"half right", &e, "def f(x):\n    return 3 if x == 0 else x + 3 if x > 0 else 1"},
      {"syntax error", &e, "def f(x) return x"},
      // Writes a pass for "3" on every descriptor the results' channel could be, then leaves.
      {"forger", &e,
       "import os\nfor fd in range(1, 10):\n    try:\n        os.write(fd, b'\"3\"\\n\"3\"\\n\"3\"\\n\"3\"\\n')\n"
       "    except OSError:\n        pass\nos._exit(0)\n"},
      {"prints", &e, "print('\"3\"')\ndef f(x):\n    print('\"7\"')\n    return x + 3"},
      // Output nested deep enough to overflow a recursive parser, on every descriptor.
      {"nester", &e, "import os\nfor fd in range(1, 10):\n    try:\n        os.write(fd, b'[' * 60000 + b'\\n')\n    except OSError:\n        pass\n"},
  };
  const std::vector<RewardResult> r = reward->score(requests);
  EXPECT_EQ(r[0].reward, 1.0);
  EXPECT_EQ(r[1].reward, 0.75);
  EXPECT_EQ(r[2].reward, 0.0);
  EXPECT_LT(r[3].reward, 0.5) << "code that writes the results' format itself gets no more than luck";
  EXPECT_EQ(r[4].reward, 1.0) << "the code's own prints do not disturb the results";
  EXPECT_EQ(r[5].reward, 0.0);
  const auto metric = [](const RewardResult& x, const std::string& name) {
    for (const auto& [n, v] : x.metrics)
      if (n == name) return v;
    return -1.0;
  };
  EXPECT_EQ(metric(r[0], "all_passed"), 1.0);
  EXPECT_EQ(metric(r[1], "all_passed"), 0.0);
  const Example no_tests{"x", "y", R"({"prompt": "x"})"};
  EXPECT_THAT(([&] {
                try {
                  reward->score({{"q", &no_tests, "pass"}});
                } catch (const Error& err) {
                  return std::string(err.what());
                }
                return std::string();
              }()),
              ::testing::HasSubstr("needs \"tests\": a non-empty list"));
}

}  // namespace
}  // namespace fp8rl

namespace fp8rl {
namespace {

// The built-in python tool: a turn ending with <python>CODE</python> gets CODE's output back; a
// failing program's observation says how it failed; a turn without a program ends the sample.
TEST(PythonSandbox, TheToolRunsTheTurnsProgram) {
  std::string why;
  if (!sandbox_or_skip(&why)) GTEST_SKIP() << why;
  const std::unique_ptr<Environment> env = make_python_tool_environment(SandboxLimits{}, 2);
  const Example e{"p", "a", {}};
  env->submit("a", 0, 1, e, "Let me compute.\n<python>print(6 * 7)</python>");
  env->submit("b", 1, 1, e, "<python>raise ValueError('nope')</python>");
  env->submit("c", 2, 1, e, "The answer is 42.");
  std::map<std::string, EnvironmentReply> replies;
  while (replies.size() < 3)
    for (EnvironmentReply& r : env->poll(/*wait=*/true)) replies[r.id] = r;
  EXPECT_FALSE(replies["a"].done);
  EXPECT_EQ(replies["a"].observation, "42\n");
  EXPECT_THAT(replies["b"].observation, ::testing::HasSubstr("[exited with status 1]"));
  EXPECT_THAT(replies["b"].observation, ::testing::HasSubstr("ValueError: nope"));
  EXPECT_TRUE(replies["c"].done);
}

}  // namespace
}  // namespace fp8rl
