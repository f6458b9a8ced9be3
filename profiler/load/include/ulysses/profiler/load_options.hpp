// What every trace reader shares: the options of a load and the error a reader throws. The
// load room (profiler/README.md); load_trace itself is in trace_store.hpp. No torch, no Qt.
#pragma once

#include <cstdint>
#include <stdexcept>

namespace ulysses::prof {

// Any problem reading a trace, with a message a user can act on (names the file and what is
// wrong: missing, empty, not SQLite, truncated/corrupt, written by a newer version, ...).
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
  // The sequential loader: files one after another and
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

}  // namespace ulysses::prof
