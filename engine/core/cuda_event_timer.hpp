// DeviceTimer on CUDA events (GPU builds: ULYSSES_WITH_NCCL). Start mark: an event on the
// current (compute) stream just before the collective is issued, which ProcessGroupNCCL's
// stream waits for, so the collective starts no earlier. End mark: a side stream from the
// pool, otherwise idle, is made to wait for the work (WorkNCCL::wait blocks the current
// stream, here the side stream, on the collective's end event, without a host wait) and
// records an event, which therefore completes when the collective does. Host times: an
// anchor event whose completion the host waited for (host time read just after), plus the
// device time between the anchor and each mark (cudaEventElapsedTime, ~0.5 us resolution).
// The anchor is renewed at a start() once it is older than kAnchorAge_ns, bounding the drift
// between the GPU's and the host's clocks; renewing waits for the side stream (earlier end
// marks) once.
#pragma once

#if defined(ULYSSES_WITH_NCCL)

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <mutex>

#include "comm_timing.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

class CudaEventTimer final : public DeviceTimer {
 public:
  static constexpr int64_t kAnchorAge_ns = 5'000'000'000;
  explicit CudaEventTimer(c10::DeviceIndex device)
      : device_(device), side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}

  std::shared_ptr<DeviceSpan> start() override {
    auto span = std::make_shared<Span>();
    span->anchor = anchor();
    span->a.record(c10::cuda::getCurrentCUDAStream(device_));
    return span;
  }
  void end(DeviceSpan& span, c10d::Work& work) override {
    auto& s = static_cast<Span&>(span);
    {
      c10::cuda::CUDAStreamGuard g(side_);
      work.wait();  // NCCL: the side stream waits for the collective's end event
    }
    s.b.record(side_);
    s.ended = true;
  }

 private:
  struct Anchor {
    at::cuda::CUDAEvent ev{cudaEventDefault};
    int64_t host_ns = 0;
  };
  struct Span final : DeviceSpan {
    std::shared_ptr<Anchor> anchor;
    at::cuda::CUDAEvent a{cudaEventDefault}, b{cudaEventDefault};
    bool ended = false;
    bool times(int64_t* start_ns, int64_t* end_ns) override {
      if (!ended || !anchor) return false;
      b.synchronize();
      *start_ns = anchor->host_ns + static_cast<int64_t>(static_cast<double>(anchor->ev.elapsed_time(a)) * 1e6);
      *end_ns = anchor->host_ns + static_cast<int64_t>(static_cast<double>(anchor->ev.elapsed_time(b)) * 1e6);
      return *end_ns >= *start_ns;
    }
  };
  std::shared_ptr<Anchor> anchor() {
    std::lock_guard<std::mutex> lk(mu_);
    const int64_t now = prof::Tracer::now_ns();
    if (!anchor_ || now - anchor_->host_ns > kAnchorAge_ns) {
      auto a = std::make_shared<Anchor>();
      a->ev.record(side_);
      a->ev.synchronize();
      a->host_ns = prof::Tracer::now_ns();
      anchor_ = a;
    }
    return anchor_;
  }
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream side_;
  std::mutex mu_;
  std::shared_ptr<Anchor> anchor_;
};

}  // namespace ulysses

#endif  // ULYSSES_WITH_NCCL
