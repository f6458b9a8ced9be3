// Internal to the trace loader (not installed): the builder that readers append ranges,
// ranks and strings to, the file check every reader runs first, the per-format readers and
// the lane builder that turns raw ranges into nested lanes. One concern per source file:
//   trace_file_check.cpp  find_rank_files, validate_file (missing, empty, not SQLite, ...)
//   trace_store.cpp       load_trace, the Ulysses trace reader, finishing the model
//   nsys_reader.cpp       `nsys export --type sqlite` files
//   lane_builder.cpp      sub-lanes, parents/depths, head-range lanes, kernel -> launcher
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <system_error>
#include <thread>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ulysses/profiler/sqlite_db.hpp"
#include "ulysses/profiler/parallel.hpp"
#include "ulysses/profiler/load_options.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof::detail {

// The model's timed tables and the time fields of their rows: the one list a new timed field
// joins (docs/CODING.md, "Adding a timed field to the trace"). Calls f(rows, times) per table,
// in this order, where times(row, t) calls t(field) on each time of a row. The clock
// conversion at import (align_to_rank0) shifts exactly these; clocks themselves are not in it.
template <class F>
void for_each_timed_table(TraceModel& m, F&& f) {
  f(m.ranges.rows(), [](TraceRange& r, auto&& t) {
    t(r.start_ns);
    t(r.end_ns);
  });
  f(m.steps, [](StepInfo& x, auto&& t) {
    t(x.start_ns);
    t(x.end_ns);
  });
  f(m.memory, [](auto& x, auto&& t) { t(x.t_ns); });
  f(m.memory_categories, [](auto& x, auto&& t) { t(x.t_ns); });
  f(m.runtime, [](auto& x, auto&& t) {
    t(x.start_ns);
    t(x.end_ns);
  });
}

// How far each timed table (and the clocks) of a model reached: the rows a file adds after it
// are that file's, converted to rank 0's clock at its import.
struct TimedMarks {
  size_t clocks = 0;
  std::vector<size_t> rows;  // per table of for_each_timed_table; none: from the first row
  size_t from(size_t table) const { return table < rows.size() ? rows[table] : 0; }
  static TimedMarks of(TraceModel& m) {
    TimedMarks t;
    t.clocks = m.clocks.size();
    for_each_timed_table(m, [&](auto& rows, auto) { t.rows.push_back(rows.size()); });
    return t;
  }
};

// Source of raw ranges before lanes are final: (rank, kind, id) -> lane.
struct SourceLane {
  int32_t rank = 0;
  LaneKind kind = LaneKind::HostThread;
  int64_t id = 0;  // tid, or (device << 32 | stream)
  std::string name;
  int order = 0;  // sort key within the rank
};

// A rank of a foreign trace before its final number is known: hints gathered while reading.
struct ForeignRank {
  int32_t provisional = 0;  // the rank number ranges carry until renumber_foreign_ranks
  int32_t file_index = 0;   // order of its file in the folder (or 0)
  int64_t pid = 0;
  int64_t device = -1;     // CUDA device, -1 when none / unknown
  int64_t hint = -1;       // rank the trace itself states (NCCL init payload, distributedInfo)
  int64_t name_hint = -1;  // rank number in the file name ("rank3", "report_3"), one rank per file only
};

struct Builder {
  TraceModel m;
  std::vector<ForeignRank> foreign;
  std::unordered_map<std::string, int32_t> string_index;
  std::vector<SourceLane> sources;
  std::map<std::tuple<int32_t, int, int64_t>, int32_t> source_index;
  // Parallel reader: each file's ranges (string and source ids already the run's), in file
  // order; build_lanes moves them into m.ranges (after m.ranges' own) in its one pass, so
  // they are never copied into one merged vector first.
  std::vector<std::vector<TraceRange>> pending_ranges;
  // The run the Ulysses rank files read so far belong to (ULYSSES_RUN: runId, worldSize; ""
  // and -1 when no file said), and the file that said so first: rank files of two runs mixed
  // in one folder are refused (check_same_run), not merged into one picture.
  std::string run_id, run_id_file;
  int64_t world_size = -1;

