// The staged open of a trace (trace_open.hpp): overview, summary, ranges, then the overview
// written for the next open.
#include "ulysses/profiler/trace_open.hpp"

#include <exception>
#include <utility>

#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::prof {

TraceOpen::TraceOpen(std::string trace_path, int64_t racy_window_ns) : path_(std::move(trace_path)) {
  co_.racy_window_ns = racy_window_ns;
  lo_.write_file_caches = true;  // rank files read from SQLite get a rank-file cache (when settled)
  lo_.file_cache_racy_window_ns = racy_window_ns;
  lo_.stats = &files_;
  probe_ = probe_overview_cache(path_, lo_, co_);
}

std::optional<TraceOverview> TraceOpen::overview() {
  std::optional<TraceOverview> ov = read_overview_cache(probe_, path_);
  overview_cached_ = ov.has_value();
  return ov;
}

std::optional<CachedSummary> TraceOpen::summary() {
  std::optional<CachedSummary> hit = read_summary_cache(path_, lo_, ao_, co_);
  summary_cached_ = hit.has_value();
  return hit;
}

TraceOpen::Ranges TraceOpen::ranges() {
  Ranges out;
  if (summary_cached_) {  // the report is known: only the ranges are read
    out.model = load_trace(path_, lo_);
    return out;
  }
  CachedSummary cs = load_summary(path_, lo_, ao_, co_);  // computes it and writes the cache
  summary_cached_ = cs.from_cache || cs.written;
  out.summary = std::move(cs.summary);
  out.analyze_s = cs.analyze_s;
  // Written meanwhile by another process: the cache's model is a shell without ranges.
  out.model = cs.from_cache ? load_trace(path_, lo_) : std::move(cs.model);
  return out;
}

bool TraceOpen::write_overview(const TraceModel& m, int64_t* overview_ranges) {
  if (!overview_writable()) return false;
  try {
    const TraceOverview ov = build_overview(m);
    if (overview_ranges) *overview_ranges = static_cast<int64_t>(ov.model.ranges.size());
    overview_cached_ = write_overview_cache(probe_, path_, lo_, ov);
  } catch (const std::exception&) {  // e.g. out of memory: the next open just loads in full
    return false;
  }
  return overview_cached_;
}

}  // namespace ulysses::prof
