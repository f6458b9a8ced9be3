// Fallback for builds without CUPTI: no GPU activity source (the CPU build is a subset of
// the sources; the CUPTI implementation lives in src/cupti/).
#include "ulysses/profiler/gpu_activity.hpp"

#if !defined(ULYSSES_WITH_CUPTI)
namespace ulysses::prof {
bool have_cupti() { return false; }
std::unique_ptr<GpuActivitySource> make_cupti_source(GpuActivitySink*) { return nullptr; }
}  // namespace ulysses::prof
#endif
