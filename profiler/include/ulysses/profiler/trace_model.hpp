// In-memory trace of a whole run (all ranks), as the analysis core and the studio read it.
// Loaded from a run directory (RUN/trace/rank*.sqlite) or from one Nsight Systems SQLite
// export. Plain structs, no torch, no Qt. Fields may be added; none are removed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ulysses/profiler/tracer.hpp"

namespace ulysses::prof {

// What a range's layer, heads and chunk may be (TraceRange's 16-bit fields): layer
// 0..kMaxTraceLayers-1 (as validate() allows models), heads 0 <= begin < end <= kMaxTraceHeads,
// chunk 0..kMaxTraceChunks-1, each or -1 (none). Readers read anything else as absent, with a
// note.
inline constexpr int32_t kMaxTraceLayers = 1024;
inline constexpr int32_t kMaxTraceHeads = 32767;
inline constexpr int32_t kMaxTraceChunks = 32767;

// One timed interval. Times are ns on the trace's host clock; ranges of one lane are
// sorted by start and nest properly (depth 0 = outermost). 56 bytes: the fields most ranges
// leave empty (bytes, collective identity, GPU ids) are in TraceModel::extras, which a range
// names by `extra` (read them with TraceModel::extra(r)).
struct TraceRange {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t rank = 0;
  int32_t lane = 0;     // index into TraceModel::lanes
  int32_t name_id = 0;  // index into TraceModel::strings (phase name or NVTX/kernel text)
  int32_t step = -1;
  int32_t parent = -1;  // index into TraceModel::ranges of the enclosing range on this lane
  // Kernel: index into TraceModel::ranges of the host range that launched it (the traced range
  // whose id it carries, or for an all-to-all issue the comm range recorded for it); -1 when
  // unknown. HeadRange copy: the host range it copies.
  int32_t origin = -1;
  int32_t extra = -1;  // index into TraceModel::extras; -1: none (every field of it at its default)
  // Readers keep these within kMaxTraceLayers, kMaxTraceHeads and kMaxTraceChunks (else -1).
  int16_t layer = -1;
  int16_t head_begin = -1, head_end = -1;
  int16_t chunk = -1;
  Phase phase = Phase::Other;
  Direction dir = Direction::None;
  uint8_t depth = 0;
  bool is_kernel = false;  // GPU kernel / memcpy from CUPTI or nsys
  int64_t duration() const { return end_ns - start_ns; }
};

// What few ranges carry, apart from TraceRange so that the others do not pay for it: a
// communication range's bytes and collective identity, GPU attribution. Shared by a range and
// its HeadRange copies.
struct RangeExtra {
  int64_t bytes_sent = 0, bytes_recv = 0;
  // GPU attribution (Ulysses traces of GPU ranks). Kernel / memcpy: CUPTI correlation id of its
  // launch and the external id the Tracer had pushed then; step, layer, phase, dir, heads and
  // chunk of the range are then those of the range that launched it. Host range: the external
  // id its push carried. 0 = none.
  int64_t external_id = 0;
  uint32_t correlation = 0;  // CUPTI correlation ids are 32-bit
  // Collective identity (RangeInfo::pg / seq): the same (pg, seq) on every member rank names
  // one collective instance. -1 = not a collective (and in traces older than format 3).
  int32_t pg = -1;
  int32_t seq = -1;
  bool empty() const {
    return bytes_sent == 0 && bytes_recv == 0 && external_id == 0 && correlation == 0 && pg == -1 && seq == -1;
  }
};

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
  std::vector<Lane> lanes;         // grouped by rank
  std::vector<TraceRange> ranges;  // grouped by lane (see Lane::first/count)
  std::vector<RangeExtra> extras;  // TraceRange::extra
  std::vector<StepInfo> steps;
  std::vector<MemoryPoint> memory;   // sorted by (rank, t_ns)
  std::vector<RuntimeCall> runtime;  // sorted by (rank, start_ns)
  std::vector<ClockInfo> clocks;     // ranks with a measured offset (none: one rank, old traces, nsys)
  int64_t t_min = 0, t_max = 0;
  // Largest clock error bound over the ranks aligned to rank 0; -1 when no rank was aligned.
  int64_t clock_error_ns() const {
    int64_t e = -1;
    for (const auto& c : clocks)
      if (c.applied) e = std::max(e, c.error_ns());
    return e;
  }
  // A range's extra fields (defaults when it has none).
  const RangeExtra& extra(const TraceRange& r) const {
    static const RangeExtra kNone;
    return r.extra < 0 ? kNone : extras[static_cast<size_t>(r.extra)];
  }
  // Its extra fields to write; gives the range a record when it has none yet.
  RangeExtra& extra_for(TraceRange& r) {
    if (r.extra < 0) {
      r.extra = static_cast<int32_t>(extras.size());
      extras.emplace_back();
    }
    return extras[static_cast<size_t>(r.extra)];
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
