// Analysis core shared by `ulysses-trace summary` and the studio: per rank and step
// compute / communication / idle time, overlap ratio (HTA's definition), per-layer and
// per-head-range tables, rank skew per phase, peak memory per phase. No torch, no Qt.
//
// Definitions (see profiler/README.md):
//   comm range     a range whose phase is a2a_seq_to_head, a2a_head_to_seq,
//                  grad_allreduce or ring_step, or any range nested inside one.
//   compute range  a LEAF range (no child on its lane) that is not a comm range. Parents
//                  (step, layer wrappers, ...) never count: only their leaves do.
//   On a rank with GPU kernels (CUPTI / nsys), kernels replace host ranges: comm = NCCL
//   kernels (name contains "nccl": ncclDevKernel_*, ncclKernel_*), compute = every other
//   kernel; memcpy/memset count as neither. The per-layer and per-head tables of such a rank
//   use the kernels' time too (the union of the kernel intervals of each (rank, step, layer
//   or head range, phase), phase and layer being those of the range that launched them).
//   CPU ranks keep host ranges.
//   Within a step window [start, end):
//   compute_ns     |union of compute intervals|
//   comm_ns        |union of comm intervals|
//   overlap_ns     |union(compute) ∩ union(comm)|
//   busy_ns        |union(compute) ∪ union(comm)|
//   idle_ns        step wall time - busy_ns (untraced host work and waiting)
//   overlap_ratio  overlap_ns / comm_ns (0 when comm_ns == 0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof {

// ---- interval algebra (public so tests and the studio can use it) -----------------------
struct Interval {
  int64_t start = 0, end = 0;
};
// Sorted, disjoint, non-empty intervals covering the same points as `v`.
std::vector<Interval> merge_intervals(std::vector<Interval> v);
// Total length of merged intervals.
int64_t total_length(const std::vector<Interval>& merged);
// Length of the intersection of two merged interval lists.
int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b);
// Merged intervals clipped to [lo, hi).
std::vector<Interval> clip_intervals(const std::vector<Interval>& merged, int64_t lo, int64_t hi);

// Overlap as HTA defines it: comm time that coincides with compute, over comm time.
struct OverlapResult {
  int64_t compute_ns = 0, comm_ns = 0, overlap_ns = 0, busy_ns = 0;
  double ratio = 0;  // overlap_ns / comm_ns, 0 when no comm
};
OverlapResult compute_overlap(const std::vector<Interval>& compute, const std::vector<Interval>& comm);

// ---- tables -----------------------------------------------------------------------------
struct StepBreakdown {
  int32_t rank = 0;
  int64_t step = -1;  // -1: whole trace (no step records, e.g. nsys)
  int64_t start_ns = 0, end_ns = 0;
  int64_t wall_ns = 0, compute_ns = 0, comm_ns = 0, overlap_ns = 0, idle_ns = 0;
  int64_t exposed_comm_ns = 0;  // comm_ns - overlap_ns
  double overlap_ratio = 0;
  bool gpu = false;  // computed from GPU kernels rather than host ranges
};

struct RankTotals {
  int32_t rank = 0;
  int64_t steps = 0;
  int64_t wall_ns = 0, compute_ns = 0, comm_ns = 0, overlap_ns = 0, idle_ns = 0;
  double overlap_ratio = 0;
};

// One row per (layer, direction). Times are sums over ranks and steps of outermost ranges
// of that phase (a range nested in one of the same phase is not counted again); divide by
// `samples` (rank x step pairs that have the layer) for a per-rank-per-step mean.
struct LayerRow {
  int32_t layer = -1;
  Direction dir = Direction::None;
  int64_t qkv_proj_ns = 0, a2a_seq_to_head_ns = 0, attention_ns = 0, a2a_head_to_seq_ns = 0, out_proj_ns = 0;
  int64_t a2a_bytes_sent = 0, a2a_bytes_recv = 0;
  int64_t samples = 0;
};

// One row per global head range [head_begin, head_end) (head chunks on every rank).
struct HeadRangeRow {
  int32_t head_begin = -1, head_end = -1;
  int64_t a2a_seq_to_head_ns = 0, attention_ns = 0, a2a_head_to_seq_ns = 0;
  int64_t count = 0;  // ranges contributing
  int64_t bytes_sent = 0;
};

// Per phase, time per rank per step (mean over steps) on the slowest and fastest rank.
// Phase::Step compares step wall times.
struct SkewRow {
  Phase phase = Phase::Other;
  int32_t slowest_rank = -1, fastest_rank = -1;
  double slowest_ns = 0, fastest_ns = 0;
  double ratio = 0;  // slowest / fastest (0 when fastest is 0)
};

// Memory per sample label (the phase boundary the engine named) and rank.
struct PhaseMemoryRow {
  std::string label;
  int32_t rank = 0;
  int64_t max_allocated = 0, max_reserved = 0, max_peak = 0;
  int64_t samples = 0;
};

// Kernel / NVTX name totals (used for nsys exports and GPU traces).
struct NameRow {
  std::string name;
  bool is_kernel = false;
  int64_t count = 0, total_ns = 0, max_ns = 0;
};

