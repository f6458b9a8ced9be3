// Counts the live and peak bytes of CPU tensor allocations made while a MemoryTracker is
// alive, on the thread that created it and on every thread that inherits its
// ThreadLocalState (autograd workers, at::launch tasks). It installs a
// c10::MemoryReportingInfoBase as the thread's PROFILER_STATE debug info, the hook the
// PyTorch profiler's profile_memory uses: c10's DefaultCPUAllocator reports every
// allocation and free to it while memoryProfilingEnabled() is true.
//
//   MemoryTracker mt;                 // starts counting at zero
//   auto y = f(x);                    // ... work ...
//   mt.peak_bytes(), mt.current_bytes();
//
// What it sees: tensor storage from the default CPU allocator (including pinned-memory-free
// CPU tensors made by autograd in backward). What it does not: memory freed on a thread that
// does not inherit the tracker's state (the free is not reported, so current stays high),
// blocks allocated before the tracker started (their free is ignored), CUDA memory (use the
// caching allocator's statistics), malloc outside c10's allocator.
// Trackers nest: an inner tracker forwards every report to the one it shadows.
#pragma once

#include <cstdint>
#include <memory>

namespace c10 {
class DebugInfoGuard;
}

namespace ulysses {

namespace detail {
class MemoryReporter;
}

class MemoryTracker {
 public:
  MemoryTracker();
  // Must run on the thread that constructed the tracker (it pops the thread's debug info).
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  int64_t current_bytes() const;          // allocated since construction and not yet freed
  int64_t peak_bytes() const;             // highest current_bytes since construction or reset_peak()
  int64_t allocated_bytes_total() const;  // sum of every allocation seen
  int64_t allocations() const;            // number of allocations seen
  void reset_peak();                      // peak := current

 private:
  std::shared_ptr<detail::MemoryReporter> rep_;
  std::unique_ptr<c10::DebugInfoGuard> guard_;
};

}  // namespace ulysses