  // Names in a trace (ranges, kernels, threads, devices) are short; a hostile or broken file
  // can hold a 50 MB one, which every reader and the studio's drawing would pay for again
  // and again. Longer strings are cut (at a UTF-8 boundary) and marked with "...".
  static constexpr size_t kMaxStringBytes = 4096;
  static std::string capped(const std::string& s) {
    if (s.size() <= kMaxStringBytes) return s;
    size_t n = kMaxStringBytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a character
    return s.substr(0, n) + "...";
  }
  int32_t intern(const std::string& s_in) {
    const std::string cut = s_in.size() > kMaxStringBytes ? capped(s_in) : std::string();
    const std::string& s = cut.empty() ? s_in : cut;
    auto it = string_index.find(s);
    if (it != string_index.end()) return it->second;
    int32_t id = static_cast<int32_t>(m.strings.size());
    m.strings.push_back(s);
    string_index.emplace(s, id);
    return id;
  }
  int32_t source(int32_t rank, LaneKind kind, int64_t id, const std::string& name, int order) {
    auto key = std::make_tuple(rank, static_cast<int>(kind), id);
    auto it = source_index.find(key);
    if (it != source_index.end()) return it->second;
    int32_t idx = static_cast<int32_t>(sources.size());
    sources.push_back({rank, kind, id, name, order});
    source_index.emplace(key, idx);
    return idx;
  }
};

inline std::string describe(const std::string& path) { return "trace file '" + path + "'"; }

// Adds one Ulysses rank file's run (its ULYSSES_RUN runId and worldSize) to what `b` has read:
// throws TraceError when it names another run than the files before it (an empty id or a
// world size of -1 says nothing).
inline void check_same_run(Builder& b, const std::string& run_id, int64_t world_size, const std::string& path) {
  if (!run_id.empty()) {
    if (b.run_id.empty()) {
      b.run_id = run_id;
      b.run_id_file = path;
    } else if (run_id != b.run_id) {
      throw TraceError(describe(path) + " is of run '" + run_id + "', " + b.run_id_file + " of run '" + b.run_id +
                       "': rank files of different runs in one folder; remove the stray file");
    }
  }
  if (world_size >= 0) {
    if (b.world_size < 0) {
      b.world_size = world_size;
      if (b.run_id_file.empty()) b.run_id_file = path;
    } else if (world_size != b.world_size) {
      throw TraceError(describe(path) + " is of a run of " + std::to_string(world_size) + " ranks, " +
                       (b.run_id_file.empty() ? std::string("the files before it") : b.run_id_file) + " of " +
                       std::to_string(b.world_size) + ": rank files of different runs in one folder");
    }
  }
}

// Throws TraceError unless `path` is a regular file: a FIFO would block the reader's open
// until a writer came. The one check of the SQLite and JSON readers.
inline void require_regular_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw TraceError(describe(path) + " is not a regular file (a FIFO, a socket or a device?)");
}

// The TraceError for a file SQLite could not read: still locked by another process after the
// busy timeout (sql::Busy), or corrupt. One message for the three readers.
[[noreturn]] inline void throw_unreadable(const std::string& path, const std::exception& e) {
  if (dynamic_cast<const sql::Busy*>(&e))
    throw TraceError(
        describe(path) + " is locked: " + e.what() +
        ". Is a run, `ulysses-trace prepare` or another tool still writing it? Open it again when it is done");
  throw TraceError(describe(path) + " is corrupt or unreadable: " + e.what());
}

enum class FileKind { Ulysses, Nsys };

// Checks a file before SQLite reads it; returns its kind and leaves it open in *out_db.
// Throws TraceError (trace_file_check.cpp).
FileKind validate_file(const std::string& path, sql::Db* out_db);

// The N of a rank file named rank<N>.sqlite (decimal digits, leading zeros allowed); -1 when the
// file's name is not one. Throws TraceError naming the file when N is past the largest rank
// (2147483647). The one parser of rank file names: find_rank_files and the check that
// rank<N>.sqlite holds rank N (a 10-digit name threw std::stoi's "stoi", another passed unchecked).
int32_t rank_in_file_name(const std::string& path);

inline int32_t to_i32(int64_t v) { return static_cast<int32_t>(v); }

