// One small thread pool for the loader, the analysis and the studio's timeline index: the one
// way this project runs independent items on several threads (no torch, no Qt).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace ulysses::prof {

// Runs fn(0) .. fn(n-1), each index once, on up to `threads` threads (0 = one per core); the
// calling thread takes part. If no thread can be started, the calling thread does it all. If
// fn throws (std::bad_alloc on a trace too big for memory), the exception of the lowest failing
// index is rethrown here, instead of ending the process from a worker: on several threads once
// every item has run, on one thread at once (the first failure is then the lowest).
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn);

// The same, for long work with a progress bar: the items run on up to `threads` workers while
// the calling thread calls progress() every `every` (and once more when all are done), so a
// progress report never waits for a big item. progress runs on the calling thread only; an
// exception from it is rethrown after the workers are done. Without a worker thread the calling
// thread runs the items itself and calls progress() between them.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn,
                  const std::function<void()>& progress, std::chrono::milliseconds every);

}  // namespace ulysses::prof
