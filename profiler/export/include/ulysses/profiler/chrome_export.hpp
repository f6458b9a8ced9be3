// Chrome / Kineto trace JSON export (chrome://tracing, Perfetto, Holistic Trace Analysis):
// one process per rank, one thread per lane, 'X' events with microsecond ts/dur relative to
// the trace start (baseTimeNanoseconds holds the absolute start, the same in every file of a
// run), thread/process name metadata. Kineto's conventions, which HTA reads:
//   host ranges   cat "user_annotation" (step ranges named "ProfilerStep#<step>", HTA's
//                 iteration marker), args "External id" when the range pushed one
//   GPU kernels   cat "kernel" (copies "gpu_memcpy" / "gpu_memset", named "Memcpy ..." /
//                 "Memset ..."), args "stream" (> 0), "device", "correlation", "External id"
//   runtime API   cat "cuda_runtime" (cudaLaunchKernel, ...), args "correlation",
//                 "External id", on the launching thread's row
//   distributedInfo {"backend", "rank", "world_size", "pg_count", "pg_config"} at the top
//                 (pg_config: the default group, the rank's SP group of consecutive ranks and
//                 its DP group, as torch.distributed lists them).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof {

struct ChromeExportOptions {
  int32_t rank = -1;       // -1: every rank in one file; else only that rank
  bool head_lanes = true;  // include LaneKind::HeadRange lanes (cat "ulysses_heads")
};

// Writes the JSON to `out`. distributedInfo.rank is options.rank, or 0 for a whole-run file.
void write_chrome_trace(const TraceModel& m, std::ostream& out, const ChromeExportOptions& o = {});
// Writes to a file; throws std::runtime_error when it cannot be written.
void export_chrome_trace(const TraceModel& m, const std::string& path, const ChromeExportOptions& o = {});
// One file per rank, DIR/rank{r}.json (HTA reads a folder of per-rank files). Creates DIR.
// Returns the paths written; throws std::runtime_error when one cannot be written.
std::vector<std::string> export_chrome_trace_per_rank(const TraceModel& m, const std::string& dir,
                                                      const ChromeExportOptions& o = {});

}  // namespace ulysses::prof
