// A child process fp8rl starts and owns: plug-in workers (tasks/worker_pool.h) and sandboxed
// programs (tasks/sandbox.h). Its stdin, stdout and stderr are connected to the parent, which
// writes and reads them without blocking (the caller polls the descriptors). Nothing the child
// does outlives its owner:
//
// * it runs in a process group of its own, and terminate() (also the destructor) ends the whole
//   group: close stdin, wait up to the grace period, SIGTERM, wait again, SIGKILL, reap;
// * every live group is in a registry that kill_all_children() (async-signal-safe) kills from a
//   signal handler (cli/main.cc on SIGINT, SIGTERM and SIGHUP);
// * PR_SET_PDEATHSIG sends it SIGKILL if fp8rl dies without either (kill -9).
//
// A program that cannot be started (not found, not executable) is an Error naming it, thrown by
// start(), never a child that exits at once with a status the caller must interpret.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl {

// Resource limits set (setrlimit) in the child before exec; 0 leaves a limit as inherited.
struct ChildLimits {
  int64_t cpu_seconds = 0;          // RLIMIT_CPU: SIGXCPU, then SIGKILL
  int64_t address_space_bytes = 0;  // RLIMIT_AS: allocations beyond it fail
  int64_t processes = 0;            // RLIMIT_NPROC: of the child's user (needs `uid`; root ignores it)
  int64_t file_bytes = 0;           // RLIMIT_FSIZE: largest file it may write
  int64_t open_files = 0;           // RLIMIT_NOFILE
};

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or a name searched on PATH
  // The child's environment; nullopt inherits the parent's. `extra_env` is added either way.
  std::optional<std::vector<std::string>> env;
  std::vector<std::string> extra_env;  // "NAME=value"
  std::string cwd;                     // empty: the parent's
  ChildLimits limits;
  std::optional<uint32_t> uid;  // run as this user and group (the parent must be root)
  // What start()'s errors call the program, e.g. "reward worker 2"; argv is appended.
  std::string role = "child process";
};

class ChildProcess {
 public:
  // Forks and execs; throws Error when the program cannot be found or executed.
  static ChildProcess start(const ChildSpec& spec);
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() const { return pid_ > 0 && !status_; }
  pid_t pid() const { return pid_; }
  // Non-blocking descriptors; -1 once closed. stdin is a socket (writes never raise SIGPIPE).
  int stdin_fd() const { return stdin_; }
  int stdout_fd() const { return stdout_; }
  int stderr_fd() const { return stderr_; }
  void close_stdin();

  // Sends what of `data` (from `offset`) the child's stdin takes now; returns the new offset.
  // Throws Error when the child has closed its stdin (it exited, or closed it).
  size_t write_some(const std::string& data, size_t offset);
  // Appends what is readable now on `fd` (stdout_fd() or stderr_fd()) to `out`, at most
  // `max_bytes` of it; returns false at end of file (the descriptor is then closed).
  bool read_some(int fd, std::string& out, size_t max_bytes);

  // The exit status (waitpid's) once the child has exited; reaps it without blocking.
  std::optional<int> poll_exit();
  // Waits up to `seconds` for the child to exit by itself.
  std::optional<int> wait_exit(double seconds);
  // Ends the child's process group (see above) and reaps it; idempotent. Returns its status.
  int terminate(double grace_seconds = 2.0);
  // Sends `sig` to the child's process group while the child runs.
  void signal_group(int sig);

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  std::optional<int> status_;
  int registry_slot_ = -1;
};

// "exited with status 3", "killed by signal 9 (Killed)".
std::string describe_exit_status(int status);

// Kills (SIGKILL) the process group of every live ChildProcess. Async-signal-safe.
void kill_all_children();

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER): a process
// whose parent dies (a sandbox's namespace init when bwrap's monitor is killed) comes to it, not
// to the system's init, which in a container may never reap it, leaving zombies that count
// against their user's process limit.
void become_subreaper();
// Reaps the children of this process that no ChildProcess owns and whose command name is
// `comm`, waiting up to `seconds` for those still running to end.
void reap_adopted_children(std::string_view comm, double seconds);

// The full path of `program` (as given when it contains a '/', else the first executable of
// that name on PATH), or nullopt.
std::optional<std::string> find_program(const std::string& program);

}  // namespace fp8rl
