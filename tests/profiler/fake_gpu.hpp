// A fake GPU activity source that behaves like CUPTI where the profiler depends on it: a
// per-thread stack of external ids (push/pop_external_id), and for each launch() a
// correlation id shared by three records delivered at the next flush(): the external
// correlation record (when an id is pushed on the launching thread), the cudaLaunchKernel
// runtime record (host time of the launch, launching thread) and the kernel with the
// timestamps the test chose. Used by tests/profiler and tests/ui_trace.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/gpu_activity.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ut {

class FakeCupti final : public ulysses::prof::GpuActivitySource {
 public:
  explicit FakeCupti(ulysses::prof::GpuActivitySink* s) : sink_(s) {}
  bool start(std::string*) override { return started = true; }
  void stop() override { started = false; }
  void push_external_id(uint64_t id) override {
    std::lock_guard<std::mutex> lk(mu_);
    stacks_[std::this_thread::get_id()].push_back(id);
  }
  void pop_external_id() override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& st = stacks_[std::this_thread::get_id()];
    if (!st.empty()) st.pop_back();
  }
  void flush() override {
    std::vector<Launch> ready;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& l : pending_) {
        if (l.hold > 0) {
          --l.hold;
          held_.push_back(l);
        } else {
          ready.push_back(l);
        }
      }
      pending_.swap(held_);
      held_.clear();
    }
    for (const auto& l : ready) {  // CUPTI order: external correlation, API record, kernel
      if (l.ext) sink_->on_external_correlation(l.kernel.correlation, static_cast<int64_t>(l.ext));
      if (l.has_api) sink_->on_runtime(l.api);
      sink_->on_kernel(l.kernel);
    }
  }

  // A kernel launched now by the calling thread that runs on the GPU over [t0, t1) on
  // `stream`; delivered `hold` flushes later than the next one; api = false: no runtime
  // record (a driver-API launch, RUNTIME kind only). Returns its correlation id.
  int64_t launch(const std::string& name, int64_t t0, int64_t t1, int32_t stream, int hold = 0, bool api = true) {
    std::lock_guard<std::mutex> lk(mu_);
    Launch l;
    l.kernel.correlation = next_corr_++;
    l.kernel.start_ns = t0;
    l.kernel.end_ns = t1;
    l.kernel.stream = stream;
    l.kernel.name = name;
    l.api.correlation = l.kernel.correlation;
    l.api.start_ns = ulysses::prof::Tracer::now_ns();
    l.api.end_ns = l.api.start_ns + 1;
    l.api.tid = static_cast<int64_t>(::syscall(SYS_gettid));
    l.api.name = "cudaLaunchKernel";
    auto& st = stacks_[std::this_thread::get_id()];
    l.ext = st.empty() ? 0 : st.back();
    l.hold = hold;
    l.has_api = api;
    pending_.push_back(l);
    return l.kernel.correlation;
  }
  // External id on top of the calling thread's stack (0: none).
  uint64_t top() {
    std::lock_guard<std::mutex> lk(mu_);
    auto& st = stacks_[std::this_thread::get_id()];
    return st.empty() ? 0 : st.back();
  }

  bool started = false;

 private:
  struct Launch {
    ulysses::prof::KernelRecord kernel;
    ulysses::prof::RuntimeRecord api;
    uint64_t ext = 0;
    int hold = 0;
    bool has_api = true;
  };
  ulysses::prof::GpuActivitySink* sink_;
  std::mutex mu_;
  std::map<std::thread::id, std::vector<uint64_t>> stacks_;
  std::vector<Launch> pending_, held_;
  int64_t next_corr_ = 100;
};

// TracerOptions::gpu_source that builds a FakeCupti and hands it to *out.
inline std::function<std::unique_ptr<ulysses::prof::GpuActivitySource>(ulysses::prof::GpuActivitySink*)>
fake_cupti_factory(FakeCupti** out) {
  return [out](ulysses::prof::GpuActivitySink* s) {
    auto g = std::make_unique<FakeCupti>(s);
    *out = g.get();
    return std::unique_ptr<ulysses::prof::GpuActivitySource>(std::move(g));
  };
}

}  // namespace ut
