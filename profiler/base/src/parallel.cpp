#include "ulysses/profiler/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace ulysses::prof {

namespace {

std::size_t thread_count(std::size_t n, int threads) {
  const std::size_t t =
      threads > 0 ? static_cast<std::size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  return std::min(t, n);
}

// Items taken in index order by whoever is free; each failure kept at its index.
struct Items {
  std::size_t n;
  const std::function<void(std::size_t)>& fn;
  std::vector<std::exception_ptr> err;
  std::atomic<std::size_t> next{0};
  Items(std::size_t n_, const std::function<void(std::size_t)>& fn_) : n(n_), fn(fn_), err(n_) {}
  // Runs one item; false when none is left.
  bool run_one() {
    const std::size_t i = next++;
    if (i >= n) return false;
    try {
      fn(i);
    } catch (...) {
      err[i] = std::current_exception();
    }
    return true;
  }
  void rethrow_first() const {
    for (const auto& e : err)
      if (e) std::rethrow_exception(e);
  }
};

// Starts up to `count` threads running work(); fewer when the system has no more to give.
std::vector<std::thread> start(std::size_t count, const std::function<void()>& work) {
  std::vector<std::thread> pool;
  for (std::size_t k = 0; k < count; ++k) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no more threads: the ones started do it all
      break;
    }
  }
  return pool;
}

}  // namespace

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn) {
  const std::size_t t = thread_count(n, threads);
  if (t <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Items items(n, fn);
  auto work = [&] {
    while (items.run_one()) {
    }
  };
  std::vector<std::thread> pool = start(t - 1, work);
  work();
  for (auto& th : pool) th.join();
  items.rethrow_first();
}

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn,
                  const std::function<void()>& progress, std::chrono::milliseconds every) {
  Items items(n, fn);
  std::mutex mu;
  std::condition_variable cv;
  std::size_t workers_done = 0;
  auto work = [&] {
    while (items.run_one()) {
    }
    std::lock_guard<std::mutex> lock(mu);
    ++workers_done;
    cv.notify_one();
  };
  std::vector<std::thread> pool = start(thread_count(n, threads), work);
  std::exception_ptr progress_error;
  auto report = [&] {
    if (progress_error) return;
    try {
      progress();
    } catch (...) {
      progress_error = std::current_exception();
    }
  };
  if (pool.empty()) {
    while (items.run_one()) report();
  } else {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, every, [&] { return workers_done == pool.size(); })) {
      lock.unlock();
      report();
      lock.lock();
    }
  }
  for (auto& th : pool) th.join();
  report();
  items.rethrow_first();
  if (progress_error) std::rethrow_exception(progress_error);
}

}  // namespace ulysses::prof
