#include "tasks/sandbox.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/check.h"
#include "io/config.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// Users the sandboxes of one process take in turn when it is root (one user's process limit is
// one run's).
constexpr uint32_t kSandboxUsers = 64;
// bwrap's own processes (its monitor and the namespace's init) within the process limit.
constexpr int64_t kBwrapProcesses = 4;
// The next sandbox user (of kSandboxUsers), process-wide: consecutive runs never share one.
std::atomic<uint32_t> next_user{0};

// The processes `uid` runs now (RLIMIT_NPROC counts them all).
int64_t processes_of(uid_t uid) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.starts_with("Uid:")) {
        n += std::stoul(line.substr(4)) == uid;
        break;
      }
  }
  return n;
}

std::string tail(const std::string& s, size_t n = 600) { return s.size() > n ? "..." + s.substr(s.size() - n) : s; }

}  // namespace

bool SandboxResult::ok() const { return !timed_out && !output_cut && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string SandboxResult::describe() const {
  if (timed_out) return fmt::format("timed out after {:.1f} s", seconds);
  if (output_cut) return "wrote more output than allowed (killed)";
  // bwrap exits with 128 + N when the program was killed by signal N (SIGXCPU: the CPU limit).
  if (WIFEXITED(status) && WEXITSTATUS(status) > 128)
    return fmt::format("killed by signal {} ({})", WEXITSTATUS(status) - 128, strsignal(WEXITSTATUS(status) - 128));
  return describe_exit_status(status);
}

struct Sandbox::Pool::Running {
  int64_t tag = 0;
  ChildProcess process;
  fs::path dir;
  std::string out, err, input;
  size_t written = 0;
  Clock::time_point start;
  bool timed_out = false, cut = false, out_done = false, err_done = false;

  ~Running() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

void bind_sandbox_limits(ConfigSchema& schema, const std::string& prefix, SandboxLimits& limits) {
  const SandboxLimits d;
  schema.add(prefix + ".wall_seconds", &limits.wall_seconds, d.wall_seconds, "a sandboxed program is killed after this long")
      .range(0.01, 3600);
  schema.add(prefix + ".cpu_seconds", &limits.cpu_seconds, d.cpu_seconds, "its CPU time limit (RLIMIT_CPU)").range(1, 3600);
  schema.add(prefix + ".memory_bytes", &limits.memory_bytes, d.memory_bytes, "its address space limit (RLIMIT_AS)")
      .range(int64_t{64} << 20, int64_t{1} << 40);
  schema.add(prefix + ".processes", &limits.processes, d.processes, "processes it may run at once").range(1, 4096);
  schema.add(prefix + ".file_bytes", &limits.file_bytes, d.file_bytes, "largest file it may write (RLIMIT_FSIZE)")
      .range(0, int64_t{1} << 40);
  schema.add(prefix + ".output_bytes", &limits.output_bytes, d.output_bytes,
             "stdout and stderr bytes kept each (a program that writes more is killed)").range(64, int64_t{1} << 30);
  schema.add(prefix + ".tmp_bytes", &limits.tmp_bytes, d.tmp_bytes, "size of its /tmp (a tmpfs)").range(1 << 20, int64_t{1} << 40);
}

uint32_t sandbox_uid(uint32_t run) {
  const uint32_t block = static_cast<uint32_t>(::getpid()) % (kSandboxUidSpan / kSandboxUsers);
  return kSandboxUidBase + block * kSandboxUsers + run % kSandboxUsers;
}

Sandbox Sandbox::open(const SandboxLimits& limits) {
  const std::optional<std::string> bwrap = find_program("bwrap");
  FP8RL_REQUIRE(bwrap.has_value(),
                "running model-written code needs the bubblewrap sandbox, and `bwrap` is not on PATH: install it "
                "(Debian: apt-get install bubblewrap; scripts/setup.sh does). fp8rl never runs such code outside it");
  become_subreaper();  // the namespaces' init processes come back to this process to be reaped
  Sandbox s(*bwrap, limits);
  const SandboxResult r = s.run({{}, {"/usr/bin/true"}, ""});
  FP8RL_REQUIRE(r.ok(),
                "the bubblewrap sandbox cannot start here ({}; bwrap says: {}): it needs user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0, or a container that allows "
                "them). fp8rl never runs model-written code outside it",
                r.describe(), r.err.empty() ? "nothing" : tail(r.err, 300));
  return s;
}

SandboxResult Sandbox::run(const SandboxJob& job) const {
  Pool pool(*this, 1);
  pool.submit(0, job);
  std::vector<std::pair<int64_t, SandboxResult>> done;
  while (done.empty()) done = pool.poll(/*wait=*/true);
  return std::move(done.front().second);
}

Sandbox::Pool::Pool(const Sandbox& sandbox, int64_t parallel) : sandbox_(sandbox), parallel_(std::max<int64_t>(1, parallel)) {}

Sandbox::Pool::~Pool() = default;  // each Running's process group is killed, its directory removed

void Sandbox::Pool::submit(int64_t tag, SandboxJob job) { queue_.emplace_back(tag, std::move(job)); }

std::vector<std::pair<int64_t, SandboxResult>> Sandbox::Pool::poll(bool wait) {
  const SandboxLimits& L = sandbox_.limits_;
  std::vector<std::pair<int64_t, SandboxResult>> done;
  for (;;) {
    // Start what there is room for.
    while (!queue_.empty() && static_cast<int64_t>(running_.size()) < parallel_) {
      auto [tag, job] = std::move(queue_.front());
      queue_.pop_front();
      auto r = std::make_unique<Running>();
      r->tag = tag;
      r->input = std::move(job.stdin_text);
      std::string pattern = (fs::temp_directory_path() / "fp8rl-sandbox-XXXXXX").string();
      FP8RL_REQUIRE(::mkdtemp(pattern.data()) != nullptr, "sandbox: cannot make a directory in '{}': {}",
                    fs::temp_directory_path().string(), std::strerror(errno));
      r->dir = pattern;
      fs::permissions(r->dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
      for (const auto& [name, content] : job.files) {
        FP8RL_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                    "sandbox file name '{}'", name);
        std::ofstream(r->dir / name, std::ios::binary) << content;
        fs::permissions(r->dir / name, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                           fs::perms::others_read);
      }
      const bool root = ::geteuid() == 0;
      ChildSpec spec;
      spec.role = "sandbox";
      spec.argv = {sandbox_.bwrap_, "--unshare-all", "--die-with-parent", "--new-session",
                   "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                   "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev",
                   "--size", std::to_string(L.tmp_bytes), "--tmpfs", "/tmp", "--ro-bind", r->dir.string(), "/code",
                   "--remount-ro", "/", "--chdir", "/tmp", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                   "--setenv", "LANG", "C.UTF-8", "--"};
      spec.argv.insert(spec.argv.end(), job.argv.begin(), job.argv.end());
      spec.env = std::vector<std::string>{};  // bwrap starts with nothing of fp8rl's environment
      spec.limits = {L.cpu_seconds, L.memory_bytes,
                     L.processes + kBwrapProcesses + (root ? 0 : processes_of(::geteuid())), L.file_bytes, L.open_files};
      if (root) spec.uid = sandbox_uid(next_user.fetch_add(1));
      r->process = ChildProcess::start(spec);
      if (r->input.empty()) r->process.close_stdin();
      r->start = Clock::now();
      running_.push_back(std::move(r));
    }
    if (running_.empty()) return done;
    // Wait for output, an exit or a deadline.
    std::vector<pollfd> fds;
    double next_deadline = 0.05;  // exits are noticed at least this often
    for (const auto& r : running_) {
      for (int fd : {r->process.stdout_fd(), r->process.stderr_fd()})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
      if (r->process.stdin_fd() >= 0 && r->written < r->input.size()) fds.push_back({r->process.stdin_fd(), POLLOUT, 0});
      next_deadline = std::min(next_deadline, L.wall_seconds - std::chrono::duration<double>(Clock::now() - r->start).count());
      if (r->out_done && r->err_done) next_deadline = std::min(next_deadline, 0.001);  // its exit is moments away
    }
    if (done.empty() && wait)
      ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::max(0.0, next_deadline) * 1000)));
    for (auto it = running_.begin(); it != running_.end();) {
      Running& r = **it;
      const size_t cap = static_cast<size_t>(L.output_bytes);
      if (r.process.stdout_fd() >= 0) r.out_done = !r.process.read_some(r.process.stdout_fd(), r.out, cap + 1 - std::min(cap + 1, r.out.size()));
      if (r.process.stderr_fd() >= 0) r.err_done = !r.process.read_some(r.process.stderr_fd(), r.err, cap + 1 - std::min(cap + 1, r.err.size()));
      if (r.process.stdin_fd() >= 0 && r.written < r.input.size()) {
        try {
          r.written = r.process.write_some(r.input, r.written);
        } catch (const Error&) {
          r.written = r.input.size();  // it closed its stdin: fine
        }
        if (r.written == r.input.size()) r.process.close_stdin();
      }
      r.cut = r.out.size() > cap || r.err.size() > cap;
      r.timed_out = std::chrono::duration<double>(Clock::now() - r.start).count() > L.wall_seconds;
      const bool exited = r.process.poll_exit().has_value() && r.out_done && r.err_done;
      if (!exited && !r.cut && !r.timed_out) {
        ++it;
        continue;
      }
      SandboxResult res;
      res.status = r.process.terminate(0);  // the whole group, at once
      reap_adopted_children("bwrap", 1.0);  // and the namespace's init, if bwrap's monitor was killed
      res.timed_out = r.timed_out && !exited;
      res.output_cut = r.cut;
      res.out = r.out.substr(0, cap);
      res.err = r.err.substr(0, cap);
      res.seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
      done.emplace_back(r.tag, std::move(res));
      it = running_.erase(it);
    }
    if (!done.empty() || !wait) {
      if (queue_.empty() || static_cast<int64_t>(running_.size()) >= parallel_) return done;
    }
  }
}

}  // namespace fp8rl