// Reads one trace file of any kind into b (trace_store.cpp): what a rank-file cache stores.
void read_file(Builder& b, const std::string& path, int32_t file_index, const LoadOptions& opts);
// The model of files read into their own builders (file order), as load_trace builds a run
// folder's: each aligned to rank 0 (opts.align_clocks), merged, lanes built (trace_store.cpp).
TraceModel model_of_file_builders(const std::vector<Builder*>& files, const LoadOptions& opts);
// The native reader (native_reader.cpp): a Ulysses rank file (or an old-layout export) whose
// kind validate_file decided, opened as `db`, into b.
void read_native_file(Builder& b, sql::Db& db, const std::string& path, int32_t file_index, const LoadOptions& opts,
                      FileKind kind, const std::string& fname);
// Post-processing (trace_assembly.cpp). Moves what one file added (the rows from `since` on) onto
// rank 0's clock with the offsets it stored: the clock conversion at import.
void align_to_rank0(TraceModel& m, const TimedMarks& since = {});
// Foreign ranks renumbered, lanes built, the time span set: the model as load_trace returns it.
void finish_model(Builder& b, const LoadOptions& opts);
// The rank files of a Ulysses run folder read at once and merged in file order; false (b
// untouched) when a file is not a plain Ulysses rank file (the caller reads them one by one).
bool read_rank_files_parallel(Builder& b, const std::vector<std::string>& files, const LoadOptions& opts,
                              std::map<int32_t, std::string>& claimed);
// The note of a rank file left out of a folder as another run's.
inline constexpr const char* kLeftOutOfAnotherRun = "left out (a rank file of another run in this folder)";

// Rank-file caches (rank_file_cache.cpp; rank_file_cache.hpp). Probe before reading the file.
struct RankFileCacheProbe {
  std::string path, key;  // empty: no cache (off, or the file cannot be stat'ed)
  int64_t newest_ns = -1, probed_at_ns = 0;
  int32_t file_index = 0;  // the file's place in its folder (part of the key)
};
bool rank_file_caches_on(const LoadOptions& lo);
// The files of `trace_path` that rank-file caches apply to: the rank files of a run folder
// with several, all Ulysses traces (none for one file, a folder of one rank, foreign traces,
// or a file that cannot be read).
std::vector<std::string> rank_files_for_caches(const std::string& trace_path);
// Whether `file` (the file_index-th of its folder) has a cache that matches it now (key and
// checksum; not decoded).
bool rank_file_cache_current(const std::string& file, int32_t file_index, const LoadOptions& lo);
RankFileCacheProbe probe_rank_file_cache(const std::string& file, int32_t file_index, const LoadOptions& lo);
// Replaces *b with the cached read; false (b untouched) when there is no valid cache.
bool read_rank_file_cache(const RankFileCacheProbe& p, Builder* b);
// Writes b (what read_file read from `file`) when the file had settled and is unchanged.
bool write_rank_file_cache(const RankFileCacheProbe& p, const std::string& file, const LoadOptions& lo,
                           const Builder& b);

// Appends the ranks (one per process that owns GPU work, or per process with ranges) and the
// ranges of one open nsys export (nsys_reader.cpp).
void read_nsys_file(Builder& b, sql::Db& db, const std::string& path, int32_t file_index, const LoadOptions& opts);
// The name PyTorch NVTX ranges are grouped under ("aten::mm, seq = 1, op_id = 2" -> "aten::mm").
std::string group_pytorch_name(const std::string& s);

