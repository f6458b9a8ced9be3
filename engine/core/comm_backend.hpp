// One communication backend behind Comm (comm.hpp), as RingTransport (ring_attention.hpp) is
// for the ring's exchanges: how a backend makes its process groups and issues the collectives
// Comm offers on them.
//  - Gloo (CPU ranks): its sockets listen where listen_address.hpp says; it has no bfloat16
//    all-to-all nor reduce-scatter, so bf16 moves as bytes and a reduce-scatter is an
//    all-to-all plus a local sum.
//  - NCCL (CUDA ranks): tensors must be on the group's device; device marks time collectives.
//  - Shape-only (meta-device dry runs, Comm::shape_only): no groups; nothing moves.
// Comm keeps what every backend shares: the groups' layout, their sequence numbers, the fault
// delay, device timing and tracing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm_timing.hpp"
#include "dist_env.hpp"
#include "torch_compat.hpp"

namespace ulysses {

// A collective as a backend issued it: the work to wait for and, when the backend finishes it
// on the host after the transfer (Gloo's reduce-scatter: the local sum), what runs then.
struct IssuedCollective {
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> after;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  // "gloo", "nccl" or "shape-only" (Comm::backend_name).
  virtual const std::string& name() const = 0;
  // false for shape-only: collectives keep shapes and allocations as in a run, move nothing.
  virtual bool moves_data() const { return true; }
  // Throws std::invalid_argument when `t` cannot take part in a collective of a group on
  // `device` (NCCL: a tensor elsewhere); `op` names the Comm call.
  virtual void check_device(const at::Tensor& t, const torch::Device& device, const char* op) const;
  // A group of `size` ranks through `store` (a PrefixStore of its own); every wait on it takes
  // at most `timeout`. Throws ConfigError when this build lacks the backend.
  virtual c10::intrusive_ptr<compat::Backend> make_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                         std::chrono::milliseconds timeout) = 0;
  // Device marks for this rank's collectives (NCCL: CUDA events), or null (host clocks).
  virtual std::shared_ptr<DeviceTimer> make_device_timer(const torch::Device& device) const;
  // A collective without a group (one rank, or sp 1 for the all-to-all): dst = src (nothing
  // when they are one tensor or when nothing moves).
  virtual void copy_local(at::Tensor& dst, const at::Tensor& src) const;
  // Equal-split all-to-all along dim 0 of contiguous tensors.
  virtual IssuedCollective all_to_all(compat::Backend& group, at::Tensor& out, at::Tensor& in) = 0;
  // 1-D contiguous `full` of world x S elements, `shard` of S (Comm::reduce_scatter_sum,
  // Comm::all_gather): shard = sum over ranks of their full[r S, (r+1) S); full[q S, (q+1) S)
  // = rank q's shard.
  virtual IssuedCollective reduce_scatter_sum(compat::Backend& group, at::Tensor& shard, at::Tensor& full,
                                              int world) = 0;
  virtual IssuedCollective all_gather(compat::Backend& group, at::Tensor& full, at::Tensor& shard, int world) = 0;
};

// The backend decide_device chose ("gloo" or "nccl") for a rank of `env`; ConfigError for
// another name. A backend this build lacks is refused when its first group is made (a run of
// one rank makes none).
std::unique_ptr<CommBackend> make_comm_backend(const std::string& name, const DistEnv& env);
// The shape-only backend (Comm::shape_only).
std::unique_ptr<CommBackend> make_shape_only_comm_backend();

}  // namespace ulysses
