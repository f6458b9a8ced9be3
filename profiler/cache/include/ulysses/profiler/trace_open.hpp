// Opening a trace in stages, the one sequence `ulysses-trace prepare`, ulysses-run's end of
// run and the studio's loader follow (cache room; no torch, no Qt):
//   1. overview()  the cached overview (trace_overview.hpp), or nothing: the timeline's first
//                  paint, before anything else is read;
//   2. summary()   the cached summary (summary_cache.hpp; its model a shell without ranges),
//                  or nothing;
//   3. ranges()    the full model; the summary is computed and its cache written when stage 2
//                  found none; rank files read from SQLite get their rank-file cache;
//   4. write_overview()  the overview of the loaded model, for the next open, when stage 1
//                  found none (not for a run still being written).
// The overview cache is probed when the TraceOpen is made, before any read, so that stage 4
// can tell whether an input changed meanwhile. Every stage reads with the same options as
// `ulysses-trace summary` (LoadOptions{} with head lanes on, AnalysisOptions{}), so that all of
// them share one cache record per trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/load_options.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_overview.hpp"

namespace ulysses::prof {

class TraceOpen {
 public:
  // racy_window_ns: inputs modified less than this before are taken as still being written and
  // get no cache (0 when every writer has closed, as after ulysses-run's workers exited).
  explicit TraceOpen(std::string trace_path, int64_t racy_window_ns = SummaryCacheOptions{}.racy_window_ns);
  TraceOpen(const TraceOpen&) = delete;
  TraceOpen& operator=(const TraceOpen&) = delete;

  const std::string& path() const { return path_; }
  const LoadOptions& load_options() const { return lo_; }
  // How stage 3 read the rank files (from their rank-file caches, caches written).
  const LoadOptions::Stats& file_stats() const { return files_; }

  // Stage 1: the cached overview (model.source = the trace path), or nothing. Never throws.
  std::optional<TraceOverview> overview();
  // Stage 2: the cached summary, or nothing (missing, stale, corrupt, disabled).
  std::optional<CachedSummary> summary();
  bool overview_cached() const { return overview_cached_; }
  bool summary_cached() const { return summary_cached_; }

  // Stage 3: the trace's ranges. With the summary computed (and written to its cache) unless
  // stage 2 found it cached; when another process wrote that cache meanwhile, the summary is
  // the cache's and the ranges are read again. Throws what load_trace throws.
  struct Ranges {
    TraceModel model;                // the full model
    std::optional<Summary> summary;  // computed or read here; none when stage 2 had it
    double analyze_s = 0;            // seconds in analyze
  };
  Ranges ranges();

  // Stage 4: writes the overview of `m` (the full model of stage 3) unless stage 1 found it
  // cached, there is no cache, an input changed since the probe or the run was still being
  // written. true when written; `overview_ranges` gets the overview's range count when built.
  // Never throws.
  bool write_overview(const TraceModel& m, int64_t* overview_ranges = nullptr);
  // Whether stage 4 would build and write the overview (not cached, inputs settled at the probe).
  bool overview_writable() const { return !overview_cached_ && probe_.writable(); }

 private:
  std::string path_;
  SummaryCacheOptions co_;
  LoadOptions lo_;
  LoadOptions::Stats files_;
  AnalysisOptions ao_;
  OverviewCacheProbe probe_;
  bool overview_cached_ = false, summary_cached_ = false;
};

}  // namespace ulysses::prof
