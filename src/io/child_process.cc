#include "io/child_process.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "core/check.h"

namespace fp8rl {

namespace {

// The live process groups, for kill_all_children (a signal handler may read it at any moment).
constexpr int kRegistrySlots = 1024;
std::atomic<pid_t> g_children[kRegistrySlots];

int register_child(pid_t pid) {
  for (int i = 0; i < kRegistrySlots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) return i;
  }
  return -1;  // full: the child still dies with its parent (PR_SET_PDEATHSIG)
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string join_argv(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

[[noreturn]] void report_errno_and_exit(int error_fd) {
  const int e = errno;
  [[maybe_unused]] const ssize_t n = ::write(error_fd, &e, sizeof e);
  ::_exit(127);
}

// In the forked child, before exec: only async-signal-safe calls. On failure, the errno goes
// to the parent through `error_fd` and the child exits.
[[noreturn]] void child_exec(const ChildSpec& spec, const char* path, char* const* argv, char* const* envp, pid_t parent,
                             int in_fd, int out_fd, int err_fd, int error_fd) {
  const auto fail = [error_fd] { report_errno_and_exit(error_fd); };
  ::setpgid(0, 0);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail();
  if (::getppid() != parent) ::_exit(127);  // the parent is already gone
  // Signals as a fresh process has them (the parent's handlers, ignores and mask are its own).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) fail();
  // Every other descriptor closes at exec (error_fd too, which tells the parent exec succeeded).
  for (int fd = 3; fd < 1024; ++fd)
    if (fd != error_fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const ChildLimits& l = spec.limits;
  const std::pair<int, int64_t> limits[] = {{RLIMIT_CPU, l.cpu_seconds},
                                            {RLIMIT_AS, l.address_space_bytes},
                                            {RLIMIT_NPROC, l.processes},
                                            {RLIMIT_FSIZE, l.file_bytes},
                                            {RLIMIT_NOFILE, l.open_files}};
  for (const auto& [resource, value] : limits) {
    if (value <= 0) continue;
    // CPU: the soft limit sends SIGXCPU, the hard one a second later SIGKILL.
    const rlimit r{static_cast<rlim_t>(value), static_cast<rlim_t>(value + (resource == RLIMIT_CPU ? 1 : 0))};
    if (::setrlimit(resource, &r) != 0) fail();
  }
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) fail();
  if (spec.uid) {
    const gid_t gid = static_cast<gid_t>(*spec.uid);
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(static_cast<uid_t>(*spec.uid)) != 0) fail();
  }
  ::execve(path, argv, envp);
  report_errno_and_exit(error_fd);
}

}  // namespace

std::optional<std::string> find_program(const std::string& program) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) return executable(program) ? std::optional(program) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string dir = dirs.substr(begin, end - begin);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(candidate)) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

ChildProcess ChildProcess::start(const ChildSpec& spec) {
  FP8RL_CHECK(!spec.argv.empty(), "{}: an empty command", spec.role);
  const std::string shown = join_argv(spec.argv);
  const std::optional<std::string> path = find_program(spec.argv[0]);
  FP8RL_REQUIRE(path.has_value(), "{}: cannot start `{}`: '{}' is not an executable file{}", spec.role, shown,
                spec.argv[0], spec.argv[0].find('/') == std::string::npos ? " on PATH" : "");
  // Everything exec needs, made before fork (the child may not allocate).
  std::vector<std::string> env_strings;
  if (spec.env) {
    env_strings = *spec.env;
  } else {
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  }
  env_strings.insert(env_strings.end(), spec.extra_env.begin(), spec.extra_env.end());
  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in[2], out[2], err[2], error_pipe[2];
  FP8RL_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) == 0, "{}: socketpair: {}", spec.role,
                std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(error_pipe, O_CLOEXEC) != 0)
    throw Error(fmt::format("{}: pipe: {}", spec.role, std::strerror(errno)));
  ::shutdown(in[0], SHUT_RD);  // the parent only writes, the child only reads
  ::shutdown(in[1], SHUT_WR);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) child_exec(spec, path->c_str(), argv.data(), envp.data(), parent, in[1], out[1], err[1], error_pipe[1]);
  for (int fd : {in[1], out[1], err[1], error_pipe[1]}) ::close(fd);
  if (pid < 0) {
    const int e = errno;
    for (int fd : {in[0], out[0], err[0], error_pipe[0]}) ::close(fd);
    throw Error(fmt::format("{}: cannot start `{}`: fork: {}", spec.role, shown, std::strerror(e)));
  }
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  ChildProcess c;
  c.pid_ = pid;
  c.stdin_ = in[0];
  c.stdout_ = out[0];
  c.stderr_ = err[0];
  c.registry_slot_ = register_child(pid);
  // exec closes the error pipe (success) or the child writes its errno into it.
  int child_errno = 0;
  ssize_t n;
  do n = ::read(error_pipe[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    c.terminate(0);
    throw Error(fmt::format("{}: cannot start `{}`: {}", spec.role, shown, std::strerror(child_errno)));
  }
  for (int fd : {c.stdin_, c.stdout_, c.stderr_}) set_nonblocking(fd);
  return c;
}

