// Low-level writer of one rank's trace file (schema.sql): creates the file in WAL mode and
// appends ranges, steps, memory samples, metrics and GPU activity with prepared statements
// inside explicit transactions. Used by the host tracer, the CUPTI tracer, the benchmarks
// and tests that build traces by hand. Not thread-safe: callers serialize.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::prof {

struct RangeRecord {
  int64_t start_ns = 0, end_ns = 0;
  int64_t tid = 0;       // OS thread id, or kCommTid
  bool push_pop = true;  // eventType 59 (push/pop) or 60 (start/end)
  int64_t step = -1;
  RangeInfo info;
};

struct KernelRecord {
  int64_t start_ns = 0, end_ns = 0;
  int32_t device = 0, context = 0, stream = 0;
  int64_t correlation = 0;
  std::string name;  // demangled
  int32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  int32_t registers = 0, static_smem = 0, dynamic_smem = 0;
};

struct MemcpyRecord {
  int64_t start_ns = 0, end_ns = 0;
  int32_t device = 0, context = 0, stream = 0;
  int64_t correlation = 0;
  int64_t bytes = 0;
  int32_t copy_kind = 0;   // CUpti_ActivityMemcpyKind
  bool is_memset = false;  // CUPTI_ACTIVITY_KIND_MEMSET instead
  int32_t value = 0;       // memset value
};

struct RuntimeRecord {
  int64_t start_ns = 0, end_ns = 0;
  int64_t tid = 0;
  int64_t correlation = 0;
  std::string name;  // cudaLaunchKernel, ...
  int32_t return_value = 0;
};

class TraceWriter {
 public:
  // Creates (truncates) opts.path, applies schema.sql, writes ULYSSES_RUN/RANKS/PHASES,
  // PROCESSES and META_DATA_EXPORT. pid < 0: getpid(). Throws std::runtime_error.
  explicit TraceWriter(const TracerOptions& opts, int64_t pid = -1);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  int64_t pid() const;
  int64_t string_id(const std::string& s);  // StringIds row (inserted on first use)
  void name_thread(int64_t tid, const std::string& name);

  void begin();   // BEGIN (no-op when already inside a transaction)
  void commit();  // COMMIT (no-op outside a transaction)

  // Returns the NVTX_EVENTS rowid (= ULYSSES_RANGES.eventId).
  int64_t write_range(const RangeRecord& r);
  void write_step(const StepRecord& rec, int64_t start_ns, int64_t end_ns);
  void write_memory(int64_t t_ns, int64_t step, const std::string& label, const MemorySample& m);
  // One ULYSSES_MEMORY_CATEGORIES row.
  void write_memory_categories(int64_t t_ns, int64_t step, MemEdge edge, int32_t phase, int32_t layer,
                               const MemoryCategories& c);
  // ULYSSES_DOCUMENTS rows (document_shard.hpp).
  void write_documents(const std::vector<DocumentShard>& rows);
  // The ULYSSES_PEAK_TENSORS rows of one step's peak (rows in order, ord 0 first).
  void write_peak_tensors(int64_t step, const std::vector<PeakTensor>& rows);
  void write_kernel(const KernelRecord& k);
  void write_memcpy(const MemcpyRecord& m);
  void write_runtime(const RuntimeRecord& r);
  // CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION row (externalKind 3 = CUSTOM0).
  void write_external_correlation(int64_t correlation, int64_t external_id);
  // ULYSSES_EXTERNAL_IDS row: what launched the GPU work tagged `external_id`. event_id =
  // the range's NVTX_EVENTS rowid, or < 0 for a Tracer::push_correlation (no range of its own).
  void write_external_id(int64_t external_id, int64_t event_id, int64_t step, const RangeInfo& info);
  void write_gpu_info(int32_t device, const std::string& name, int64_t total_memory, int32_t sm_count, int32_t cc_major,
                      int32_t cc_minor);
  void set_metric(const std::string& name, double value);
  // ULYSSES_CLOCK row: this rank's clock offset to rank 0 ("start" or "close").
  void write_clock(const std::string& kind, const ClockOffset& c);

  void close();  // commit, checkpoint the WAL, close

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses::prof
