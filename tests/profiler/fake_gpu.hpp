// A fake GPU activity source that behaves like CUPTI where the profiler depends on it: a
// per-thread stack of external ids (push/pop_external_id), and for each launch() a
// correlation id shared by three records delivered at the next flush(): the external
// correlation record (when an id is pushed on the launching thread), the API record
// (cudaLaunchKernel, or cuLaunchKernel for a driver-API launch: host time of the launch,
// launching thread) and the kernel with the timestamps the test chose. It follows the
// profiler's CUPTI setup (cupti_setup.hpp) for the CUPTI version it plays, as CUPTI would
// answer it:
//   - thread ids are pthread_self() values unless system thread ids were asked for;
//   - a driver-API launch has an API record, and so an external correlation record, only when
//     the DRIVER kind is on;
//   - its clock runs kCuptiAhead ahead of the host's, and `drift` faster (0: not): records are
//     on the host clock only through the timestamp callback or the source's calibration
//     (GpuClock, at start and at each recalibrate(); records convert when delivered, as
//     CUPTI's buffers do);
//   - with the timestamp callback registered, CUPTI 12.6 through 13.0 report zero kernel times;
//   - stop() delivers every record, held ones too (a forced flush); flush() holds back
//     launches given hold > 0 (buffers not yet complete).
// Used by tests/profiler and tests/ui_trace.
#pragma once

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/cupti_setup.hpp"
#include "ulysses/profiler/gpu_activity.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ut {

// How a kernel is launched: cudaLaunchKernel; cuLaunchKernel (NCCL, Triton); or with no API
// record at all but an external id (the records of one launch split over buffers).
enum class LaunchApi { Runtime, Driver, NoApiRecord };

