// A small, persistent thread pool for the kernels' outer loops.
//
// parallel_for(n, fn) runs fn(i) for every task index i in [0, n) on up to `threads` threads
// (the caller is one of them) and returns when all are done. Kernels split their work into tasks
// whose outputs do not overlap and whose arithmetic does not depend on which thread runs them,
// so results are bit-identical for every thread count; only the order of execution changes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp8rl {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // starts threads - 1 workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, n) on min(max_threads, size(), n) threads (max_threads <= 0: all).
  // Tasks are handed out in index order from a shared counter. A parallel_for called from inside
  // a task (nested) runs its tasks inline, in index order, on the calling thread. The first
  // exception thrown by a task is rethrown here.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn, int max_threads = 0);

 private:
  void worker_loop(int worker_index);
  void run_tasks();
  // Wakes the sleepers of `cv` if `sleepers` says there may be some (see thread_pool.cc).
  void wake(std::condition_variable& cv, const std::atomic<int>& sleepers);

  std::vector<std::thread> workers_;
  // The hand-off is lock-free: a decode step issues hundreds of short parallel_fors, and a lock
  // per task or a futex wake-up per call would cost more than the work of many of them. Threads
  // poll for a while, then sleep on a condition variable; mutex_ only orders those sleeps.
  std::mutex mutex_;
  std::condition_variable wake_;  // workers wait for a new job
  std::condition_variable done_;  // the caller waits for the workers
  std::atomic<int> sleeping_workers_ = 0, sleeping_callers_ = 0;
  // (job number << 16) | workers taking part; one word, so a worker reads both consistently.
  std::atomic<uint64_t> job_word_ = 0;
  std::atomic<bool> stopping_ = false;
  // The current job: written before job_word_ is published, read by the workers taking part,
  // which the caller waits for before it writes the next one.
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_size_ = 0;
  std::atomic<int64_t> next_task_ = 0;
  std::atomic<int> busy_workers_ = 0;  // workers still inside the current job
  std::exception_ptr error_;           // guarded by mutex_
};

// The hardware thread count (at least 1).
int hardware_threads();

// The process-wide pool the kernels use: FP8RL_NUM_THREADS threads when that is set, else
// max(2, hardware_threads()). Kernels asked for "all threads" (threads = 0) use
// min(size, hardware_threads()).
ThreadPool& kernel_thread_pool();

// True while this thread runs a task of a parallel_for (of any pool; a nested parallel_for runs
// its tasks inline, so they count too).
bool in_pool_task();

// fn(begin, end) for the ranges [0, chunk), [chunk, 2 chunk), ... covering [0, n), as tasks of
// kernel_thread_pool(). The ranges depend only on n and chunk, never on the thread count.
template <typename Fn>
void parallel_for_ranges(int64_t n, int64_t chunk, const Fn& fn) {
  kernel_thread_pool().parallel_for((n + chunk - 1) / chunk, [&](int64_t t) {
    const int64_t begin = t * chunk;
    fn(begin, n - begin < chunk ? n : begin + chunk);
  });
}

}  // namespace fp8rl