ChildProcess::~ChildProcess() { terminate(); }

ChildProcess::ChildProcess(ChildProcess&& o) noexcept { *this = std::move(o); }

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    terminate();
    pid_ = std::exchange(o.pid_, -1);
    stdin_ = std::exchange(o.stdin_, -1);
    stdout_ = std::exchange(o.stdout_, -1);
    stderr_ = std::exchange(o.stderr_, -1);
    status_ = std::exchange(o.status_, std::nullopt);
    registry_slot_ = std::exchange(o.registry_slot_, -1);
  }
  return *this;
}

void ChildProcess::close_stdin() { close_fd(stdin_); }

size_t ChildProcess::write_some(const std::string& data, size_t offset) {
  while (offset < data.size()) {
    const ssize_t n = ::send(stdin_, data.data() + offset, data.size() - offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      offset += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      throw Error(fmt::format("its stdin is closed ({})", std::strerror(errno)));
    }
  }
  return offset;
}

bool ChildProcess::read_some(int fd, std::string& out, size_t max_bytes) {
  char buf[65536];
  size_t taken = 0;
  while (taken < max_bytes) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - taken));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      taken += static_cast<size_t>(n);
    } else if (n == 0) {
      if (fd == stdout_) close_fd(stdout_);
      if (fd == stderr_) close_fd(stderr_);
      return false;
    } else if (errno == EINTR) {
      continue;
    } else {
      break;  // EAGAIN: nothing more now
    }
  }
  return true;
}

std::optional<int> ChildProcess::poll_exit() {
  if (status_ || pid_ <= 0) return status_;
  // Left unreaped (WNOWAIT): while the leader is a zombie its pid, and so its process group's
  // id, cannot be reused, and terminate() can still kill what remains of the group.
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
    return std::nullopt;
  status_ = info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8 : (info.si_status & 0x7f);
  return status_;
}

std::optional<int> ChildProcess::wait_exit(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (poll_exit()) return status_;
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int ChildProcess::terminate(double grace_seconds) {
  if (pid_ <= 0) return status_.value_or(0);
  close_stdin();  // a worker reading requests sees end of file and may exit by itself
  if (!wait_exit(grace_seconds)) {
    ::kill(-pid_, SIGTERM);
    wait_exit(grace_seconds);
  }
  ::kill(-pid_, SIGKILL);  // the group: what the child left behind, or the child itself
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  if (!status_) status_ = status;
  if (registry_slot_ >= 0) g_children[registry_slot_].store(0);
  registry_slot_ = -1;
  pid_ = -1;
  close_fd(stdout_);
  close_fd(stderr_);
  return *status_;
}

void ChildProcess::signal_group(int sig) {
  if (pid_ > 0 && !poll_exit()) ::kill(-pid_, sig);
}

std::string describe_exit_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

void reap_adopted_children(std::string_view comm, double seconds) {
  const pid_t self = ::getpid();
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    bool left = false;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // pid (comm) state ppid ...
      const size_t open = line.find('('), close = line.rfind(')');
      if (open == std::string::npos || close == std::string::npos || close + 4 > line.size()) continue;
      if (std::string_view(line).substr(open + 1, close - open - 1) != comm) continue;
      const pid_t ppid = static_cast<pid_t>(std::strtol(line.c_str() + close + 4, nullptr, 10));
      const pid_t pid = static_cast<pid_t>(std::stol(name));
      if (ppid != self) continue;
      bool owned = false;
      for (const std::atomic<pid_t>& slot : g_children) owned = owned || slot.load() == pid;
      if (owned) continue;
      left = true;
      int status;
      if (line[close + 2] == 'Z') ::waitpid(pid, &status, WNOHANG);
    }
    if (!left || std::chrono::steady_clock::now() >= until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void kill_all_children() {
  for (std::atomic<pid_t>& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) ::kill(-pid, SIGKILL);
  }
}

}  // namespace fp8rl
