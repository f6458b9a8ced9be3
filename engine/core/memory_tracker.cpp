// CPU allocation tracker through c10's memory-reporting debug info (see memory_tracker.hpp).
#include "memory_tracker.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include "torch_compat.hpp"

namespace ulysses {
namespace detail {

class MemoryReporter : public c10::MemoryReportingInfoBase {
 public:
  explicit MemoryReporter(std::shared_ptr<c10::MemoryReportingInfoBase> parent) : parent_(std::move(parent)) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, compat::MemReportTotal total_allocated,
                         compat::MemReportTotal total_reserved, c10::Device device) override {
    if (parent_ && parent_->memoryProfilingEnabled())
      parent_->reportMemoryUsage(ptr, alloc_size, total_allocated, total_reserved, device);
    if (device.type() != c10::DeviceType::CPU || alloc_size == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    if (alloc_size > 0) {
      live_[ptr] = alloc_size;
      current_ += alloc_size;
      total_ += alloc_size;
      ++count_;
      if (current_ > peak_) peak_ = current_;
    } else {
      auto it = live_.find(ptr);
      if (it == live_.end()) return;  // allocated before this tracker started
      current_ -= it->second;
      live_.erase(it);
    }
  }
  bool memoryProfilingEnabled() const override { return true; }

  int64_t current() const {
    std::lock_guard<std::mutex> g(mu_);
    return current_;
  }
  int64_t peak() const {
    std::lock_guard<std::mutex> g(mu_);
    return peak_;
  }
  int64_t total() const {
    std::lock_guard<std::mutex> g(mu_);
    return total_;
  }
  int64_t count() const {
    std::lock_guard<std::mutex> g(mu_);
    return count_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> g(mu_);
    peak_ = current_;
  }

 private:
  std::shared_ptr<c10::MemoryReportingInfoBase> parent_;
  mutable std::mutex mu_;
  std::unordered_map<void*, int64_t> live_;
  int64_t current_ = 0, peak_ = 0, total_ = 0, count_ = 0;
};

}  // namespace detail

namespace {
std::shared_ptr<c10::MemoryReportingInfoBase> current_reporter() {
  // ThreadLocalDebugInfo::get returns a raw pointer; the owning shared_ptr lives in the
  // thread's debug-info chain, which outlives any tracker nested inside it.
  auto* base = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  auto* rep = dynamic_cast<c10::MemoryReportingInfoBase*>(base);
  if (!rep) return nullptr;
  return std::shared_ptr<c10::MemoryReportingInfoBase>(rep, [](c10::MemoryReportingInfoBase*) {});
}
}  // namespace

MemoryTracker::MemoryTracker()
    : rep_(std::make_shared<detail::MemoryReporter>(current_reporter())),
      guard_(std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, rep_)) {}

MemoryTracker::~MemoryTracker() = default;

int64_t MemoryTracker::current_bytes() const { return rep_->current(); }
int64_t MemoryTracker::peak_bytes() const { return rep_->peak(); }
int64_t MemoryTracker::allocated_bytes_total() const { return rep_->total(); }
int64_t MemoryTracker::allocations() const { return rep_->count(); }
void MemoryTracker::reset_peak() { rep_->reset_peak(); }

}  // namespace ulysses
