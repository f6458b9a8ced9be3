// Profiler recording API that the engine calls. No torch, no Qt: the engine hands in plain
// values. One Tracer per process (per rank) writes one SQLite file (see schema.sql).
//
//   auto tr = Tracer::open(opts);               // nullptr-safe everywhere below
//   tr->begin_step(step);
//   { ScopedRange r(tr.get(), {Phase::Attention, Direction::Forward, layer, h0, h1}); ... }
//   tr->record_range(info, t0, t1, Tracer::kCommLane);  // async work measured elsewhere
//   tr->sample_memory(...);
//   tr->end_step(rec);                            // flush thread buffers + commit
//
// Nested host ranges (ScopedRange) are also NVTX push/pop ranges when built with NVTX.
// With a GPU activity source, every traced range and every ScopedCorrelation (put around the
// launch of work that is traced later, e.g. an async all-to-all issue) pushes an external
// correlation id, so each kernel is tied to the step/layer/phase/head range that launched it.
// Compile-time switch: ULYSSES_PROFILING=0 makes ULYSSES_RANGE and ScopedCorrelation nothing.
#pragma once

#ifndef ULYSSES_PROFILING
#define ULYSSES_PROFILING 1
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ulysses/profiler/document_shard.hpp"
#include "ulysses/profiler/memory_categories.hpp"
#include "ulysses/profiler/phase.hpp"

namespace ulysses::prof {

class GpuActivitySource;
class GpuActivitySink;
struct ClockOffset;

struct RangeInfo {
  Phase phase = Phase::Other;
  Direction dir = Direction::None;
  int32_t layer = -1;       // -1: not a layer range
  int32_t head_begin = -1;  // global head range [head_begin, head_end) this range covers, -1 = all
  int32_t head_end = -1;
  int32_t chunk = -1;      // head chunk index when head_chunks > 1
  int64_t bytes_sent = 0;  // for communication ranges: bytes this rank sent to others
  int64_t bytes_recv = 0;  //   and received from others (self-copy excluded)
  // Collective identity, set where the collective is issued (engine Comm): the process
  // group (0 = world, 1 + g = SP group g) and the group's sequence number of this
  // collective, the same on every member rank. -1 = not a collective. A range that joins
  // several messages (q, k, v sent apart) carries the first message's number.
  int32_t pg = -1;
  int64_t seq = -1;
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // tokens processed by the whole run this step
  double tokens_per_s = 0;
  double step_ms = 0;
  int64_t max_mem_bytes = 0;
};

struct MemorySample {
  int64_t allocated = 0;  // GPU: caching allocator allocated; CPU: RSS
  int64_t reserved = 0;   // GPU: reserved; CPU: RSS
  int64_t peak = 0;       // GPU: peak allocated; CPU: peak RSS (VmHWM)
};

struct TracerOptions {
  std::string path;  // SQLite file, created (parent directory must exist)
  int32_t rank = 0, world_size = 1;
  int32_t sp_rank = 0, sp_size = 1, dp_rank = 0, dp_size = 1;
  std::string device = "cpu";  // "cpu" or "cuda:N"
  std::string hostname;
  std::string run_config_json;  // resolved run config, stored in ULYSSES_RUN
  std::string run_id;
  int64_t step_begin = 0, step_end = -1;  // only these steps are recorded
  bool memory = true;
  // Live memory by category (memory_categories.hpp), sampled at both edges of every range
  // pushed on a thread and at each step's peak, into ULYSSES_MEMORY_CATEGORIES. Null: none.
  std::shared_ptr<MemoryProbe> memory_probe;
  // GPU activity (kernels, memcpy, memset, runtime API) written with each step. Unset: the
  // CUPTI source when `device` is "cuda:N" and the build has CUPTI, else none. Tests set a fake.
  std::function<std::unique_ptr<GpuActivitySource>(GpuActivitySink*)> gpu_source;
  // Trace writing: end_step hands the step (ranges, memory samples, GPU records, step row)
  // to the tracer's writer thread, which commits it in one transaction, and returns. At most
  // writer_queue_steps ended steps are uncommitted at any time: an end_step that would make
  // more waits (back-pressure; nothing is dropped), and the waits are counted (metrics
  // profiler.writer_waits / profiler.writer_wait_ms, and a line on stderr at close).
  // 0: end_step writes and commits on the calling thread (the old synchronous path).
  int32_t writer_queue_steps = 2;
  // Trace format written: 0 = this build's (trace_schema_version()); 3 = format 3's layout
  // (Ulysses attributes in a ULYSSES_RANGES table beside NVTX_EVENTS), kept to make reference
  // files for the format-3 reader's tests and the benchmarks' baseline. Anything else throws.
  int32_t trace_format = 0;
  // A file written in one go and then closed, never read while written (simulated runs,
  // engine/sim): no WAL and no fsync (the rollback journal kept in memory, synchronous=OFF).
  // The closed file is the same rollback-mode file in the same schema; only a crash mid-write
  // differs (the file is then unreadable, and its run folder has no run.json).
  bool write_once = false;
  // Test hooks. writer_test_before_commit: called on the thread that writes, before each
  // ended step's batch is written (a slow or failing sink: what it throws is a write error).
  // writer_test_on_full: called on the end_step thread just before it waits for the writer.
  std::function<void(int64_t step)> writer_test_before_commit;
  std::function<void()> writer_test_on_full;
};

class Tracer {
 public:
  // Lane id for ranges measured off the calling thread (async all-to-all completions).
  static constexpr int32_t kCommLane = -2;
  // Ring attention's exchanges (parallel.ring_size > 1), rows of their own: a K/V exchange
  // and the dK/dV one travelling beside it overlap each other and the all-to-alls in time, and
  // a row holds ranges that nest or follow each other only.
  static constexpr int32_t kRingLane = -3;
  static constexpr int32_t kRingGradLane = -4;
  // ZeRO stage 3's parameter all-gathers and gradient reduce-scatters (docs/ZERO.md), rows of their
  // own ("zero gather", "zero reduce-scatter"): a prefetched gather overlaps the layer computing.
  static constexpr int32_t kZeroGatherLane = -5;
  static constexpr int32_t kZeroReduceLane = -6;

