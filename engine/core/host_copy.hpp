// A tensor parked in host memory until it is needed again (activation offload), written once
// over the stream operations it needs (Ops), so that the ordering that matters on a GPU is the
// same code in CUDA builds (compat::CudaCopyOps, torch_compat.hpp) and in a CPU test's fake.
//
// On a device: the copy out goes to host memory on the device's one side stream, after the
// producer (an event on the current stream); the tensor's block is kept from reuse until the
// copy is done (record_stream). The copy back is allocated on the CONSUMER stream (the current
// one where prefetch is called, the compute stream), so that restored layer inputs come from
// and go back to that stream's pool step after step (two alive at once, as the planner's
// prefetch term counts: engine/cost/gpu_reserve.hpp) instead of being cached on whatever pool
// stream a copy ran on; the side stream first waits for the consumer's work issued so far (the
// block's earlier users), then copies, and the block is kept from reuse until that copy is done.
// Off a device (CPU) the tensor already lives in host memory and is kept as is.
//
// Ops (all static): Stream, Event; kDevice (false: the CPU path only); on_device(x);
// device_of(x) (an int key); current(dev); new_side_stream(dev) (called once per device);
// record(stream) -> Event; wait(event, stream); to_host(stream, x) (async copy into host
// memory on stream); empty_on_device(host, dev) (allocated on the current stream);
// copy(stream, dst, src) (async on stream); record_stream(t, stream).
#pragma once

#include <torch/torch.h>

#include <map>
#include <mutex>

namespace ulysses {

template <class Ops>
class HostCopyOn {
 public:
  using Stream = typename Ops::Stream;
  using Event = typename Ops::Event;

  // The one side stream of a device, made on first use and kept for the process.
  static Stream side_stream(int dev) {
    static std::mutex mu;
    static std::map<int, Stream> made;
    std::lock_guard<std::mutex> g(mu);
    auto it = made.find(dev);
    if (it == made.end()) it = made.emplace(dev, Ops::new_side_stream(dev)).first;
    return it->second;
  }

  void offload(const at::Tensor& x) {
    if constexpr (Ops::kDevice) {
      if (Ops::on_device(x)) {
        dev_index_ = Ops::device_of(x);
        on_device_ = true;
        const Stream side = side_stream(dev_index_);
        Ops::wait(Ops::record(Ops::current(dev_index_)), side);  // after the producer
        host_ = Ops::to_host(side, x);
        Ops::record_stream(x, side);  // x's block not reused before the copy is done
        copied_ = Ops::record(side);
        return;
      }
    }
    on_device_ = false;
    host_ = x.detach();
  }

  // Starts the copy back on the side stream, into a tensor of the consumer stream's pool, so
  // that it overlaps whatever the consumer is doing. No-op off a device or when started.
  void prefetch() {
    if constexpr (Ops::kDevice) {
      if (!on_device_ || !host_.defined() || dev_.defined()) return;
      const Stream consumer = Ops::current(dev_index_);
      const Stream side = side_stream(dev_index_);
      dev_ = Ops::empty_on_device(host_, dev_index_);  // on the consumer stream
      Ops::wait(Ops::record(consumer), side);          // the block's earlier users are done
      Ops::wait(copied_, side);                        // the copy out is done
      Ops::copy(side, dev_, host_);
      Ops::record_stream(dev_, side);  // freed on the consumer: not reused before the copy is done
      fetched_ = Ops::record(side);
    }
  }

  // The tensor on its original device, ordered (on the current stream) after the copies.
  at::Tensor restore() {
    if constexpr (Ops::kDevice) {
      if (on_device_) {
        prefetch();
        Ops::wait(fetched_, Ops::current(dev_index_));
        return dev_;
      }
    }
    return host_;
  }

  bool defined() const { return host_.defined(); }
  void reset() {
    host_ = at::Tensor();
    dev_ = at::Tensor();
    copied_ = Event();
    fetched_ = Event();
    on_device_ = false;
  }

 private:
  at::Tensor host_, dev_;
  int dev_index_ = -1;
  bool on_device_ = false;
  Event copied_{}, fetched_{};
};

// CPU builds: no device, tensors stay where they are.
struct HostOnlyCopyOps {
  static constexpr bool kDevice = false;
  using Stream = int;
  using Event = int;
};

}  // namespace ulysses
