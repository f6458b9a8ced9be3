// Reading traces: load a run directory (RUN/trace/rank*.sqlite), one rank's .sqlite, an
// `nsys export --type sqlite` file or PyTorch profiler JSON (one file or a folder) into a
// TraceModel. Also the schema version and text the
// writer uses (profiler/schema.sql, embedded at build time). No torch, no Qt.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof {

// Any problem reading a trace, with a message a user can act on (names the file and what is
// wrong: missing, empty, not SQLite, truncated/corrupt, written by a newer version, ...).
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// PRAGMA user_version of traces this build writes; load_trace refuses newer files.
int trace_schema_version();
// The text of profiler/schema.sql (CREATE TABLE ... statements, idempotent).
const char* trace_schema_sql();

// The rank files of a run directory: RUN/trace/rank*.sqlite sorted by rank number, or
// RUN/rank*.sqlite when RUN is itself the trace folder. Empty when none.
std::vector<std::string> find_rank_files(const std::string& run_dir);

// Foreign traces in a folder: *.sqlite (Nsight Systems exports), *.json (PyTorch profiler),
// any file name, in natural name order ("rank2" before "rank10"). Empty when none.
std::vector<std::string> find_foreign_files(const std::string& dir);

// The files load_trace(path) reads, in its order: a folder's rank files, else its foreign
// traces; a file itself. Empty when the path is missing or a folder without traces.
std::vector<std::string> trace_input_files(const std::string& path);

// Whether `path` is a foreign trace load_trace reads: a PyTorch profiler .json (not a run
// config), or a folder of such files / Nsight Systems exports without Ulysses rank files.
bool is_foreign_trace(const std::string& path);

// Whether load_trace(path) reads `path` as a trace, by content, not by name: a file that is an
// SQLite database, a PyTorch profiler JSON or gzip-compressed (the loader says to unpack it),
// or a folder with trace files (trace_input_files). The studio's test for "open as a trace",
// so that it takes what ulysses-trace takes (a .json that is an Nsight export, a folder of
// Nsight exports named rank0.sqlite, rank1.sqlite).
bool is_trace_input(const std::string& path);

struct LoadOptions {
  // Also build LaneKind::HeadRange lanes: copies of every host range that carries a head
  // range, one lane per global head range per rank (for per-head timelines). Analysis
  // ignores these lanes. Off saves memory on very large traces.
  bool head_lanes = true;
  bool gpu_activity = true;  // kernels, memcpy, memset (CUPTI / nsys)
  // Shift each rank's times onto rank 0's clock with its measured offset (ULYSSES_CLOCK).
  bool align_clocks = true;
  // Rank files read at once, one per thread (Ulysses run folders; foreign traces are read one
  // file after another). 0 = one per core, never more than files.
  int threads = 0;
  // The loader as it was before the parallel one (issue 13 item 6): files one after another and
  // one sort of the whole range vector. Same model (ranges equal in lane, start and end may
  // come in another order); kept as the benchmark's baseline and the tests' reference.
  bool legacy = false;
  // Rank-file caches (rank_file_cache.hpp): read a rank file's cache instead of its SQLite rows
  // when it is valid (run folders of several Ulysses rank files; off as well under
  // ULYSSES_TRACE_NO_CACHE), and with write_file_caches write one for each file read from
  // SQLite that was last modified at least file_cache_racy_window_ns before (older: a run still
  // being written) and did not change while it was read. A cache is never needed: any problem
  // with one (missing, stale, torn, unwritable) means the rows are read.
  bool file_caches = true;
  bool write_file_caches = false;
  int64_t file_cache_racy_window_ns = 2'000'000'000;
  // Seal the ranges into columns once loaded (RangeStore::seal: about 20 bytes per range instead
  // of 56, extra records apart). Off: they stay rows (the benchmark's baseline).
  bool seal = true;
  // Filled in when set: how the files were read.
  struct Stats {
    int files = 0;            // trace files read
    int from_file_cache = 0;  // of them, from their rank-file cache
    int file_caches_written = 0;
  };
  Stats* stats = nullptr;
};

// path = run directory, a single rank .sqlite, an nsys-exported .sqlite, a PyTorch profiler
// .json, or a folder of nsys exports / profiler traces (one per rank, any file names).
// Throws TraceError on missing/corrupt/empty/truncated/future-version input.
TraceModel load_trace(const std::string& path);
TraceModel load_trace(const std::string& path, const LoadOptions& opts);

}  // namespace ulysses::prof
