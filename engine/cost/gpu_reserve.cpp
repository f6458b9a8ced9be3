// GPU additions to the memory plan (see gpu_reserve.hpp for each figure and its default).
#include "gpu_reserve.hpp"

#include <cmath>
#include <cstdlib>

namespace ulysses::cost {

namespace {
// A positive finite number from the environment, or `fallback`.
double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  return end && *end == '\0' && std::isfinite(x) && x > 0 ? x : fallback;
}
}  // namespace

GpuReserveSettings GpuReserveSettings::from_environment() {
  GpuReserveSettings s;
  s.context_bytes = static_cast<int64_t>(env_number("ULYSSES_GPU_CONTEXT_MIB", double(s.context_bytes >> 20))) << 20;
  const double f = env_number("ULYSSES_GPU_FRAGMENTATION", s.fragmentation);
  if (f < 1.0) s.fragmentation = f;
  return s;
}

GpuReserve gpu_reserve(const GpuPlanInput& in, const GpuReserveSettings& s) {
  GpuReserve r;
  if (in.offload_activations && in.activation_per_layer_bytes > 0 && in.layers > 0) {
    r.offloaded_host_bytes = in.layers * in.activation_per_layer_bytes;
    r.prefetch_bytes = 2 * in.activation_per_layer_bytes;
  }
  r.allocator_peak_bytes = in.peak_bytes - r.offloaded_host_bytes + r.prefetch_bytes;
  r.rounding_replayed = in.allocator_overhead_bytes >= 0;
  r.rounding_bytes =
      r.rounding_replayed
          ? in.allocator_overhead_bytes
          : static_cast<int64_t>(std::ceil(s.fragmentation * static_cast<double>(r.allocator_peak_bytes)));
  r.context_bytes = s.context_bytes;
  r.cublas_bytes = s.cublas_bytes_per_stream * s.streams;
  const int64_t comms = (in.world_size > 1 ? 1 : 0) + (in.sp_size > 1 ? 1 : 0) + (in.ring_size > 1 ? 1 : 0);
  r.nccl_bytes = comms * s.nccl_bytes_per_communicator;
  r.cupti_bytes = in.tracing ? s.cupti_bytes : 0;
  return r;
}

}  // namespace ulysses::cost