// The figures users quote, over the steps in the window.
struct Headline {
  int64_t steps = 0;                     // step records of the lowest rank in the window
  double tokens_per_s = 0;               // median of those steps (whole-run tokens/s), step_stats.hpp's steady_state
  double step_ms = 0;                    // median step time (true median, step 0 left out when others exist)
  int64_t a2a_bytes_per_step = 0;        // all-to-all bytes one rank sends per step (mean over ranks x steps)
  int64_t allreduce_bytes_per_step = 0;  // gradient all-reduce bytes one rank sends per step (same mean)
  int64_t peak_memory_bytes = 0;         // largest peak over all ranks' memory samples
};

// ---- waiting analysis: one collective's instances across ranks ---------------------------
// A collective instance is the set of host ranges, one per member rank, that carry the same
// (pg, seq) (TraceRange::pg / seq, stamped by the engine's Comm when it issues the
// collective). On each rank the range starts when that rank arrived (issued the collective
// to its group, after any injected fault delay, or, for queued async work, when the group's
// previous collective finished); times are on the aligned clock (see TraceModel::clocks).
//   arrival skew       last arrival - first arrival
//   last arriver       the rank with the latest arrival (ties: the lowest rank)
//   wait suffered(r)   sum over instances of (last arrival - arrival of r): time r waited
//   wait caused(r)     sum over instances where r arrived last of the others' wait, so
//                      sum(wait caused) = sum(wait suffered)
// Only complete instances count (every rank seen in that process group has a range with the
// id); traces without collective ids (format < 3, nsys) have none.
struct CollectiveArrival {
  int32_t rank = 0;
  int64_t arrive_ns = 0, end_ns = 0;
};
struct CollectiveInstance {
  int32_t pg = -1;
  int64_t seq = -1;
  int64_t step = -1;
  Phase phase = Phase::Other;
  Direction dir = Direction::None;
  int32_t layer = -1;
  std::vector<CollectiveArrival> arrivals;  // sorted by rank
  int64_t first_arrival_ns = 0, last_arrival_ns = 0, skew_ns = 0;
  int32_t last_arriver = -1;
};
struct RankWaitRow {
  int32_t rank = 0;
  int64_t collectives = 0;    // instances this rank took part in
  int64_t last_arrivals = 0;  // instances where it arrived last
  int64_t wait_caused_ns = 0, wait_suffered_ns = 0;
};
// Per step: the rank whose work set the step's end, i.e. the last arriver at the step's last
// collective (the one with the latest last arrival); without collectives, the rank whose step
// ended last.
struct StepEndRow {
  int64_t step = -1;
  int32_t rank = -1;
  bool from_collective = false;
  int64_t skew_ns = 0;  // arrival skew of that collective (0 without one)
};
struct WaitingAnalysis {
  std::vector<CollectiveInstance> instances;  // complete instances, sorted by first arrival
  int64_t incomplete = 0;                     // ids missing on some member rank (skipped)
  int64_t repeated = 0;                       // ranges repeating an id on one rank (the earliest counts)
  double median_skew_ns = 0;                  // median over instances (upper median)
  std::vector<RankWaitRow> ranks;             // every rank of the trace, sorted by rank
  std::vector<StepEndRow> steps;              // sorted by step
};

struct AnalysisOptions {
  int64_t step_begin = 0, step_end = -1;  // steps to include (-1 = all)
  size_t top_names = 20;                  // rows in Summary::names
};

// Communication by kind: each comm phase's time and the part of it that coincides with
// compute, summed over ranks and step windows (the windows of Summary::steps), as
// Summary::overall is for all communication together. A comm range's kind is its own phase
// or, nested, that of the comm range it is in; a GPU rank's NCCL kernels take the phase of
// the range that launched them (other phases: Phase::Other). bytes_sent and ranges count the
// outermost comm ranges of that phase that start in a window.
struct CommPhaseRow {
  Phase phase = Phase::Other;
  int64_t comm_ns = 0, overlap_ns = 0;
  int64_t ranges = 0, bytes_sent = 0;
  double ratio = 0;  // overlap_ns / comm_ns, 0 when comm_ns == 0
};

// One rank's memory by category (ULYSSES_MEMORY_CATEGORIES, docs/LONG_SEQUENCES.md): the highest total of
// the steps' peaks (within the step window) with what was alive then, and the planner's
// prediction when the trace has one (rank 0 writes it; every rank's row shows it). -1: none.
struct RankMemoryRow {
  int32_t rank = 0;
  int64_t peak_bytes = -1, peak_t_ns = 0, peak_step = -1;
  MemoryCategories at_peak;
  std::vector<std::pair<int32_t, int64_t>> at_peak_layers;  // (decoder layer, its activations) at that peak
  std::vector<PeakTensor> at_peak_tensors;  // the named groups alive at that peak, largest first (CPU ranks)
  std::vector<PeakTensor> planned_tensors;  // the planner's named groups at its peak (rank 0 writes them)
  int64_t planned_peak_bytes = -1;
  MemoryCategories planned;
};
std::vector<RankMemoryRow> memory_by_category(const TraceModel& m, const AnalysisOptions& o = {});