class FakeCupti final : public ulysses::prof::GpuActivitySource {
 public:
  static constexpr int64_t kCuptiAhead = 7'000'000'000;  // CUPTI clock - host clock
  // api_version: the CUPTI library it plays (cuptiGetVersion). 130100 (13.1): the timestamp
  // callback works, so records carry the host times the test chose exactly.
  explicit FakeCupti(ulysses::prof::GpuActivitySink* s, uint32_t api_version = 130100)
      : sink_(s), api_version_(api_version) {}
  bool start(std::string*) override {
    setup = ulysses::prof::cupti_setup(api_version_);
    origin_ = ulysses::prof::Tracer::now_ns();
    std::lock_guard<std::mutex> lk(mu_);
    clock_ = setup.timestamp_callback
                 ? ulysses::prof::GpuClock{}
                 : ulysses::prof::GpuClock::calibrate(&ulysses::prof::Tracer::now_ns, [this] { return cupti_now(); });
    return started = true;
  }
  void recalibrate() override {
    ++recalibrations;
    std::lock_guard<std::mutex> lk(mu_);
    if (!setup.timestamp_callback) clock_.recalibrate(&ulysses::prof::Tracer::now_ns, [this] { return cupti_now(); });
  }
  void stop() override {
    if (!started) return;
    flush_all(true);
    started = false;
  }
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
    if (started) flush_all(false);
  }
  void flush_all(bool forced) {
    std::vector<Launch> ready;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& l : pending_) {
        if (l.hold > 0 && !forced) {
          --l.hold;
          held_.push_back(l);
        } else {
          ready.push_back(l);
        }
      }
      pending_.swap(held_);
      held_.clear();
    }
    ulysses::prof::GpuClock clock;
    {
      std::lock_guard<std::mutex> lk(mu_);
      clock = clock_;
    }
    for (auto l : ready) {  // CUPTI order: external correlation, API record, kernel
      // CUPTI's raw times, converted as the source converts them on delivery.
      for (int64_t* t : {&l.kernel.start_ns, &l.kernel.end_ns, &l.api.start_ns, &l.api.end_ns})
        *t = clock.to_host(static_cast<uint64_t>(*t));
      if (l.ext) sink_->on_external_correlation(l.kernel.correlation, static_cast<int64_t>(l.ext));
      if (l.has_api) sink_->on_runtime(l.api);
      sink_->on_kernel(l.kernel);
    }
  }

  // A kernel launched now by the calling thread that runs on the GPU over [t0, t1) (host
  // clock) on `stream`; delivered `hold` flushes later than the next one. Returns its
  // correlation id. api = false: LaunchApi::NoApiRecord.
  int64_t launch(const std::string& name, int64_t t0, int64_t t1, int32_t stream, int hold = 0, bool api = true) {
    return launch_via(api ? LaunchApi::Runtime : LaunchApi::NoApiRecord, name, t0, t1, stream, hold);
  }
  int64_t launch_via(LaunchApi how, const std::string& name, int64_t t0, int64_t t1, int32_t stream, int hold = 0) {
    using ulysses::prof::kCuptiZeroTimestampsFixed;
    using ulysses::prof::kCuptiZeroTimestampsFrom;
    std::lock_guard<std::mutex> lk(mu_);
    Launch l;
    // What CUPTI reports: host times through the callback (zero kernel times where CUPTI
    // has that bug), else its own clock.
    const bool zero = setup.timestamp_callback && api_version_ >= kCuptiZeroTimestampsFrom &&
                      api_version_ < kCuptiZeroTimestampsFixed;
    auto raw = [&](int64_t host_t) {  // kept raw until delivery
      return setup.timestamp_callback ? host_t : static_cast<int64_t>(cupti_at(host_t));
    };
    l.kernel.correlation = next_corr_++;
    l.kernel.start_ns = zero ? 0 : raw(t0);
    l.kernel.end_ns = zero ? 0 : raw(t1);
    l.kernel.stream = stream;
    l.kernel.name = name;
    const int64_t launch_t = ulysses::prof::Tracer::now_ns();
    l.api.correlation = l.kernel.correlation;
    l.api.start_ns = raw(launch_t);
    l.api.end_ns = raw(launch_t + 1);
    l.api.tid =
        setup.system_thread_ids ? static_cast<int64_t>(::syscall(SYS_gettid)) : static_cast<int64_t>(::pthread_self());
    l.api.name = how == LaunchApi::Driver ? "cuLaunchKernel" : "cudaLaunchKernel";
    // CUPTI ties an external id to a launch through its API record: none without one, except
    // for the test-made NoApiRecord (records of one launch split over buffers).
    l.has_api = (how == LaunchApi::Runtime && setup.runtime_api) || (how == LaunchApi::Driver && setup.driver_api);
    auto& st = stacks_[std::this_thread::get_id()];
    l.ext = st.empty() || (!l.has_api && how != LaunchApi::NoApiRecord) ? 0 : st.back();
    l.hold = hold;
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
  ulysses::prof::CuptiSetup setup;
  double drift = 0;        // CUPTI's clock runs (1 + drift) times as fast as the host's (set before start)
  int recalibrations = 0;  // recalibrate() calls

 private:
  // CUPTI's clock at host time h.
  uint64_t cupti_at(int64_t h) const {
    return static_cast<uint64_t>(h + kCuptiAhead + static_cast<int64_t>(drift * static_cast<double>(h - origin_)));
  }
  uint64_t cupti_now() const { return cupti_at(ulysses::prof::Tracer::now_ns()); }
  struct Launch {
    ulysses::prof::KernelRecord kernel;
    ulysses::prof::RuntimeRecord api;
    uint64_t ext = 0;
    int hold = 0;
    bool has_api = true;
  };
  ulysses::prof::GpuActivitySink* sink_;
  uint32_t api_version_;
  int64_t origin_ = 0;  // host time at start (drift counts from it)
  ulysses::prof::GpuClock clock_;
  std::mutex mu_;
  std::map<std::thread::id, std::vector<uint64_t>> stacks_;
  std::vector<Launch> pending_, held_;
  int64_t next_corr_ = 100;
};

// TracerOptions::gpu_source that builds a FakeCupti playing CUPTI `api_version` and hands it to *out.
inline std::function<std::unique_ptr<ulysses::prof::GpuActivitySource>(ulysses::prof::GpuActivitySink*)>
fake_cupti_factory(FakeCupti** out, uint32_t api_version = 130100) {
  return [out, api_version](ulysses::prof::GpuActivitySink* s) {
    auto g = std::make_unique<FakeCupti>(s, api_version);
    *out = g.get();
    return std::unique_ptr<ulysses::prof::GpuActivitySource>(std::move(g));
  };
}

}  // namespace ut
