// Gloo, NCCL and shape-only collectives behind Comm (comm_backend.hpp).
#include "comm_backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "cuda_event_timer.hpp"
#include "listen_address.hpp"
#include "memory_categories.hpp"
#include "run_config.hpp"
#include "store_probe.hpp"

namespace ulysses {

void CommBackend::check_device(const at::Tensor&, const torch::Device&, const char*) const {}

std::shared_ptr<DeviceTimer> CommBackend::make_device_timer(const torch::Device&) const { return nullptr; }

void CommBackend::copy_local(at::Tensor& dst, const at::Tensor& src) const {
  if (!dst.is_same(src)) dst.copy_(src);
}

namespace {
class GlooCommBackend final : public CommBackend {
 public:
  explicit GlooCommBackend(const DistEnv& env) : env_(env) {}
  const std::string& name() const override { return name_; }

  c10::intrusive_ptr<compat::Backend> make_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                 std::chrono::milliseconds timeout) override {
#if defined(ULYSSES_WITH_GLOO)
    if (address_.empty()) address_ = listen_address();
    return compat::make_gloo(std::move(store), rank, size, timeout, address_);
#else
    (void)store;
    (void)rank;
    (void)size;
    (void)timeout;
    throw ConfigError("parallel.backend gloo is not available in this build (libtorch without Gloo headers)");
#endif
  }

  // Gloo (libtorch 1.13) has no bfloat16 all-to-all; an all-to-all only moves bytes, so the
  // same 2-byte elements go reinterpreted as float16.
  IssuedCollective all_to_all(compat::Backend& group, at::Tensor& out, at::Tensor& in) override {
    std::vector<int64_t> splits;  // empty: equal splits along dim 0
    if (in.scalar_type() == at::kBFloat16) {
      at::Tensor o = out.view(at::kHalf), i = in.view(at::kHalf);
      return {group.alltoall_base(o, i, splits, splits), nullptr};
    }
    return {group.alltoall_base(out, in, splits, splits), nullptr};
  }

  // All-to-all of the W slices (rank r receives every rank's r-th), summed in rank order after
  // the transfer: (W-1) x S elements sent and received per rank, the bytes of a ring
  // reduce-scatter. bf16 (train.grad_reduce_dtype) moves as bytes: Gloo has no bf16 (nor int16)
  // kernels in libtorch 1.13, and the W equal slices stay W equal slices.
  IssuedCollective reduce_scatter_sum(compat::Backend& group, at::Tensor& shard, at::Tensor& full, int world) override {
    const int64_t W = world, S = shard.numel();
    at::Tensor recv = mem::comm_buffer_like(full);  // (W*S): slice q = rank q's slice for this rank
    std::vector<int64_t> splits;                    // empty: equal splits along dim 0
    const bool bf16 = full.scalar_type() == at::kBFloat16;
    at::Tensor recv_wire = bf16 ? recv.view(at::kByte) : recv, send_wire = bf16 ? full.view(at::kByte) : full;
    auto work = group.alltoall_base(recv_wire, send_wire, splits, splits);
    at::Tensor out = shard;
    return {work, [recv, out, W, S]() mutable { at::sum_out(out, recv.view({W, S}), {0}); }};
  }

  // Gloo's allgather (list outputs); bf16 (ZeRO-3's gathers in bf16 training) moves as bytes.
  // Gloo copies the input into its own flat buffer before any output is written, so the input
  // may be this rank's slice of `full` itself.
  IssuedCollective all_gather(compat::Backend& group, at::Tensor& full, at::Tensor& shard, int world) override {
    const int64_t S = shard.numel();
    const bool bf16 = full.scalar_type() == at::kBFloat16;
    const at::Tensor wire = bf16 ? full.view(at::kByte) : full;
    const int64_t Sw = bf16 ? 2 * S : S;  // the slice in wire elements
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int q = 0; q < world; ++q) outs[0].push_back(wire.narrow(0, q * Sw, Sw));
    std::vector<at::Tensor> ins{bf16 ? shard.view(at::kByte) : shard};
    return {group.allgather(outs, ins), nullptr};
  }