  // Throws std::runtime_error with a message on failure to create the file.
  static std::unique_ptr<Tracer> open(const TracerOptions& opts);
  virtual ~Tracer();

  // Host clock used for every timestamp (CLOCK_MONOTONIC ns). Test hook:
  // ULYSSES_TEST_CLOCK_OFFSET="R:NS" adds NS to it in the process whose RANK is R (a rank
  // whose clock really differs, for the clock alignment test).
  static int64_t now_ns();

  virtual void begin_step(int64_t step) = 0;
  // Hands every thread's buffered ranges, the memory samples and the step row to the writer
  // (TracerOptions::writer_queue_steps) as one transaction. A killed process keeps every step
  // whose transaction committed: all ended steps but at most the last writer_queue_steps
  // (all of them with 0, or once flush() has returned). Throws the writer's error, if any.
  virtual void end_step(const StepRecord& rec) = 0;
  // Returns when every ended step is committed (e.g. at a checkpoint); throws a write error
  // not yet reported.
  virtual void flush() {}
  // Whether the current step is recorded (profile.step_begin..step_end).
  virtual bool active() const = 0;

  // Nested range on the calling thread (use ScopedRange).
  virtual void push(const RangeInfo& info) = 0;
  virtual void pop() = 0;
  // A finished interval measured elsewhere; lane kCommLane puts it on the rank's
  // "communication" thread row, kRingLane / kRingGradLane on the "ring kv" / "ring dkv" rows,
  // any other value is the calling thread's row.
  virtual void record_range(const RangeInfo& info, int64_t start_ns, int64_t end_ns, int32_t lane = kCommLane) = 0;