struct Summary {
  int32_t world_size = 0;
  Headline headline;
  int64_t num_ranges = 0, num_kernels = 0;
  // Kernels tied to their launching range by external id, and by time only
  // (TraceModel::time_attributed); the rest of num_kernels is attributed to nothing.
  int64_t kernels_by_launch = 0, kernels_by_time = 0;
  std::vector<StepBreakdown> steps;  // sorted by (rank, step)
  std::vector<RankTotals> ranks;
  OverlapResult overall;                  // summed over all ranks and steps
  std::vector<CommPhaseRow> comm_phases;  // the same by comm phase (all-to-alls, ring steps, ...), by phase
  // ZeRO's parameter all-gathers (comm ranges of phase grad_allreduce with direction none, or
  // on a GPU rank the NCCL kernels they launched): comm_ns = |union(all-gathers)|, overlap_ns =
  // |union(compute) ∩ union(all-gathers)| (the all-gather time hidden behind compute),
  // compute_ns and busy_ns against them; per rank and step window as `steps`, summed.
  OverlapResult allgather;
  std::vector<LayerRow> layers;               // sorted by (layer, dir)
  std::vector<HeadRangeRow> heads;            // sorted by head_begin
  std::vector<SkewRow> skew;                  // phases present in the trace, Step first
  std::vector<PhaseMemoryRow> memory;         // sorted by (label, rank)
  std::vector<RankMemoryRow> memory_by_rank;  // ranks with category samples, ascending
  std::vector<NameRow> names;                 // longest total first, top_names rows
  WaitingAnalysis waiting;                    // collectives across ranks: who waits for whom
  int64_t clock_error_ns = -1;  // TraceModel::clock_error_ns(): ranks aligned within +-this; -1 = not aligned
};

// Whether a range counts as communication (kernel: name contains "nccl"; host: comm phase).
bool is_comm_range(const TraceModel& m, const TraceRange& r);

// Compute / comm intervals of one rank, clipped to [lo, hi), merged.
void rank_intervals(const TraceModel& m, int32_t rank, int64_t lo, int64_t hi, std::vector<Interval>* compute,
                    std::vector<Interval>* comm, bool* gpu);
// The same for every rank that has a lane, ascending rank, classifying the model once (where
// rank_intervals per rank would classify it once per rank).
struct RankIntervals {
  int32_t rank = 0;
  std::vector<Interval> compute, comm;
  bool gpu = false;
};
std::vector<RankIntervals> all_rank_intervals(const TraceModel& m, int64_t lo, int64_t hi);

std::vector<StepBreakdown> step_breakdown(const TraceModel& m, const AnalysisOptions& o = {});
std::vector<LayerRow> layer_table(const TraceModel& m, const AnalysisOptions& o = {});
std::vector<HeadRangeRow> head_range_table(const TraceModel& m, const AnalysisOptions& o = {});
std::vector<SkewRow> rank_skew(const TraceModel& m, const AnalysisOptions& o = {});
std::vector<PhaseMemoryRow> peak_memory(const TraceModel& m, const AnalysisOptions& o = {});
std::vector<NameRow> name_totals(const TraceModel& m, size_t top);
// The same within o's step window (all ranges when it names none), o.top_names rows.
std::vector<NameRow> name_totals(const TraceModel& m, const AnalysisOptions& o);

WaitingAnalysis waiting_analysis(const TraceModel& m, const AnalysisOptions& o = {});

// Time of each phase per rank and step, by the per-layer table's rules: on a CPU rank the
// outermost host ranges of the phase (one nested in a range of the same phase is not counted
// again; a range includes what is nested in it, e.g. `backward` the layers' backward ranges);
// on a GPU rank the union of the GPU time of the kernels launched in ranges of that phase
// (memcpy/memset excluded), per (rank, step). Phases Step and Other are left out. One row per
// (rank, step, phase, direction) with layer = -1 (the phase in total, in and outside layers),
// plus one per (rank, step, phase, direction, layer) for ranges carrying a layer (that
// layer's share). Sorted by (layer, phase, dir, rank, step). Used by the run comparison.
struct PhaseTime {
  int32_t rank = 0;
  int64_t step = -1;
  Phase phase = Phase::Other;
  Direction dir = Direction::None;
  int32_t layer = -1;
  int64_t ns = 0;
};
std::vector<PhaseTime> phase_times(const TraceModel& m, const AnalysisOptions& o = {});

Headline headline(const TraceModel& m, const AnalysisOptions& o = {});
Summary analyze(const TraceModel& m, const AnalysisOptions& o = {});
// The host ranges and device activities the summary counts (Summary::num_ranges, num_kernels):
// every lane but the head-range lanes, which repeat the attention and all-to-all ranges per
// head range. The one count that ulysses-run, ulysses-trace and the studio print.
std::pair<int64_t, int64_t> count_ranges_and_kernels(const TraceModel& m);

}  // namespace ulysses::prof
