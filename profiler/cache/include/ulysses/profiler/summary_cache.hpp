// Summary cache: the analysis Summary of a trace, built once and kept beside
// the trace files, so `ulysses-trace summary`, `ulysses-trace report --html` and the studio's
// report answer without loading every range again. No torch, no Qt.
//
// What is cached: the whole Summary (every field, waiting.instances included) and a "shell"
// TraceModel — every field of the loaded model except lanes, ranges and runtime calls, which
// no renderer reads (summary_to_text / summary_to_json / summary_to_html read the source,
// format, notes, sizes, ranks, steps, memory samples and t_min). Caching the struct rather than
// the rendered text keeps one cache for every renderer (text, JSON, HTML, the studio) and
// makes each output byte-identical to the uncached one: the renderers run on the same values
// (integers and doubles are stored bit for bit). `source` is not stored: load_trace sets it to
// the path as given, and so does the cache reader.
//
// Where: for our own traces (Ulysses rank files), beside the trace files, never inside them
// (they belong to the tracer):
//   run folder                             DIR/.ulysses-summary-cache   (DIR = the folder
//                                          holding the rank files: RUN/trace or RUN)
//   one rank file F                        dirname(F)/.F.ulysses-summary-cache
// For anything else (Nsight Systems exports, PyTorch profiler traces, folders of them: the
// user's files, left exactly as they were) in the user's cache folder,
// $XDG_CACHE_HOME/ulysses/traces/<hash of the absolute path>-<name>.ulysses-summary-cache
// (src/cache_location.hpp).
// Key (all must match, else the cache is ignored and rewritten): the cache format version,
// the profiler build id (a hash of the profiler's sources, so any change to the loader or the
// analysis invalidates), the options that change the Summary (LoadOptions gpu_activity,
// align_clocks; AnalysisOptions step_begin, step_end, top_names; not head_lanes: head-range
// lanes are display copies the analysis skips, so `ulysses-trace`, which loads without them,
// and the studio, which loads with them, share one record), and for every
// input file in load order its name, size, mtime (ns), inode, and the same for its "-wal"
// file (absent or empty is recorded as absent: an empty WAL holds no frames, and SQLite's
// read-only connections create one). A file is one record: the latest summary computed.
// Never fails because of the cache: a missing, corrupt (checksum), truncated or foreign cache
// file, or an unwritable folder, just means the summary is computed from the trace. Written
// atomically (temp file + rename), and not written when an input changed while it was read or
// was modified less than `racy_window_ns` before (a run still being written; like racy git).
// Disabled by SummaryCacheOptions::enabled = false or the environment variable
// ULYSSES_TRACE_NO_CACHE set to anything but "" or "0".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_cache_key.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::prof {

// Bump when the encoding below changes (the build id covers changes to what is computed).
constexpr uint32_t kSummaryCacheFormat = 9;  // 2: WaitingAnalysis::repeated; 3: Summary::kernels_by_*; 4: comm_phases;
                                             // 7: RankMemoryRow::at_peak_layers; 5: allgather; 6: memory by category;
                                             // 8: TraceModel::documents; 9: peak tensors (TraceModel::peak_tensors,
                                             // RankMemoryRow::at_peak_tensors)

struct SummaryCacheOptions {
  bool enabled = true;  // false: neither read nor write (ANDed with the environment variable)
  // Inputs modified less than this before the summary started are treated as still being
  // written: the summary is computed but not cached.
  int64_t racy_window_ns = 2'000'000'000;
};

// The cache file for a trace path ("" when the path names no trace files).
std::string summary_cache_path(const std::string& trace_path);

struct CachedSummary {
  TraceModel model;  // the full model when computed, the shell model when read from the cache
  Summary summary;
  bool from_cache = false;
  bool written = false;  // the cache was (re)written by this call
  double load_s = 0;     // seconds in load_trace (computed) or reading the cache (from_cache)
  double analyze_s = 0;  // seconds in analyze (0 from the cache)
};

// load_trace + analyze through the cache. Throws what load_trace throws (never a cache error).
CachedSummary load_summary(const std::string& trace_path, const LoadOptions& lo, const AnalysisOptions& ao,
                           const SummaryCacheOptions& co = {});

// Only the cache: the record for these inputs and options when there is a valid one, else
// nothing (a missing, stale, corrupt or disabled cache alike). Never computes, never throws.
// The studio shows its report from this while the ranges still load for the timeline.
std::optional<CachedSummary> read_summary_cache(const std::string& trace_path, const LoadOptions& lo,
                                                const AnalysisOptions& ao, const SummaryCacheOptions& co = {});

// The encoding itself (exposed for the round-trip test): the shell of `m` and all of `s`.
std::string encode_summary(const TraceModel& m, const Summary& s);
// Inverse of encode_summary; throws std::runtime_error on malformed input. `model.source` is
// left empty.
void decode_summary(const std::string& bytes, TraceModel* m, Summary* s);

}  // namespace ulysses::prof