  // A range whose times are known only later (a collective's device timestamps on a GPU rank,
  // readable once the device has passed them): `times` is called at the end of this step
  // (end_step, or close) on the stepping thread, and the range is recorded with the times it
  // gives (none when it returns false or throws). Default: called at once.
  virtual void record_range_later(const RangeInfo& info, std::function<bool(int64_t*, int64_t*)> times,
                                  int32_t lane = kCommLane) {
    int64_t s = 0, e = 0;
    if (times && times(&s, &e)) record_range(info, s, e, lane);
  }

  // The planner's predicted peak by category (MemEdge::Planned; rank 0 writes it once).
  virtual void record_planned_memory(const MemoryCategories& planned) {}
  // The planner's curve (MemEdge::PlannedBegin / PlannedEnd rows, in order; rank 0 writes it once).
  virtual void record_planned_curve(const std::vector<PlannedMemoryPoint>& curve) {}
  // The documents this rank's sequence shard holds in the current step (data.kind = "documents";
  // document_shard.hpp), into ULYSSES_DOCUMENTS. Ignored outside the profiled steps.
  virtual void record_documents(const std::vector<DocumentShard>& rows) {}
  // The planner's named groups alive at its peak (ULYSSES_PEAK_TENSORS rows of step -1; rank 0
  // writes them once), largest first.
  virtual void record_planned_tensors(const std::vector<PeakTensor>& rows) {}
  // Memory sample at a phase boundary; `label` names the boundary.
  virtual void sample_memory(const char* label, const MemorySample& m) = 0;
  // Process RSS and peak RSS from /proc/self/status (CPU ranks).
  static MemorySample process_memory();

  // Free-form run metric (e.g. "a2a_bytes_per_layer_formula").
  virtual void set_metric(const std::string& name, double value) = 0;

  virtual void close() = 0;  // final flush + commit, joins the writer; also done by the destructor

  // Names the calling thread's row in the trace (ThreadNames); the thread that opened
  // the tracer is "main", ranges on kCommLane go to the "comm" row.
  virtual void set_thread_name(const std::string& name) {}

  // This rank's measured clock offset to rank 0 (sync_clock, clock_sync.hpp); kind "start"
  // (after the process groups are up) or "close" (at the end, for drift). ULYSSES_CLOCK.
  virtual void record_clock(const std::string& kind, const ClockOffset& c) {}

  // GPU work the calling thread launches until pop_correlation() is tagged with `info`
  // (external correlation id, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION). For launches whose
  // range is recorded later with record_range (async all-to-all): same `info`. Use
  // ScopedCorrelation. No-op without a GPU activity source or outside the profiled steps.
  virtual void push_correlation(const RangeInfo& info) {}
  virtual void pop_correlation() {}
};

class ScopedRange {
 public:
  ScopedRange(Tracer* t, const RangeInfo& info) : t_(t && t->active() ? t : nullptr) {
    if (t_) t_->push(info);
  }
  ~ScopedRange() {
    if (t_) t_->pop();
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  Tracer* t_;
};

// Tags the GPU work launched in its scope with `info` (see Tracer::push_correlation).
class ScopedCorrelation {
 public:
  ScopedCorrelation(Tracer* t, const RangeInfo& info) : t_(ULYSSES_PROFILING && t && t->active() ? t : nullptr) {
    if (t_) t_->push_correlation(info);
  }
  ~ScopedCorrelation() {
    if (t_) t_->pop_correlation();
  }
  ScopedCorrelation(const ScopedCorrelation&) = delete;
  ScopedCorrelation& operator=(const ScopedCorrelation&) = delete;

 private:
  Tracer* t_;
};

}  // namespace ulysses::prof

#define ULYSSES_CAT2(a, b) a##b
#define ULYSSES_CAT(a, b) ULYSSES_CAT2(a, b)
#if ULYSSES_PROFILING
#define ULYSSES_RANGE(tracer, ...) \
  ::ulysses::prof::ScopedRange ULYSSES_CAT(ulysses_range_, __LINE__)(tracer, ::ulysses::prof::RangeInfo{__VA_ARGS__})
#else
#define ULYSSES_RANGE(tracer, ...) ((void)0)
#endif
