// Chrome / Kineto trace JSON export (chrome://tracing, Perfetto, HTA): one process per
// rank, one thread per lane, 'X' events with microsecond ts/dur relative to the trace start
// (baseTimeNanoseconds holds the absolute start), thread/process name metadata, and
// HTA's top-level "distributedInfo" {rank, world_size}.
#pragma once

#include <iosfwd>
#include <string>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof {

struct ChromeExportOptions {
  int32_t rank = -1;          // -1: every rank in one file; else only that rank
  bool head_lanes = true;     // include LaneKind::HeadRange lanes
};

// Writes the JSON to `out`. distributedInfo.rank is options.rank, or 0 for a whole-run file.
void write_chrome_trace(const TraceModel& m, std::ostream& out, const ChromeExportOptions& o = {});
// Writes to a file; throws std::runtime_error when it cannot be written.
void export_chrome_trace(const TraceModel& m, const std::string& path, const ChromeExportOptions& o = {});

}  // namespace ulysses::prof
