// Running model-written code: only ever inside bubblewrap (Debian's `bubblewrap`), never bare.
//
// Each run is a bwrap process with every namespace of its own (no network: a loopback of its
// own; no other process visible; its own hostname and IPC), in a new session, that dies with
// fp8rl (--die-with-parent). What it sees:
//   /usr (and the /bin, /lib, /lib64 links) read-only; a fresh /proc and a minimal /dev;
//   /code, read-only: the files of the run (a directory fp8rl writes and removes);
//   /tmp, its working directory: a tmpfs of SandboxLimits::tmp_bytes, gone after the run;
//   nothing else: no /home, /root, /etc or run directories; the root is read-only.
// Its environment is PATH, HOME=/tmp and LANG only (bwrap itself starts with an empty one, so
// /proc/1/environ shows nothing either). When fp8rl runs as root, the run's processes belong to a
// user of their own (sandbox_uid: one of 64 per fp8rl process, in a range of its pid's), so that
// RLIMIT_NPROC counts them alone, and runs of other fp8rl processes on the machine (tests side by
// side, MPI ranks) do not share their users' limit; otherwise
// they run as fp8rl's user with a user namespace, and the process limit is raised by what that
// user already runs. Every run has limits: CPU seconds, address space, processes, file size,
// open files (setrlimit before exec), wall time (killed), and the bytes of stdout and stderr kept
// (a program that writes more is killed, its output cut).
//
// Sandbox::open() checks that bwrap exists and can create its namespaces here; otherwise it
// throws an Error that says what to install or enable.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/child_process.h"

namespace fp8rl {

// The sandboxes' users when fp8rl runs as root: [kSandboxUidBase, kSandboxUidBase + kSandboxUidSpan).
inline constexpr uint32_t kSandboxUidBase = 100000;
inline constexpr uint32_t kSandboxUidSpan = 65536;
// The user of this process's `run`-th sandbox: 64 in turn, from a block chosen by the pid.
uint32_t sandbox_uid(uint32_t run);

struct SandboxLimits {
  double wall_seconds = 10;
  int64_t cpu_seconds = 10;
  int64_t memory_bytes = int64_t{1} << 30;  // address space (Python alone reserves ~30 MB)
  int64_t processes = 16;
  int64_t file_bytes = int64_t{16} << 20;
  int64_t open_files = 64;
  int64_t output_bytes = int64_t{64} << 10;  // of stdout and of stderr, each
  int64_t tmp_bytes = int64_t{64} << 20;
};

struct SandboxResult {
  int status = 0;            // waitpid's
  bool timed_out = false;    // killed at wall_seconds
  bool output_cut = false;   // wrote more than output_bytes (killed)
  std::string out, err;      // at most output_bytes each
  double seconds = 0;
  bool ok() const;           // exited with status 0, in time, output whole
  std::string describe() const;  // "exited with status 1", "timed out after 10 s", ...
};

// One program in the sandbox: the files to put in /code (name -> content) and the command, e.g.
// {"python3", "/code/main.py"}.
struct SandboxJob {
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> argv;
  std::string stdin_text;
};

class ConfigSchema;
// task.sandbox.*
void bind_sandbox_limits(ConfigSchema& schema, const std::string& prefix, SandboxLimits& limits);

class Sandbox {
 public:
  // Finds bwrap and runs `true` in it; throws Error (what to install or enable) when it cannot.
  static Sandbox open(const SandboxLimits& limits);

  const SandboxLimits& limits() const { return limits_; }
  // Runs one job to its end.
  SandboxResult run(const SandboxJob& job) const;

  // Runs jobs `parallel` at a time: submit, then poll for the finished ones (in any order).
  class Pool {
   public:
    Pool(const Sandbox& sandbox, int64_t parallel);
    ~Pool();
    void submit(int64_t tag, SandboxJob job);
    // The finished jobs' results; with `wait`, at least one (if any are queued or running).
    std::vector<std::pair<int64_t, SandboxResult>> poll(bool wait);
    int64_t outstanding() const { return static_cast<int64_t>(queue_.size() + running_.size()); }

   private:
    struct Running;
    const Sandbox& sandbox_;
    int64_t parallel_;
    std::deque<std::pair<int64_t, SandboxJob>> queue_;
    std::vector<std::unique_ptr<Running>> running_;
  };

 private:
  Sandbox(std::string bwrap, SandboxLimits limits) : bwrap_(std::move(bwrap)), limits_(limits) {}
  std::string bwrap_;
  SandboxLimits limits_;
};

}  // namespace fp8rl
