// The kernel thread pool: every task runs once, for any thread count, and nested calls run inline.
// ctest-file-label: quick
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace fp8rl {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceAndNestedCallsInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(100);
  pool.parallel_for(10, [&](int64_t outer) {
    // Nested: runs inline on this thread, in index order.
    int64_t expected = 0;
    pool.parallel_for(10, [&](int64_t inner) {
      EXPECT_EQ(expected++, inner);
      hits[static_cast<size_t>(outer * 10 + inner)]++;
    });
  });
  for (const auto& h : hits) EXPECT_EQ(1, h.load());
}

TEST(ThreadPool, RethrowsTheFirstTaskError) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(8, [](int64_t i) {
    if (i == 5) throw std::runtime_error("task 5");
  }),
               std::runtime_error);
  int ran = 0;
  pool.parallel_for(4, [&](int64_t) { ++ran; }, 1);  // still usable afterwards
  EXPECT_EQ(4, ran);
}

}  // namespace
}  // namespace fp8rl
