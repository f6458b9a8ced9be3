// parallel_for (ulysses/profiler/parallel.hpp): the pool the loader and the studio's timeline
// index share. Each index once, whatever the thread count; the lowest failing index's exception,
// not the first thrown; progress on the calling thread while the items run, and once at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/parallel.hpp"

using ulysses::prof::parallel_for;

namespace {
constexpr std::chrono::milliseconds kEvery(5);

// Runs parallel_for with or without progress (then counting the reports made off this thread).
void run(bool with_progress, size_t n, int threads, const std::function<void(size_t)>& fn, int* reports = nullptr,
         int* off_thread = nullptr) {
  if (!with_progress) {
    parallel_for(n, threads, fn);
    return;
  }
  const auto self = std::this_thread::get_id();
  parallel_for(
      n, threads, fn,
      [&] {
        if (reports) ++*reports;
        if (off_thread && std::this_thread::get_id() != self) ++*off_thread;
      },
      kEvery);
}
}  // namespace

TEST(ParallelFor, EachIndexRunsOnceOnAnyNumberOfThreads) {
  for (bool progress : {false, true})
    for (int threads : {0, 1, 2, 3, 8})
      for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
        std::vector<std::atomic<int>> hits(n);
        run(progress, n, threads, [&](size_t i) { ++hits[i]; });
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n << ", threads " << threads
                                       << (progress ? ", with progress" : "");
      }
}

TEST(ParallelFor, MoreThreadsThanOneAreUsedWhenAsked) {
  // Two items that each wait for the other to start can finish only if they run at once.
  for (bool progress : {false, true}) {
    std::atomic<int> started{0};
    std::atomic<bool> both{true};
    run(progress, 2, 2, [&](size_t) {
      ++started;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started.load() < 2)
        if (std::chrono::steady_clock::now() > until) {
          both = false;
          return;
        }
    });
    EXPECT_TRUE(both.load()) << (progress ? "with progress" : "without progress");
  }
}

TEST(ParallelFor, TheLowestFailingIndexIsRethrownAfterEveryItemRan) {
  for (bool progress : {false, true})
    for (int threads : {1, 3}) {
      std::atomic<int> ran{0};
      try {
        run(progress, 100, threads, [&](size_t i) {
          ++ran;
          // 41 fails last in time (on several threads): the lowest index wins, not the first thrown.
          if (i == 41) std::this_thread::sleep_for(std::chrono::milliseconds(threads > 1 || progress ? 50 : 0));
          if (i == 97 || i == 41 || i == 63) throw std::runtime_error("item " + std::to_string(i));
        });
        ADD_FAILURE() << "no exception, threads " << threads;
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "item 41") << "threads " << threads;
      }
      // On several threads (or with progress, where the items run on workers) every item runs;
      // on one thread the loop stops at the first failure, which is then the lowest.
      EXPECT_EQ(ran.load(), threads == 1 && !progress ? 42 : 100)
          << "threads " << threads << (progress ? ", with progress" : "");
    }
}

TEST(ParallelFor, ProgressRunsOnTheCallingThreadWhileItemsRunAndOnceAtTheEnd) {
  for (int threads : {1, 2, 4}) {
    int reports = 0, off_thread = 0;
    // One slow item: several reports must come while it runs (every 5 ms for 150 ms).
    run(
        true, 4, threads,
        [&](size_t i) {
          if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
        },
        &reports, &off_thread);
    EXPECT_EQ(off_thread, 0) << "threads " << threads;
    EXPECT_GE(reports, 3) << "threads " << threads;  // ~30 due; at least two during the item and the last
  }
  int reports = 0;
  parallel_for(
      0, 2, [](size_t) {}, [&] { ++reports; }, kEvery);
  EXPECT_EQ(reports, 1);  // nothing to do: still the final report
}

TEST(ParallelFor, AProgressErrorIsRethrownOnceTheItemsAreDone) {
  std::atomic<int> ran{0};
  int calls = 0;
  EXPECT_THROW(parallel_for(
                   50, 2,
                   [&](size_t) {
                     std::this_thread::sleep_for(std::chrono::milliseconds(1));
                     ++ran;
                   },
                   [&] {
                     ++calls;
                     throw std::logic_error("progress");
                   },
                   kEvery),
               std::logic_error);
  EXPECT_EQ(ran.load(), 50);
  EXPECT_EQ(calls, 1);  // not called again after it threw
}
