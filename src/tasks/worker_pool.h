// Long-lived plug-in worker processes spoken to in JSON Lines: reward functions
// (tasks/reward_plugin.h) and multi-turn environments (tasks/environment_plugin.h) written in any
// language. Each worker reads one request per line on its stdin and writes one reply per line on
// its stdout, in any order; every request and reply is a JSON object with a string "id".
//
// Nothing a worker does becomes a silent result. Each of these is an Error naming the worker
// (its index, pid and command), the request id where there is one, and the last 4 KiB of the
// worker's stderr: it cannot be started; it exits (or closes its stdout) while the run needs it;
// a reply line that is not a JSON object with a string "id"; an id it was not sent, or answers
// twice; a line longer than max_line_bytes; no reply to a request for timeout_s seconds of the
// worker's silence, or startup_timeout_s before its first reply, which may load a model first
// (unless restart_on_timeout, which gives that request a timed-out reply, restarts the worker and
// sends it the rest of its requests again). What a reply must hold
// beyond its id is the caller's to check (fail() makes its error in the same form).
//
// Requests are written as UTF-8 (bytes that are not, such as a response cut inside a character,
// become U+FFFD). The workers end with the pool: stdin closed, then SIGTERM, then SIGKILL, each
// with its own process group (io/child_process.h), on every path out, errors included.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "io/child_process.h"

namespace fp8rl {

class ConfigSchema;

// The recipe keys every plug-in has (task.reward.*, task.environment.*).
struct PluginConfig {
  std::vector<std::string> command;  // PREFIX.command: the worker's program and arguments (empty: none)
  int64_t workers = 2;               // PREFIX.workers: processes per rank
  double timeout_s = 60;             // PREFIX.timeout_s: longest silence of a worker owing a reply
  double startup_timeout_s = 600;    // PREFIX.startup_timeout_s: the same before a worker's first reply
  int64_t max_line_bytes = int64_t{1} << 20;  // PREFIX.max_line_bytes: longest reply line
};
// Registers PREFIX.command (with `command_help`), workers (with `workers_help`), timeout_s,
// startup_timeout_s and max_line_bytes.
void bind_plugin_config(ConfigSchema& schema, const std::string& prefix, PluginConfig& config,
                        const std::string& command_help, const std::string& workers_help);

struct WorkerPoolOptions {
  std::string role = "worker";      // in messages: "reward worker 2"
  std::string config_key = "task";  // the recipe section the options come from, for messages
  std::vector<std::string> command;
  int64_t workers = 1;
  double timeout_s = 60;
  double startup_timeout_s = 600;  // before a worker's first reply
  bool restart_on_timeout = false;
  int64_t max_line_bytes = int64_t{1} << 20;
  std::vector<std::string> extra_env;  // "NAME=value", besides FP8RL_WORKER_INDEX and PYTHONUNBUFFERED=1
};

struct WorkerReply {
  std::string id;
  nlohmann::json body;  // the reply object; null when timed_out
  int64_t worker = 0;
  bool timed_out = false;
};

// The pool of `config` under recipe section `prefix` (e.g. "task.reward"), its workers named
// `role` in messages and told their rank by FP8RL_RANK.
WorkerPoolOptions plugin_pool_options(const PluginConfig& config, const std::string& prefix, const std::string& role,
                                      int rank);

class WorkerPool {
 public:
  // Starts every worker; throws Error if one cannot be started.
  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  const WorkerPoolOptions& options() const { return options_; }
  int64_t size() const { return static_cast<int64_t>(workers_.size()); }

  // Queues `request` (an object whose string "id" is not outstanding) for worker
  // `worker % size()`; it is written as the worker's stdin takes it, during poll().
  void submit(int64_t worker, const nlohmann::json& request);
  // Writes queued requests and reads replies for up to `wait_seconds` (0: what is there now),
  // returning as soon as at least one reply arrived. Each outstanding request is answered once.
  std::vector<WorkerReply> poll(double wait_seconds);
  int64_t outstanding() const { return outstanding_; }

  // Sends request i to worker i % size() and waits for every reply; returns them in request order.
  std::vector<WorkerReply> call(const std::vector<nlohmann::json>& requests);

  // Throws the Error for `what` about worker `worker`'s reply to request `id` (empty: none).
  [[noreturn]] void fail(int64_t worker, const std::string& id, const std::string& what);

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    ChildProcess process;
    std::string out;          // stdout bytes not yet a whole line
    std::string err_tail;     // the last bytes of its stderr
    std::string to_write;     // requests queued for its stdin
    size_t written = 0;       // of to_write
    std::deque<std::string> order;                        // unanswered ids, in the order sent
    std::unordered_map<std::string, std::string> lines;   // id -> its request line (for a restart)
    Clock::time_point progress;  // its last reply, or when it was last idle and got a request
    bool stdout_closed = false, stdin_closed = false;
    bool replied = false;  // since it started: until then its silence may last startup_timeout_s
  };

  void start_worker(int64_t index);
  void drain_stderr(Worker& w);
  std::string describe(int64_t index) const;
  // Parses the whole lines of w.out into `replies`.
  void take_lines(int64_t index, std::vector<WorkerReply>& replies);
  // The oldest unanswered request of a worker silent for timeout_s: an error, or a timed-out reply.
  void check_timeouts(std::vector<WorkerReply>& replies);
  double silence_allowed(const Worker& w) const { return w.replied ? options_.timeout_s : options_.startup_timeout_s; }

  WorkerPoolOptions options_;
  std::vector<Worker> workers_;
  std::unordered_set<std::string> answered_;  // ids answered (a second answer is an error)
  int64_t outstanding_ = 0;
};

}  // namespace fp8rl
