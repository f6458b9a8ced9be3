// Trace overview: a level-of-detail copy of a trace's lanes for the
// timeline's first paint, built once from the full model and kept beside the trace, so that
// the studio draws the whole run before its ranges are read again. No torch, no Qt.
//
// What it holds: the model's lanes, each with its ranges reduced to what a whole-run view can
// show. With q = (t_max - t_min) / resolution (8192 by default: finer than a pixel of a
// full-view timeline up to 8192 pixels wide):
//   - a range at least q long is copied whole (its times, name, phase, step, layer, heads,
//     chunk, bytes, collective identity);
//   - consecutive siblings (same lane, same depth, same enclosing range) each shorter than q
//     and less than q apart merge into one range spanning them, carrying the first one's
//     name and attributes;
//   - the descendants of a merged run merge into one range per depth below it, spanning them.
// So every range of the full model lies inside an overview range of its lane at its depth,
// ranges nest as in the full model, and the gap between two overview ranges of a row is
// either a gap of the full model or shorter than q. `counts` says how many ranges of the full
// model each overview range stands for (they sum to the model's range count). Links between
// ranges (parent, origin, correlation, external ids) are not kept; the timeline recomputes
// nesting from the times.
//
// Cache: beside the summary cache, with the same key (profiler build id, load options, each
// input file's name, size, mtime, inode and -wal): DIR/.ulysses-overview-cache for a folder,
// dirname(F)/.F.ulysses-overview-cache for one file F. Same rules as the summary cache: never
// fails because of the cache, written atomically, not written while a run is still being
// written, off with SummaryCacheOptions::enabled = false or ULYSSES_TRACE_NO_CACHE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::prof {

constexpr uint32_t kOverviewCacheFormat = 1;
constexpr int32_t kOverviewResolution = 8192;

struct TraceOverview {
  // lanes and their reduced ranges; strings, ranks, steps, clocks, sizes, format and
  // t_min/t_max as in the full model; no memory samples, runtime calls or notes.
  TraceModel model;
  std::vector<int64_t> counts;  // per model.ranges: ranges of the full model it stands for
  int64_t quantum_ns = 1;       // q above
  int64_t full_ranges = 0;      // ranges of the full model (= sum of counts)
};

// The overview of `m` (see above). resolution < 1 is taken as 1.
TraceOverview build_overview(const TraceModel& m, int32_t resolution = kOverviewResolution);

// The encoding (exposed for the round-trip test). decode throws std::runtime_error on
// malformed input and leaves model.source empty.
std::string encode_overview(const TraceOverview& o);
TraceOverview decode_overview(const std::string& bytes);

// The cache file for a trace path ("" when the path names no trace files).
std::string overview_cache_path(const std::string& trace_path);

// The cache file and key of the inputs as they are now; take it before loading the trace, so
// that a write after the load can tell whether an input changed meanwhile.
struct OverviewCacheProbe {
  std::vector<std::string> files;
  std::string path, key;   // both empty: no cache (disabled, or the inputs cannot be listed)
  int64_t newest_ns = -1;  // newest input mtime (CLOCK_REALTIME ns)
  int64_t probed_at_ns = 0;
  int64_t racy_window_ns = 0;
  // A cache to write, for inputs that had settled (newest input older than the racy window).
  bool writable() const {
    return !path.empty() && !key.empty() && newest_ns >= 0 && newest_ns < probed_at_ns - racy_window_ns;
  }
};
OverviewCacheProbe probe_overview_cache(const std::string& trace_path, const LoadOptions& lo,
                                        const SummaryCacheOptions& co = {});
// The cached overview for the probed inputs, or nothing (missing, stale, corrupt, disabled).
// Never throws. model.source is set to trace_path.
std::optional<TraceOverview> read_overview_cache(const OverviewCacheProbe& p, const std::string& trace_path);
// Writes `o` (built from the inputs as probed) unless there is no cache, an input changed
// since the probe, or the newest input is younger than the racy window at the probe (a run
// still being written). true when written. Never throws.
bool write_overview_cache(const OverviewCacheProbe& p, const std::string& trace_path, const LoadOptions& lo,
                          const TraceOverview& o);

// After a run has finished writing its trace: loads it once as the studio does and writes
// the summary cache, the overview and the rank-file caches (rank_file_cache.hpp)
// beside it where they are missing or stale, so that the first `ulysses-trace summary` and
// the first studio open answer from them. ulysses-run calls it when a traced run finishes;
// `ulysses-trace prepare` is the same for runs launched otherwise. racy_window_ns: inputs
// modified less than this before are taken as still being written and not cached (0 when the
// caller knows every writer has closed, as ulysses-run does after its workers exited).
// Throws what load_trace throws; a cache that cannot be written is reported in the result.
struct PreparedCaches {
  bool summary_cached = false;   // the summary cache holds this trace's summary (now or before)
  bool overview_cached = false;  // likewise the overview
  bool loaded = false;           // the ranges had to be read (something was missing or stale)
  int64_t ranges = 0;            // host ranges as the summary counts them (when loaded)
  int64_t overview_ranges = 0;   // ranges of the overview written
  // Rank files that rank-file caches apply to (a run folder of several Ulysses rank files:
  // rank_file_cache.hpp), and how many of them have a current cache after the call.
  int rank_files = 0, rank_files_cached = 0;
  double seconds = 0;
};
PreparedCaches prepare_trace_caches(const std::string& trace_path, int64_t racy_window_ns = 0);

}  // namespace ulysses::prof