 private:
  // Where the groups' sockets listen, said once per rank: loopback for ulysses-run's ranks and a
  // loopback MASTER_ADDR, else the interface that reaches MASTER_ADDR (GLOO_SOCKET_IFNAME, when
  // set, names another and wins).
  std::string listen_address() const {
    const char* dir = std::getenv(launch::kRendezvousDirEnv);
    if (dir && *dir) return "127.0.0.1";
    std::string why;
    std::string address = gloo_listen_address(env_.master_addr, &why);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (!why.empty() && !(ifname && *ifname)) std::fprintf(stderr, "rendezvous: rank %d: %s\n", env_.rank, why.c_str());
    return address;
  }

  const std::string name_ = "gloo";
  DistEnv env_;
  std::string address_;
};

class NcclCommBackend final : public CommBackend {
 public:
  const std::string& name() const override { return name_; }

  // A host tensor given to NCCL is refused here, also at one rank, so a single-GPU run catches
  // what NCCL would reject (the peak-memory bug: a CPU float64 scalar all-reduced).
  void check_device(const at::Tensor& t, const torch::Device& device, const char* op) const override {
    if (t.device() == device) return;
    throw std::invalid_argument(std::string("Comm::") + op + ": tensor on " + t.device().str() +
                                ", but NCCL communicates on " + device.str() + " (move it there first)");
  }

  c10::intrusive_ptr<compat::Backend> make_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                 std::chrono::milliseconds timeout) override {
#if defined(ULYSSES_WITH_NCCL)
    return compat::make_nccl(std::move(store), rank, size, timeout);
#else
    (void)store;
    (void)rank;
    (void)size;
    (void)timeout;
    throw ConfigError("parallel.backend nccl needs a build against a CUDA libtorch 2.x with NCCL");
#endif
  }

  std::shared_ptr<DeviceTimer> make_device_timer(const torch::Device& device) const override {
#if defined(ULYSSES_WITH_NCCL)
    return std::make_shared<CudaEventTimer>(device.index());
#else
    (void)device;
    return nullptr;
#endif
  }

  IssuedCollective all_to_all(compat::Backend& group, at::Tensor& out, at::Tensor& in) override {
    std::vector<int64_t> splits;  // empty: equal splits along dim 0
    return {group.alltoall_base(out, in, splits, splits), nullptr};
  }
  IssuedCollective reduce_scatter_sum(compat::Backend& group, at::Tensor& shard, at::Tensor& full, int) override {
    return {group._reduce_scatter_base(shard, full), nullptr};
  }
  // In place when the input is this rank's slice of `full` (sendbuff = recvbuff + rank x count).
  IssuedCollective all_gather(compat::Backend& group, at::Tensor& full, at::Tensor& shard, int) override {
    return {group._allgather_base(full, shard), nullptr};
  }

 private:
  const std::string name_ = "nccl";
};

// Meta-device dry runs: Comm makes no group over it, so only copy_local is ever asked for, and
// it leaves the pre-allocated outputs as they are.
class ShapeOnlyCommBackend final : public CommBackend {
 public:
  const std::string& name() const override { return name_; }
  bool moves_data() const override { return false; }
  void copy_local(at::Tensor&, const at::Tensor&) const override {}
  c10::intrusive_ptr<compat::Backend> make_group(c10::intrusive_ptr<c10d::Store>, int, int,
                                                 std::chrono::milliseconds) override {
    throw std::logic_error("a shape-only Comm makes no process group");
  }
  IssuedCollective all_to_all(compat::Backend&, at::Tensor&, at::Tensor&) override { no_group(); }
  IssuedCollective reduce_scatter_sum(compat::Backend&, at::Tensor&, at::Tensor&, int) override { no_group(); }
  IssuedCollective all_gather(compat::Backend&, at::Tensor&, at::Tensor&, int) override { no_group(); }

 private:
  [[noreturn]] static void no_group() { throw std::logic_error("a shape-only Comm has no process group"); }
  const std::string name_ = "shape-only";
};
}  // namespace

std::unique_ptr<CommBackend> make_comm_backend(const std::string& name, const DistEnv& env) {
  if (name == "gloo") return std::make_unique<GlooCommBackend>(env);
  if (name == "nccl") return std::make_unique<NcclCommBackend>();
  throw ConfigError("unknown backend '" + name + "' (decide_device gives gloo or nccl)");
}

std::unique_ptr<CommBackend> make_shape_only_comm_backend() { return std::make_unique<ShapeOnlyCommBackend>(); }

}  // namespace ulysses
