// GPU activity behind a small interface (kineto practice): a source collects kernel /
// memcpy / memset / runtime-API records and hands them to a sink. The CUPTI source exists
// only in builds with ULYSSES_HAVE_CUPTI (profiler/record/src/cupti/); tests can substitute a fake.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ulysses/profiler/trace_writer.hpp"

namespace ulysses::prof {

// Receives records; timestamps are already on the host clock (Tracer::now_ns).
// Called from CUPTI's buffer-completed thread or from flush(): implementations lock.
class GpuActivitySink {
 public:
  virtual ~GpuActivitySink() = default;
  virtual void on_kernel(const KernelRecord& k) = 0;
  virtual void on_memcpy(const MemcpyRecord& m) = 0;
  virtual void on_runtime(const RuntimeRecord& r) = 0;
  // CUPTI correlation id -> external id pushed with push_external_id (the traced range).
  // CUPTI reports it before the API record and the kernel of that launch.
  virtual void on_external_correlation(int64_t correlation, int64_t external_id) {}
};

class GpuActivitySource {
 public:
  virtual ~GpuActivitySource() = default;
  // Registers buffer callbacks, then enables the activity kinds. false + *error on failure.
  virtual bool start(std::string* error) = 0;
  // Delivers every completed record to the sink. Call without holding the sink's lock.
  virtual void flush() = 0;
  virtual void stop() = 0;
  // Tags GPU work launched by this thread until pop (EXTERNAL_CORRELATION).
  virtual void push_external_id(uint64_t id) = 0;
  virtual void pop_external_id() = 0;
  // Measures the GPU clock against the host's again (the Tracer calls it at every begin_step;
  // GpuClock). No-op where CUPTI reports host times itself (the timestamp callback).
  virtual void recalibrate() {}
};

// Another CUDA tool already injected into this process (Nsight Systems sets
// NSYS_PROFILING_SESSION_ID and CUDA_INJECTION64_PATH=.../libToolsInjection64.so; Nsight
// Compute and other CUPTI clients set CUDA_INJECTION64_PATH). CUPTI serves one activity
// client per process, so the Tracer then starts no GPU source and says why in *why.
bool cuda_tool_injected(std::string* why);

// Whether this build has the CUPTI source.
bool have_cupti();
// The CUPTI source (nullptr in builds without CUPTI). Only one may be started per process:
// CUPTI's buffer callbacks are process-wide.
std::unique_ptr<GpuActivitySource> make_cupti_source(GpuActivitySink* sink);

}  // namespace ulysses::prof
