// GPU activity helpers every build has: detection of another injected CUDA tool (Nsight
// Systems), and the fallback for builds without CUPTI: no GPU activity source (the CPU build
// is a subset of the sources; the CUPTI implementation lives in src/cupti/).
#include "ulysses/profiler/gpu_activity.hpp"

#include <cstdlib>

namespace ulysses::prof {
bool cuda_tool_injected(std::string* why) {
  const char* session = std::getenv("NSYS_PROFILING_SESSION_ID");
  const char* inject = std::getenv("CUDA_INJECTION64_PATH");
  std::string msg;
  if (session && *session) {
    msg = "running under Nsight Systems (NSYS_PROFILING_SESSION_ID=" + std::string(session) + ")";
  } else if (inject && *inject) {
    msg = "a CUDA tool is injected (CUDA_INJECTION64_PATH=" + std::string(inject) + ")";
  } else {
    return false;
  }
  if (why) *why = msg;
  return true;
}
}  // namespace ulysses::prof

#if !defined(ULYSSES_WITH_CUPTI)
namespace ulysses::prof {
bool have_cupti() { return false; }
std::unique_ptr<GpuActivitySource> make_cupti_source(GpuActivitySink*) { return nullptr; }
}  // namespace ulysses::prof
#endif
