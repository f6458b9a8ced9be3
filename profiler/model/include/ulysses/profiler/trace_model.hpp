// In-memory trace of a whole run (all ranks), as the analysis core and the studio read it.
// Loaded from a run directory (RUN/trace/rank*.sqlite) or from one Nsight Systems SQLite
// export. Plain structs (the ranges in a RangeStore, which gives them back as TraceRange
// values), no torch, no Qt. Fields may be added; none are removed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ulysses/profiler/document_shard.hpp"
#include "ulysses/profiler/memory_categories.hpp"
#include "ulysses/profiler/phase.hpp"
#include "ulysses/profiler/range_store.hpp"

namespace ulysses::prof {

// One CUDA runtime API call (CUPTI_ACTIVITY_KIND_RUNTIME), e.g. the cudaLaunchKernel of a
// kernel with the same correlation id. Not drawn; used by exports (Kineto "cuda_runtime").
struct RuntimeCall {
  int32_t rank = 0;
  int64_t tid = 0;  // OS thread id
  int64_t start_ns = 0, end_ns = 0;
  int64_t correlation = 0, external_id = 0;
  int32_t name_id = 0;  // index into TraceModel::strings
};

// HostThread: one OS thread's NVTX ranges; Comm: ranges recorded on Tracer::kCommLane;
// CudaStream: kernels/memcpy/memset of one stream; HeadRange: display-only COPIES of the
// rank's host ranges that carry a head range (analysis skips these lanes). When ranges of
// one source overlap without nesting (async comm chunks) the loader splits them over
// several lanes of the same kind and name suffix " #2", " #3", ...
enum class LaneKind : uint8_t { HostThread, Comm, HeadRange, CudaStream };

struct Lane {
  int32_t rank = 0;
  LaneKind kind = LaneKind::HostThread;
  std::string name;  // "main", "comm", "heads 0-3", "stream 7"
  int32_t head_begin = -1, head_end = -1;
  int64_t tid_or_stream = 0;
  // Ranges of this lane: TraceModel::ranges[first, first+count), sorted by start_ns.
  int64_t first = 0, count = 0;
};

struct RankInfo {
  int32_t rank = 0, sp_rank = 0, dp_rank = 0;
  std::string device, hostname;
  int64_t pid = 0;
};

struct StepInfo {
  int32_t rank = 0;
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_ms = 0;
  int64_t tokens = 0, max_mem_bytes = 0;
};

struct MemoryPoint {
  int32_t rank = 0;
  int64_t t_ns = 0;
  int64_t allocated = 0, reserved = 0, peak = 0;
  int32_t label_id = 0;  // index into strings
  int64_t step = -1;     // step the sample was taken in
};

// Live memory by category at one instant (ULYSSES_MEMORY_CATEGORIES, memory_categories.hpp).
struct MemoryCategorySample {
  int32_t rank = 0;
  int64_t t_ns = 0;
  int64_t step = -1;
  MemEdge edge = MemEdge::Begin;
  int32_t phase = -1, layer = -1;  // the range's (edges 0 and 1), else -1
  MemoryCategories c;
};

// One row of a step's peak table (ULYSSES_PEAK_TENSORS): a named tensor group alive at the peak
// of `step` on `rank`, `ord` its place (0 the largest).
struct PeakTensorSample {
  int32_t rank = 0;
  int64_t step = -1;
  int32_t ord = 0;
  PeakTensor t;
};

// A rank's clock against rank 0's, as measured at run start (and close) and stored in
// ULYSSES_CLOCK. The loader subtracts offset_at(t) from every time of the rank when
// `applied` (LoadOptions::align_clocks), so all ranks share rank 0's clock.
struct ClockInfo {
  int32_t rank = 0;
  bool has_start = false, has_close = false;
  int64_t start_offset_ns = 0, start_error_ns = 0, start_at_ns = 0;
  int64_t close_offset_ns = 0, close_error_ns = 0, close_at_ns = 0;
  bool applied = false;
  // Offset at local time t: linear between the two measurements (drift), constant outside.
  int64_t offset_at(int64_t t) const {
    if (!has_close || (has_start && close_at_ns <= start_at_ns)) return start_offset_ns;
    if (!has_start) return close_offset_ns;
    if (t <= start_at_ns) return start_offset_ns;
    if (t >= close_at_ns) return close_offset_ns;
    const double f = static_cast<double>(t - start_at_ns) / static_cast<double>(close_at_ns - start_at_ns);
    return start_offset_ns + static_cast<int64_t>(f * static_cast<double>(close_offset_ns - start_offset_ns));
  }
  int64_t error_ns() const { return std::max(has_start ? start_error_ns : 0, has_close ? close_error_ns : 0); }
};

struct TraceModel {
  std::string source;      // path it was loaded from
  bool from_nsys = false;  // an nsys export (no ULYSSES_* tables)
  // "ulysses" (our traces), "nsys" (`nsys export --type sqlite`) or "kineto" (PyTorch
  // profiler JSON). Foreign traces: one rank per process with GPU work (or per trace file).
  std::string format = "ulysses";
  // What a foreign trace lacked or how it was read ("kernel table has no globalPid: kernels
  // mapped to processes through CUDA runtime calls"), one line each, for the user to see.
  std::vector<std::string> notes;
  std::string config_json;  // resolved run config ("" for nsys)
  int32_t sp_size = 1, dp_size = 1, num_heads = 0, num_layers = 0;
  std::vector<std::string> strings;
  std::vector<RankInfo> ranks;
  std::vector<Lane> lanes;  // grouped by rank
  // Grouped by lane (see Lane::first/count), with their extra records; sealed by load_trace.
  RangeStore ranges;
  std::vector<StepInfo> steps;
  std::vector<MemoryPoint> memory;                      // sorted by (rank, t_ns)
  std::vector<MemoryCategorySample> memory_categories;  // sorted by (rank, t_ns)
  std::vector<PeakTensorSample> peak_tensors;           // sorted by (rank, step, ord)
  std::vector<RuntimeCall> runtime;                     // sorted by (rank, start_ns)
  // data.kind = "documents": the documents each rank's shard held (ULYSSES_DOCUMENTS), sorted by
  // (step, sequence, rank, piece, begin). Empty for other data and older traces.
  std::vector<DocumentShard> documents;
  // Kernels (indices into ranges, ascending) whose launching range is known only by time: no
  // external id ties them to one, so their origin is the innermost range of the rank's stepping
  // thread open at their launch (e.g. kernels autograd's backward thread launched).
  std::vector<int32_t> time_attributed;
  bool attributed_by_time(int32_t i) const {
    return std::binary_search(time_attributed.begin(), time_attributed.end(), i);
  }
  std::vector<ClockInfo> clocks;  // ranks with a measured offset (none: one rank, old traces, nsys)
  int64_t t_min = 0, t_max = 0;
  // Largest clock error bound over the ranks aligned to rank 0; -1 when no rank was aligned.
  int64_t clock_error_ns() const {
    int64_t e = -1;
    for (const auto& c : clocks)
      if (c.applied) e = std::max(e, c.error_ns());
    return e;
  }
  // A range's extra fields (defaults when it has none).
  RangeExtra extra(const TraceRange& r) const { return r.extra < 0 ? RangeExtra{} : ranges.extra(r.extra); }
  // Its extra fields to write (r: a row of ranges.rows()); gives the range a record when it has
  // none yet.
  RangeExtra& extra_for(TraceRange& r) {
    std::vector<RangeExtra>& x = ranges.extras();
    if (r.extra < 0) {
      r.extra = static_cast<int32_t>(x.size());
      x.emplace_back();
    }
    return x[static_cast<size_t>(r.extra)];
  }
  // Every rank the trace holds (RankInfo rows and lanes' ranks), ascending.
  std::set<int32_t> rank_set() const {
    std::set<int32_t> out;
    for (const auto& r : ranks) out.insert(r.rank);
    for (const auto& l : lanes) out.insert(l.rank);
    return out;
  }
};

}  // namespace ulysses::prof