// Reader of PyTorch profiler (Kineto / legacy autograd profiler) chrome-trace JSON files
// (kineto_reader.cpp); `file_index` orders ranks when the files carry no rank.
void read_kineto_file(Builder& b, const std::string& path, int32_t file_index, const LoadOptions& opts);
// Whether `path` starts like a JSON document ('{' or '[' after a UTF-8 byte order mark and blanks).
bool looks_like_json(const std::string& path);
// Whether `path` is a regular file that starts with SQLite's header ("SQLite format 3\0").
bool has_sqlite_header(const std::string& path);
// What a file that is neither JSON nor SQLite starts with, from its first bytes `head`, for a
// message: "a text file starting \"hello\"", "binary data starting 00 01 02 03".
std::string describe_content(const std::string& head);
// Where a JSON text's first token starts in `head` (past a UTF-8 byte order mark and blanks);
// npos when there is none.
size_t json_text_start(const std::string& head);
// Whether `path` is a PyTorch profiler trace: an event array, or an object whose first 64 KiB
// name traceEvents / schemaVersion / distributedInfo (trace_file_check.cpp).
bool looks_like_profiler_json(const std::string& path);
// Times a trace may hold: strictly within +-2^62 ns (146 years) of its clock's zero, so that
// any difference of two fits in int64. Rows outside it (INT64_MIN..INT64_MAX kernels) would make
// durations overflow into negative step times (and [-2^62, 2^62] itself a duration of 2^63);
// the readers leave them out with a note.
inline constexpr int64_t kMaxForeignTimeNs = int64_t{1} << 62;
inline bool time_out_of_range(int64_t t) { return t <= -kMaxForeignTimeNs || t >= kMaxForeignTimeNs; }
// Largest rank number a foreign trace may state (in distributedInfo, an NCCL rank, a file
// name); larger ones are no rank hint at all (2^32 was cut to int32: two "rank 0"s).
inline constexpr int64_t kMaxForeignRank = int64_t{1} << 20;
// A rank's stored clock offset (and its error and when it was measured) within +-2^61 ns, and
// a drift between the start and close measurements of at most 1% (10000 ppm): else that measurement
// is not applied (align_to_rank0, with a note).
inline constexpr int64_t kMaxClockOffsetNs = int64_t{1} << 61;
// Sets a range's layer, heads and chunk from what a file holds: a value past kMaxTraceLayers,
// heads that are no range within kMaxTraceHeads, or a chunk past kMaxTraceChunks (16-bit fields)
// are read as absent. Returns how many of the three were so (for the reader's note).
inline int set_layer_heads_chunk(TraceRange& r, int64_t layer, int64_t head_begin, int64_t head_end, int64_t chunk) {
  int bad = 0;
  const bool layer_ok = layer >= -1 && layer < kMaxTraceLayers;
  const bool heads_ok =
      (head_begin == -1 && head_end == -1) || (head_begin >= 0 && head_begin < head_end && head_end <= kMaxTraceHeads);
  const bool chunk_ok = chunk >= -1 && chunk < kMaxTraceChunks;
  r.layer = static_cast<int16_t>(layer_ok ? layer : -1);
  r.head_begin = static_cast<int16_t>(heads_ok ? head_begin : -1);
  r.head_end = static_cast<int16_t>(heads_ok ? head_end : -1);
  r.chunk = static_cast<int16_t>(chunk_ok ? chunk : -1);
  bad += !layer_ok;
  bad += !heads_ok;
  bad += !chunk_ok;
  return bad;
}
inline constexpr double kMaxClockDrift = 1e-2;
// A GPU row's device id outside [0, kMaxForeignDevice) (nsys writes -1 when CUPTI did not say)
// becomes kUnknownDevice: still a GPU, labelled "cuda (device id unknown)", never "cpu", and
// no negative or 2^40 id shifted into a lane key.
inline constexpr int64_t kMaxForeignDevice = int64_t{1} << 20;
inline constexpr int64_t kUnknownDevice = kMaxForeignDevice;
inline int64_t gpu_device_id(int64_t dev) { return dev < 0 || dev >= kMaxForeignDevice ? kUnknownDevice : dev; }
// "gpu 3", or "gpu ?" for kUnknownDevice (lane names); "cuda:3" or "cuda (device id unknown)" (ranks).
inline std::string gpu_lane_label(int64_t dev) {
  return dev == kUnknownDevice ? std::string("gpu ?") : "gpu " + std::to_string(dev);
}
inline std::string gpu_rank_device(int64_t dev) {
  return dev == kUnknownDevice ? std::string("cuda (device id unknown)") : "cuda:" + std::to_string(dev);
}
// The source key of one (device, stream) lane, for every reader: unsigned, so a negative or
// huge id is no signed shift (undefined behaviour) whatever a file holds.
inline int64_t stream_lane_key(int64_t dev, int64_t stream) {
  return static_cast<int64_t>((static_cast<uint64_t>(dev) << 32) | (static_cast<uint64_t>(stream) & 0xFFFFFFFFu));
}
// The rank a foreign trace's file name states ("rank3.json", "report_rank-3.sqlite"), or -1
// (none, or past kMaxForeignRank) (foreign_ranks.cpp).
int64_t rank_from_file_name(const std::string& fname);
// `path` as an SQLite URI ("file:" and the path, percent-encoded), for URI parameters such as
// immutable=1 (trace_file_check.cpp).
std::string sqlite_uri(const std::string& path);

