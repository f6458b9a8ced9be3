// DeviceTimer on CUDA events (GPU builds: ULYSSES_WITH_NCCL). Start mark: the event
// ProcessGroupNCCL records on its own stream just before the collective (compat::nccl_start_event,
// libtorch >= 2.3 with TORCH_NCCL_ENABLE_TIMING), i.e. when NCCL starts; where there is none, an
// event on the current (compute) stream just before the collective is issued, which
// ProcessGroupNCCL's stream waits for, so the collective starts no earlier (but later when
// NCCL's stream is still busy with an earlier collective). End mark: a side stream from the
// pool, otherwise idle, is made to wait for the work (WorkNCCL::wait blocks the current
// stream, here the side stream, on the collective's end event, without a host wait) and
// records an event, which therefore completes when the collective does. Host times: an
// anchor event whose completion the host waited for (host time read just after), plus the
// device time between the anchor and each mark (cudaEventElapsedTime, ~0.5 us resolution).
// The anchor is renewed once it is older than kAnchorAge_ns, bounding the drift between the
// GPU's and the host's clocks. Renewing waits for the side stream, so it is never done at a
// start() in the middle of a step: a start() that finds the anchor old only asks for it, and
// the next span's times() renews it, at the end of the step where the marks are read (the host
// waits for them there anyway). Only the very first anchor is made at a start().
#pragma once

#if defined(ULYSSES_WITH_NCCL)

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <mutex>

#include "comm_timing.hpp"
#include "torch_compat.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

class CudaEventTimer final : public DeviceTimer {
 public:
  static constexpr int64_t kAnchorAge_ns = 5'000'000'000;
  explicit CudaEventTimer(c10::DeviceIndex device)
      : device_(device),
        clock_(std::make_shared<Clock>(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device))) {}

  std::shared_ptr<DeviceSpan> start() override {
    auto span = std::make_shared<Span>();
    span->clock = clock_;
    span->anchor = clock_->anchor();
    span->a.record(c10::cuda::getCurrentCUDAStream(device_));
    return span;
  }
  void end(DeviceSpan& span, c10d::Work& work) override {
    auto& s = static_cast<Span&>(span);
    {
      c10::cuda::CUDAStreamGuard g(clock_->side);
      work.wait();  // NCCL: the side stream waits for the collective's end event
    }
    s.b.record(clock_->side);
    s.nccl_start = compat::nccl_start_event(work);  // recorded at enqueue, before the collective
    s.ended = true;
  }

 private:
  struct Anchor {
    at::cuda::CUDAEvent ev{cudaEventDefault};
    int64_t host_ns = 0;
  };
  // The side stream and the anchor, shared with the spans (which renew it when asked).
  struct Clock {
    explicit Clock(c10::cuda::CUDAStream s) : side(s) {}
    c10::cuda::CUDAStream side;
    std::mutex mu;
    std::shared_ptr<Anchor> current;
    bool renew = false;
    // The anchor for a new span: the first is made here, an old one is only marked for renewal.
    std::shared_ptr<Anchor> anchor() {
      std::lock_guard<std::mutex> lk(mu);
      if (!current) {
        current = make();
      } else if (prof::Tracer::now_ns() - current->host_ns > kAnchorAge_ns) {
        renew = true;
      }
      return current;
    }
    // At the end of a step (a span's times()): a new anchor when one was asked for.
    void renew_if_asked() {
      std::lock_guard<std::mutex> lk(mu);
      if (!renew) return;
      current = make();
      renew = false;
    }
    std::shared_ptr<Anchor> make() {
      auto a = std::make_shared<Anchor>();
      a->ev.record(side);
      a->ev.synchronize();
      a->host_ns = prof::Tracer::now_ns();
      return a;
    }
  };
  struct Span final : DeviceSpan {
    std::shared_ptr<Clock> clock;
    std::shared_ptr<Anchor> anchor;
    at::cuda::CUDAEvent a{cudaEventDefault}, b{cudaEventDefault};
    std::shared_ptr<at::cuda::CUDAEvent> nccl_start;  // NCCL's own start event, when it has one
    bool ended = false;
    bool times(int64_t* start_ns, int64_t* end_ns) override {
      if (!ended || !anchor) return false;
      b.synchronize();  // after the collective, so after its start event too
      const at::cuda::CUDAEvent& start = nccl_start ? *nccl_start : a;
      *start_ns = anchor->host_ns + static_cast<int64_t>(static_cast<double>(anchor->ev.elapsed_time(start)) * 1e6);
      *end_ns = anchor->host_ns + static_cast<int64_t>(static_cast<double>(anchor->ev.elapsed_time(b)) * 1e6);
      clock->renew_if_asked();  // the marks are read: the step has ended
      return *end_ns >= *start_ns;
    }
  };
  c10::DeviceIndex device_;
  std::shared_ptr<Clock> clock_;
};

}  // namespace ulysses

#endif  // ULYSSES_WITH_NCCL
