#include "tasks/worker_pool.h"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/check.h"
#include "io/config.h"
#include "io/json_depth.h"

namespace fp8rl {

namespace {

constexpr size_t kStderrTail = 4096;
// How long a worker that closed its stdout gets to exit (and finish its stderr) before the error.
constexpr double kExitGraceSeconds = 1.0;

std::string shorten(std::string_view s, size_t n = 200) {
  std::string out(s.substr(0, n));
  if (s.size() > n) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

void bind_plugin_config(ConfigSchema& schema, const std::string& prefix, PluginConfig& config,
                        const std::string& command_help, const std::string& workers_help) {
  const PluginConfig d;
  schema.add(prefix + ".command", &config.command, d.command, command_help);
  schema.add(prefix + ".workers", &config.workers, d.workers, workers_help).range(1, 256);
  schema.add(prefix + ".timeout_s", &config.timeout_s, d.timeout_s,
             "longest a worker owing replies may stay silent, in seconds").range(0.001, 1e6);
  schema.add(prefix + ".startup_timeout_s", &config.startup_timeout_s, d.startup_timeout_s,
             "the same before a worker's first reply (it may load a model first), in seconds").range(0.001, 1e6);
  schema.add(prefix + ".max_line_bytes", &config.max_line_bytes, d.max_line_bytes,
             "longest reply line accepted from a worker").range(64, int64_t{1} << 30);
}

WorkerPoolOptions plugin_pool_options(const PluginConfig& config, const std::string& prefix, const std::string& role,
                                      int rank) {
  WorkerPoolOptions o;
  o.role = role;
  o.config_key = prefix;
  o.command = config.command;
  o.workers = config.workers;
  o.timeout_s = config.timeout_s;
  o.startup_timeout_s = config.startup_timeout_s;
  o.max_line_bytes = config.max_line_bytes;
  o.extra_env = {fmt::format("FP8RL_RANK={}", rank)};
  return o;
}

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {
  FP8RL_REQUIRE(!options_.command.empty(), "{}.command is empty: give the worker's program and its arguments",
                options_.config_key);
  FP8RL_REQUIRE(options_.workers >= 1, "{}.workers must be >= 1, got {}", options_.config_key, options_.workers);
  FP8RL_REQUIRE(options_.timeout_s > 0 && std::isfinite(options_.timeout_s) && options_.startup_timeout_s > 0 &&
                    std::isfinite(options_.startup_timeout_s),
                "{}.timeout_s and startup_timeout_s must be > 0, got {} and {}", options_.config_key, options_.timeout_s,
                options_.startup_timeout_s);
  workers_.resize(static_cast<size_t>(options_.workers));
  for (int64_t i = 0; i < options_.workers; ++i) start_worker(i);
}

WorkerPool::~WorkerPool() {
  // All together: every stdin closed (a worker sees the end of its requests and may exit), half a
  // second for them to go, SIGTERM to the groups that remain, half a second more, then
  // ChildProcess::terminate kills what is left of each group and reaps it.
  const auto wait_all = [&](double seconds) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < until &&
           std::any_of(workers_.begin(), workers_.end(), [](Worker& w) { return w.process.running() && !w.process.poll_exit(); }))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  for (Worker& w : workers_) w.process.close_stdin();
  wait_all(0.5);
  for (Worker& w : workers_) w.process.signal_group(SIGTERM);
  wait_all(0.5);
  for (Worker& w : workers_) w.process.terminate(0);
}

void WorkerPool::start_worker(int64_t index) {
  Worker& w = workers_[static_cast<size_t>(index)];
  ChildSpec spec;
  spec.argv = options_.command;
  spec.role = fmt::format("{} {}", options_.role, index);
  spec.extra_env = options_.extra_env;
  spec.extra_env.push_back(fmt::format("FP8RL_WORKER_INDEX={}", index));
  spec.extra_env.push_back("PYTHONUNBUFFERED=1");  // a Python worker's replies are not held in a buffer
  w.process = ChildProcess::start(spec);
  w.out.clear();
  w.to_write.clear();
  w.written = 0;
  w.stdout_closed = w.stdin_closed = w.replied = false;
  w.progress = Clock::now();
}

std::string WorkerPool::describe(int64_t index) const {
  const Worker& w = workers_[static_cast<size_t>(index)];
  return fmt::format("{} {} (pid {}, `{}`)", options_.role, index, w.process.pid(), join(options_.command));
}

void WorkerPool::drain_stderr(Worker& w) {
  if (w.process.stderr_fd() < 0) return;
  w.process.read_some(w.process.stderr_fd(), w.err_tail, size_t{1} << 20);
  if (w.err_tail.size() > kStderrTail) w.err_tail.erase(0, w.err_tail.size() - kStderrTail);
}

void WorkerPool::fail(int64_t index, const std::string& id, const std::string& what) {
  Worker& w = workers_[static_cast<size_t>(index)];
  drain_stderr(w);
  std::string tail = w.err_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  std::string indented;
  for (size_t begin = 0; begin < tail.size();) {
    const size_t end = std::min(tail.find('\n', begin), tail.size());
    indented += "\n    " + tail.substr(begin, end - begin);
    begin = end + 1;
  }
  // Without a request of its own (a line that is not JSON, say), the error names what it owed.
  std::string request;
  if (!id.empty())
    request = fmt::format(", request '{}'", id);
  else if (!w.order.empty())
    request = fmt::format(", owing request '{}'{}", w.order.front(),
                          w.order.size() > 1 ? fmt::format(" and {} more", w.order.size() - 1) : "");
  throw Error(fmt::format("{}{}: {}; {}", describe(index), request, what,
                          tail.empty() ? "its stderr is empty" : "its stderr ends with:" + indented));
}

void WorkerPool::submit(int64_t worker, const nlohmann::json& request) {
  FP8RL_CHECK(request.is_object() && request.contains("id") && request["id"].is_string(),
              "a worker request needs a string id: {}", shorten(request.dump()));
  const std::string id = request["id"].get<std::string>();
  const int64_t index = worker % size();
  Worker& w = workers_[static_cast<size_t>(index)];
  FP8RL_CHECK(!w.lines.contains(id), "request id '{}' is outstanding already", id);
  // Bytes that are not UTF-8 (a response cut inside a character) are replaced, not refused.
  std::string line = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (w.order.empty()) w.progress = Clock::now();  // its silence counts from now
  w.order.push_back(id);
  w.to_write += line;
  w.lines.emplace(id, std::move(line));
  ++outstanding_;
}

void WorkerPool::take_lines(int64_t index, std::vector<WorkerReply>& replies) {
  Worker& w = workers_[static_cast<size_t>(index)];
  size_t begin = 0;
  for (size_t nl; (nl = w.out.find('\n', begin)) != std::string::npos; begin = nl + 1) {
    std::string_view line(w.out.data() + begin, nl - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines are allowed
    if (static_cast<int64_t>(line.size()) > options_.max_line_bytes)
      fail(index, "", fmt::format("wrote a line of {} bytes, more than {}.max_line_bytes = {}", line.size(),
                                  options_.config_key, options_.max_line_bytes));
    if (json_nesting_depth(line) > kMaxJsonDepth)
      fail(index, "", fmt::format("wrote a reply nested deeper than {} levels", kMaxJsonDepth));
    nlohmann::json reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded()) fail(index, "", fmt::format("wrote a line that is not JSON: {}", shorten(line)));
    if (!reply.is_object() || !reply.contains("id") || !reply["id"].is_string())
      fail(index, "", fmt::format("wrote a reply that is not a JSON object with a string \"id\": {}", shorten(line)));
    const std::string id = reply["id"].get<std::string>();
    const auto it = std::find(w.order.begin(), w.order.end(), id);
    if (it == w.order.end())
      fail(index, id, answered_.contains(id) ? "answered this request twice" : "answered a request it was not sent");
    w.order.erase(it);
    w.lines.erase(id);
    answered_.insert(id);
    --outstanding_;
    w.progress = Clock::now();
    w.replied = true;
    replies.push_back({id, std::move(reply), index, false});
  }
  w.out.erase(0, begin);
  if (static_cast<int64_t>(w.out.size()) > options_.max_line_bytes)
    fail(index, w.order.empty() ? "" : w.order.front(),
         fmt::format("wrote more than {}.max_line_bytes = {} bytes without a newline: {}", options_.config_key,
                     options_.max_line_bytes, shorten(w.out)));
}

void WorkerPool::check_timeouts(std::vector<WorkerReply>& replies) {
  const auto now = Clock::now();
  for (int64_t i = 0; i < size(); ++i) {
    Worker& w = workers_[static_cast<size_t>(i)];
    if (w.order.empty() || std::chrono::duration<double>(now - w.progress).count() < silence_allowed(w)) continue;
    const std::string id = w.order.front();
    if (!options_.restart_on_timeout)
      fail(i, id,
           w.replied ? fmt::format("no reply within {}.timeout_s = {} s ({}.on_timeout: zero scores it 0 instead)",
                                   options_.config_key, options_.timeout_s, options_.config_key)
                     : fmt::format("no first reply within {}.startup_timeout_s = {} s", options_.config_key,
                                   options_.startup_timeout_s));
    // A timed-out reply; the worker is replaced, and gets the rest of its requests again.
    std::vector<std::string> rest;
    for (size_t k = 1; k < w.order.size(); ++k) rest.push_back(w.lines.at(w.order[k]));
    w.process.terminate(0.2);
    w.order.pop_front();
    w.lines.erase(id);
    answered_.insert(id);
    --outstanding_;
    replies.push_back({id, nlohmann::json(), i, true});
    start_worker(i);
    for (std::string& line : rest) w.to_write += line;
  }
}

std::vector<WorkerReply> WorkerPool::poll(double wait_seconds) {
  std::vector<WorkerReply> replies;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_seconds));
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int64_t, int>> owner;  // (worker, 0 stdin / 1 stdout / 2 stderr)
    double next_deadline = wait_seconds;
    for (int64_t i = 0; i < size(); ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      if (w.written < w.to_write.size() && w.process.stdin_fd() >= 0) {
        fds.push_back({w.process.stdin_fd(), POLLOUT, 0});
        owner.emplace_back(i, 0);
      }
      if (w.process.stdout_fd() >= 0) {
        fds.push_back({w.process.stdout_fd(), POLLIN, 0});
        owner.emplace_back(i, 1);
      }
      if (w.process.stderr_fd() >= 0) {
        fds.push_back({w.process.stderr_fd(), POLLIN, 0});
        owner.emplace_back(i, 2);
      }
      if (!w.order.empty())
        next_deadline = std::min(
            next_deadline, silence_allowed(w) - std::chrono::duration<double>(Clock::now() - w.progress).count());
    }
    const double left = std::chrono::duration<double>(until - Clock::now()).count();
    const double wait = replies.empty() ? std::max(0.0, std::min(left, next_deadline)) : 0.0;
    const int timeout_ms = static_cast<int>(std::ceil(wait * 1000));
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    FP8RL_REQUIRE(ready >= 0 || errno == EINTR, "{}s: poll failed: {}", options_.role, std::strerror(errno));
    for (size_t k = 0; ready > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const auto [i, stream] = owner[k];
      Worker& w = workers_[static_cast<size_t>(i)];
      if (stream == 0) {
        try {
          w.written = w.process.write_some(w.to_write, w.written);
        } catch (const Error&) {
          w.stdin_closed = true;  // it exited, most likely: the check below says how
        }
        if (w.written == w.to_write.size()) {
          w.to_write.clear();
          w.written = 0;
        }
      } else if (stream == 1) {
        // At most a line's worth beyond the limit per read: a flood is refused, not buffered.
        if (!w.process.read_some(w.process.stdout_fd(), w.out, static_cast<size_t>(options_.max_line_bytes) + 1))
          w.stdout_closed = true;
        take_lines(i, replies);
      } else {
        drain_stderr(w);
      }
    }
    // A worker gone (stdout closed or process ended) fails the run: the run still needs it.
    for (int64_t i = 0; i < size(); ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      if (!w.stdout_closed && !w.stdin_closed && !w.process.poll_exit()) continue;
      const std::optional<int> status = w.process.wait_exit(kExitGraceSeconds);
      const std::string how = status ? describe_exit_status(*status) : w.stdout_closed ? "closed its stdout" : "closed its stdin";
      fail(i, w.order.empty() ? "" : w.order.front(),
           w.order.empty() ? fmt::format("{} while the run still needed it", how)
                           : fmt::format("{} before answering", how));
    }
    check_timeouts(replies);
    if (outstanding_ == 0) answered_.clear();  // a later answer to any of them is an unknown id
    if (!replies.empty() || Clock::now() >= until) return replies;
  }
}

std::vector<WorkerReply> WorkerPool::call(const std::vector<nlohmann::json>& requests) {
  std::unordered_map<std::string, size_t> slot;
  for (size_t i = 0; i < requests.size(); ++i) {
    submit(static_cast<int64_t>(i), requests[i]);
    slot.emplace(requests[i]["id"].get<std::string>(), i);
  }
  std::vector<WorkerReply> out(requests.size());
  while (outstanding_ > 0)
    for (WorkerReply& r : poll(options_.timeout_s)) out[slot.at(r.id)] = std::move(r);
  return out;
}

}  // namespace fp8rl
