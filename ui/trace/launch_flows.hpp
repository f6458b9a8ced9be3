// Launch -> kernel flows (Perfetto draws flow events of the selection): a GPU kernel is joined
// to the CUDA runtime call that launched it, the call (TraceModel::runtime) with the kernel's
// CUPTI correlation id on the same rank. Nsight exports carry correlationId in both tables,
// PyTorch profiler traces the "correlation" arg of the cuda_runtime event and the kernel; the
// loaders keep it (RuntimeCall::correlation, RangeExtra::correlation). Where a kernel has no
// such call but the loader tied it to the host range that launched it (TraceRange::origin, our
// own GPU traces), the flow starts at that range. Qt-free, like the rest of the draw code.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "trace/timeline_draw.hpp"

namespace ulysses::ui {

// (rank, correlation) -> runtime call and -> kernel, built once per trace (a pass over the
// runtime calls and the kernels with a correlation id).
struct LaunchIndex {
  std::unordered_map<uint64_t, int64_t> call_of;    // index into TraceModel::runtime
  std::unordered_map<uint64_t, int64_t> kernel_of;  // index into TraceModel::ranges (the first)
  static uint64_t key(int32_t rank, uint32_t correlation) {
    return (uint64_t(uint32_t(rank)) << 32) | uint64_t(correlation);
  }
};
LaunchIndex build_launch_index(const prof::TraceModel& m);

// One arrow from a launch (the call's start, on its thread's lane (the rank's HostThread lane
// whose tid is the call's) in the row of the innermost range open then, else the rank's header) to
// the kernel's start on its own row. x in widget time-area pixels, y in widget rows (y_scroll
// applied), as FlowPoint. Hidden ranks' ends are left out; a collapsed rank's lie on its
// summary row.
struct LaunchFlow {
  int64_t kernel = -1;  // index into TraceModel::ranges
  int64_t call = -1;    // index into TraceModel::runtime; -1: from the kernel's origin range
  int64_t launch_ns = 0, kernel_ns = 0;
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The flows of the selection: the selected kernel's launch; for a selected host range, every
// kernel launched by a call inside it (on its rank, and on its thread when the range is on a
// host-thread lane; a head-lane copy stands for the range it copies); and, with a window
// (t1 > t0), every kernel launched by a call that starts inside it. At most max_flows, earliest
// launch first.
std::vector<LaunchFlow> launch_flows(const TimelineIndex& ix, const LaunchIndex& li, const TimelineLayout& layout,
                                     const TimelineViewport& vp, float y_scroll, int64_t selected, int64_t t0,
                                     int64_t t1, size_t max_flows = 256);

}  // namespace ulysses::ui
