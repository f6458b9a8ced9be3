// What a GPU adds to the memory plan (docs/GPU.md): the meta-device dry run counts tensor
// storages only, and counts offloaded layer inputs on the device. On a GPU a rank also holds:
//   context    the CUDA context and loaded modules (cuBLAS, cuDNN, NCCL, flash kernels):
//              about 0.5-1.5 GiB; default 1 GiB (ULYSSES_GPU_CONTEXT_MIB sets it; gpu-check
//              reports reserved against allocated when a device is lent)
//   cublas     cuBLAS workspaces: 32 MiB per (handle, stream) on Hopper (PyTorch's default
//              CUBLAS_WORKSPACE_CONFIG :4096:8), for the compute and the side stream
//   nccl       NCCL's buffers: 256 MiB per communicator of more than one rank (NCCL_BUFFSIZE
//              4 MiB x 2 directions x up to 32 channels), the world, the SP group and the
//              ring group (ring attention's K/V exchange, parallel.ring_size > 1)
//   cupti      CUPTI's device activity buffers when tracing: 4 x 8 MiB
//   rounding   the caching allocator's block rounding and fragmentation: reserved above
//              allocated. The planner replays its dry run's allocations through the
//              allocator's rules (allocator_model.hpp, train.allocator) and passes what that
//              adds; without a replay, 10% of the allocator's peak (ULYSSES_GPU_FRAGMENTATION)
//   prefetch   with activation offload: two layer inputs alive at once on the device (the one
//              recomputed and the one prefetched), while the other offloaded inputs move to
//              a column of their own, pinned host memory
// device_bytes = allocator_peak + rounding + context + cublas + nccl + cupti, with
// allocator_peak = planned peak - offloaded + prefetch. --max-seq keeps kHeadroom of the
// device free on top. Torch-free.
#pragma once

#include <cstdint>

namespace ulysses::cost {

struct GpuReserveSettings {
  int64_t context_bytes = int64_t{1} << 30;
  int64_t cublas_bytes_per_stream = int64_t{32} << 20;
  int32_t streams = 2;
  int64_t nccl_bytes_per_communicator = int64_t{256} << 20;
  int64_t cupti_bytes = int64_t{32} << 20;
  double fragmentation = 0.10;
  // The defaults above with ULYSSES_GPU_CONTEXT_MIB / ULYSSES_GPU_FRAGMENTATION applied
  // (a value that is no positive number is ignored).
  static GpuReserveSettings from_environment();
};

// Fraction of the device --max-seq leaves free beyond device_bytes.
constexpr double kGpuHeadroom = 0.05;

struct GpuPlanInput {
  int64_t peak_bytes = 0;                  // the dry run's peak (tensor storages, offloaded inputs included)
  int64_t activation_per_layer_bytes = 0;  // one layer's kept input (layer checkpointing)
  int64_t layers = 0;
  bool offload_activations = false;
  int64_t world_size = 1, sp_size = 1, ring_size = 1;
  bool tracing = false;
  // Reserved above requested at the replayed allocator's peak (AllocatorReplay::overhead());
  // -1: not replayed, the flat GpuReserveSettings::fragmentation share is taken.
  int64_t allocator_overhead_bytes = -1;
};

struct GpuReserve {
  int64_t offloaded_host_bytes = 0;  // pinned host memory, not on the device
  int64_t prefetch_bytes = 0;
  int64_t allocator_peak_bytes = 0;  // peak - offloaded + prefetch: what the allocator hands out
  int64_t rounding_bytes = 0;
  bool rounding_replayed = false;  // rounding_bytes from the allocator replay, not the flat share
  int64_t context_bytes = 0, cublas_bytes = 0, nccl_bytes = 0, cupti_bytes = 0;
  int64_t reserve_bytes() const { return rounding_bytes + context_bytes + cublas_bytes + nccl_bytes + cupti_bytes; }
  int64_t device_bytes() const { return allocator_peak_bytes + reserve_bytes(); }
};

GpuReserve gpu_reserve(const GpuPlanInput& in, const GpuReserveSettings& s = GpuReserveSettings::from_environment());

}  // namespace ulysses::cost
