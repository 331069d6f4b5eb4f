#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>

namespace fp8rl {

namespace {
// Set while this thread runs tasks of a parallel_for (of any pool): a parallel_for issued from
// inside a task runs its tasks inline on the calling thread instead of waiting for a pool that
// is busy with the outer job.
thread_local bool t_in_task = false;

struct InTask {
  bool saved = t_in_task;
  InTask() { t_in_task = true; }
  ~InTask() { t_in_task = saved; }
};

// Polls `ready` for up to kSpin before the caller falls back to sleeping on a condition variable;
// true if it became ready. The pause keeps a spinning hyperthread from starving its sibling.
constexpr std::chrono::microseconds kSpin{50};
template <typename Ready>
bool spin_until(const Ready& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}
}  // namespace

bool in_pool_task() { return t_in_task; }

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// A sleeper registers (sleepers + 1) under mutex_ before it checks its condition in wait(); the
// waker publishes its change before it reads `sleepers` (both sequentially consistent), so either
// the sleeper sees the change or the waker sees the sleeper and notifies under the mutex.
void ThreadPool::wake(std::condition_variable& cv, const std::atomic<int>& sleepers) {
  if (sleepers.load() == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  cv.notify_all();
}

// Takes task indices from the shared counter until none are left.
void ThreadPool::run_tasks() {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1);
    if (task >= job_size_) return;
    try {
      const InTask in_task;
      (*job_)(task);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(job_size_);  // stop handing out work
    }
  }
}

void ThreadPool::worker_loop(int worker_index) {
  uint64_t seen = 0;  // the job word last handled
  for (;;) {
    const auto woken = [&] { return stopping_.load() || job_word_.load() != seen; };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleeping_workers_;
      wake_.wait(lock, woken);
      --sleeping_workers_;
    }
    if (stopping_) return;
    seen = job_word_.load();
    if (worker_index > static_cast<int>(seen & 0xFFFF)) continue;  // not needed for this job
    run_tasks();
    if (--busy_workers_ == 0) wake(done_, sleeping_callers_);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn, int max_threads) {
  if (n <= 0) return;
  int threads = max_threads <= 0 ? size() : std::min(max_threads, size());
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1 || t_in_task) {
    const InTask in_task;
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  job_ = &fn;
  job_size_ = n;
  error_ = nullptr;
  next_task_.store(0);
  busy_workers_.store(threads - 1);
  job_word_.store(((job_word_.load() >> 16) + 1) << 16 | static_cast<uint64_t>(threads - 1));
  wake(wake_, sleeping_workers_);
  run_tasks();
  const auto done = [&] { return busy_workers_.load() == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++sleeping_callers_;
    done_.wait(lock, done);
    --sleeping_callers_;
  }
  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

int hardware_threads() {
  // Read once: glibc answers hardware_concurrency() by opening /sys/devices/system/cpu/online,
  // and kernels ask on every call (100,478 opens in a 3-step GRPO run of the `small` model).
  static const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return threads;
}

ThreadPool& kernel_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("FP8RL_NUM_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    // At least two threads, so that the thread-count invariance is exercised even on a
    // one-CPU machine; kernels use no more than hardware_threads() unless asked to.
    return std::max(2, hardware_threads());
  }());
  return pool;
}

}  // namespace fp8rl
