// Rank-file caches: what the loader read from one Ulysses rank file, kept
// beside it in a compact binary form, so that a run folder opened again is read without
// stepping through SQLite's rows (about 0.9 µs of CPU per range: most of a load's time).
//
// What one holds: the file's run id and world size (ULYSSES_RUN), its strings, thread/stream sources, ranks, host
// ranges, kernels and copies (every field the SQLite reader sets; times before clock alignment), steps, memory samples,
// CUDA runtime calls and clock offsets: exactly what the SQLite reader hands to the rest of the loader. Lanes, nesting,
// head-range copies and alignment are then built from it by the same code as from the SQLite rows, so a cache cannot
// hand the studio a model the loader would not build, and a decoded cache passes the same checks (names and sources
// inside their tables, no negative duration, valid phases).
//
// Where: RUN/trace/.rank{r}.sqlite.ulysses-read-cache, one per rank file; used only for run
// folders of several Ulysses rank files (the parallel reader; one file, nsys exports and
// PyTorch traces are read without one). Keyed like the summary cache (profiler build id,
// LoadOptions::gpu_activity, the file's place in its folder, and the file's and its -wal's
// name, size, mtime and inode): a
// rank file that changes, or a new build, makes its cache stale and it is read from SQLite
// again. Written atomically, only when asked (LoadOptions::write_file_caches: ulysses-run at
// the end of a traced run through prepare_trace_caches, `ulysses-trace prepare`, the studio's
// first open), never for a file modified within the racy window (a run still being written);
// ignored when missing, stale, torn or malformed; off with LoadOptions::file_caches = false or
// ULYSSES_TRACE_NO_CACHE. No torch, no Qt.
#pragma once

#include <cstdint>
#include <string>

#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::prof {

// 2: ranges by source and start; 3: the run id and world size; 4: a range's extra fields
// (TraceModel::ranges.extras()) only when it has them.
constexpr uint32_t kRankFileCacheFormat = 8;  // 5: memory by category; 6: documents per shard; 7: peak tensors;
                                              // 8: the timed tables in cache_io's one codec

// The cache file of a rank file: dirname(F)/.F.ulysses-read-cache.
std::string rank_file_cache_path(const std::string& rank_file);

// The encoding, exposed for the tests and the fuzz target. encode_rank_file reads the file as
// the loader does (throws TraceError like load_trace; std::runtime_error for a file that is not
// a plain Ulysses rank file). model_from_rank_file_cache decodes a payload and builds the model
// from it as load_trace builds one file's (lanes, nesting, head lanes, alignment); throws
// std::runtime_error on malformed input.
std::string encode_rank_file(const std::string& rank_file, const LoadOptions& lo = {});
TraceModel model_from_rank_file_cache(const std::string& payload, const LoadOptions& lo = {});

}  // namespace ulysses::prof