// Gives the ranks of foreign traces their final numbers: the ranks the traces state when
// every rank has a distinct one, else the numbers in the file names, else the order (file,
// device, pid). Rewrites ranges, sources, runtime calls and RankInfo (foreign_ranks.cpp).
void renumber_foreign_ranks(Builder& b);
// Where a rank shows the Ulysses pattern (an all-to-all just before and just after each
// attention), labels those collectives a2a_seq_to_head / a2a_head_to_seq, the attention
// attention, and numbers the layers (the k-th attention of a step); other collectives of a
// foreign trace count as communication. Runs on final lanes (parents known).
void label_foreign_phases(TraceModel& m);

// parallel_for: ulysses/profiler/parallel.hpp (the pool the loader shares with the studio).

// Makes the next `count` elements of v's capacity (past its size) ready to be written: on
// Linux, asks for transparent huge pages there (a hint; 2 MB pages take 512 times fewer page
// faults) and, with threads != 1, touches their pages on up to `threads` threads (0 = one per
// core). The first write to fresh memory takes a page fault per page; left to the one thread
// that then fills the vector (resize value-initialises every range), the faults of a 1.5 GB
// model cost it seconds.
template <typename T>
void prepare_capacity(std::vector<T>& v, size_t count, int threads) {
  const size_t bytes = std::min(count, v.capacity() - v.size()) * sizeof(T);
  constexpr size_t kHuge = size_t{2} << 20, kPage = 4096;
  if (bytes < 4 * kHuge) return;
  char* const p = reinterpret_cast<char*>(v.data() + v.size());
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~uintptr_t{kHuge - 1};
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t{kHuge - 1};
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#endif
  if (threads == 1) return;
  constexpr size_t kSlice = 4u << 20;
  parallel_for((bytes + kSlice - 1) / kSlice, threads, [&](size_t k) {
    const size_t end = std::min(bytes, (k + 1) * kSlice);
    // Raw capacity, no object lives there yet: a volatile store per page makes the kernel back it.
    for (size_t at = k * kSlice; at < end; at += kPage) static_cast<volatile char*>(p)[at] = 0;
  });
}

// Orders each source's ranges of one file as build_lanes will (by start, longer first), ties in
// the order read, each source's ranges keeping the places they hold in the vector. The
// parallel reader does it per file, on its threads, before the file's rank-file cache is
// written, so build_lanes finds its lanes sorted (one pass each) whether the ranges came from
// the rows or from the cache, and both give the same order.
void order_file_ranges(std::vector<TraceRange>& ranges);

// Lane building (lane_builder.cpp), in this order once every file is read:
// ranges get final lanes (rank-grouped, split where ranges of one source overlap without
// nesting), parents and depths. `threads` < 0: the legacy way (one sort of the whole range
// vector); otherwise one pass distributes ranges by lane and the lanes are sorted on up to
// `threads` threads (0 = one per core). room_for_head_lanes: the range vector is given the
// capacity add_head_lanes will need (parallel way only).
void build_lanes(Builder& b, int threads = -1, bool room_for_head_lanes = false);
// Appends per-rank HeadRange lanes (copies), keeping lanes grouped by rank. exact_reserve =
// false: the legacy loader's way (every range copied into a new vector reserved for the
// originals only, so the copies grow it); true: in place, rank blocks moved up once (in
// pieces copied in parallel) and each rank's copies written on up to `threads` threads (0 =
// one per core). Same model either way.
void add_head_lanes(TraceModel& m, bool exact_reserve = true, int threads = 1);
// Kernel -> the host range that launched it (TraceRange::origin).
// Ranks are linked on up to `threads` threads (0 = one per core).
void link_kernels_to_launchers(TraceModel& m, int threads = 1);
// Then the kernels still without one: by launch time, to the innermost range of their rank's
// stepping thread (TraceModel::time_attributed).
void attribute_kernels_by_time(TraceModel& m);

}  // namespace ulysses::prof::detail
