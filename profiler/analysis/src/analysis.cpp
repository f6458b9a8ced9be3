// Analysis core: interval algebra, per rank/step compute-comm-idle breakdown, HTA overlap,
// per-layer and per-head-range tables, rank skew, memory per label, name totals, and the
// waiting analysis (collective instances across ranks: arrival skew, last arriver, waits).
// Definitions are in analysis.hpp and profiler/README.md.
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/common/step_stats.hpp"
#include "ulysses/profiler/strfmt.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <future>
#include <map>
#include <set>
#include <system_error>
#include <tuple>
#include <unordered_map>

namespace ulysses::prof {

namespace {
// Sums of durations and bytes read from a file: saturate at the int64 limits instead of
// wrapping (hostile rows summed past 2^63 printed negative walls; signed overflow is undefined).
inline void sat_add(int64_t& acc, int64_t v) {
  if (__builtin_add_overflow(acc, v, &acc)) acc = v > 0 ? INT64_MAX : INT64_MIN;
}
}  // namespace

// ---- interval algebra -------------------------------------------------------------------
std::vector<Interval> merge_intervals(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.start; }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  out.reserve(v.size());
  for (const auto& i : v) {
    if (!out.empty() && i.start <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

int64_t total_length(const std::vector<Interval>& merged) {
  int64_t t = 0;
  for (const auto& i : merged) sat_add(t, i.end - i.start);
  return t;
}

int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t t = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].start, b[j].start), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) sat_add(t, hi - lo);
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return t;
}

std::vector<Interval> clip_intervals(const std::vector<Interval>& merged, int64_t lo, int64_t hi) {
  std::vector<Interval> out;
  auto it = std::lower_bound(merged.begin(), merged.end(), lo, [](const Interval& i, int64_t v) { return i.end <= v; });
  for (; it != merged.end() && it->start < hi; ++it) {
    Interval c{std::max(it->start, lo), std::min(it->end, hi)};
    if (c.end > c.start) out.push_back(c);
  }
  return out;
}

OverlapResult compute_overlap(const std::vector<Interval>& compute, const std::vector<Interval>& comm) {
  auto c = merge_intervals(compute);
  auto m = merge_intervals(comm);
  OverlapResult r;
  r.compute_ns = total_length(c);
  r.comm_ns = total_length(m);
  r.overlap_ns = intersection_length(c, m);
  r.busy_ns = r.compute_ns + r.comm_ns - r.overlap_ns;
  r.ratio = r.comm_ns > 0 ? static_cast<double>(r.overlap_ns) / static_cast<double>(r.comm_ns) : 0.0;
  return r;
}

// ---- classification -----------------------------------------------------------------------
namespace {

bool is_memop_name(const std::string& s) {
  return s.rfind("[CUDA mem", 0) == 0 || contains_ci(s, "memcpy") || contains_ci(s, "memset");
}

enum : uint8_t { kCompute = 1, kComm = 2 };

// Per-range flags (compute leaf / comm) and per-rank "has GPU activity".
struct Classified {
  std::vector<uint8_t> flags;
  std::map<int32_t, bool> rank_gpu;
};

Classified classify(const TraceModel& m) {
  Classified c;
  const size_t n = m.ranges.size();
  c.flags.assign(n, 0);
  std::vector<uint8_t> name_nccl(m.strings.size(), 0), name_memop(m.strings.size(), 0);
  for (size_t i = 0; i < m.strings.size(); ++i) {
    name_nccl[i] = contains_ci(m.strings[i], "nccl");
    name_memop[i] = is_memop_name(m.strings[i]);
  }
  std::vector<uint8_t> has_child(n, 0), comm(n, 0);
  for (const auto& l : m.lanes) {
    c.rank_gpu.emplace(l.rank, false);
    if (l.kind == LaneKind::CudaStream && l.count > 0) c.rank_gpu[l.rank] = true;
  }
  for (const auto& l : m.lanes) {
    if (l.kind == LaneKind::HeadRange) continue;
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      // Any child, a zero-length one too, makes its parent a parent: the time of a parent is
      // its children's, gaps between them are not compute (a 0 ns child counting the parent's
      // whole span, a 1 ns one only itself, would make the figure jump).
      if (r.parent >= 0) has_child[static_cast<size_t>(r.parent)] = 1;
    }
  }
  for (const auto& l : m.lanes) {
    if (l.kind == LaneKind::HeadRange) continue;
    bool gpu = c.rank_gpu[l.rank];
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {  // parents come before children within a lane
      const TraceRange& r = m.ranges[i];
      if (r.is_kernel) {
        size_t nid = static_cast<size_t>(r.name_id);
        bool nccl = nid < name_nccl.size() && name_nccl[nid];
        bool memop = nid < name_memop.size() && name_memop[nid];
        if (nccl)
          c.flags[i] = kComm;
        else if (!memop)
          c.flags[i] = kCompute;
        continue;
      }
      comm[i] = phase_is_comm(r.phase) || (r.parent >= 0 && comm[static_cast<size_t>(r.parent)]);
      if (gpu) continue;  // host ranges don't count on a rank with GPU activity
      // A step range never counts itself, even with no child on its lane (its work traced on
      // the comm lane or another thread): counted, it would make that rank's comm read 100% hidden.
      if (comm[i])
        c.flags[i] = kComm;
      else if (!has_child[i] && r.phase != Phase::Step)
        c.flags[i] = kCompute;
    }
  }
  return c;
}

bool step_in(const AnalysisOptions& o, int64_t step) {
  return step >= o.step_begin && (o.step_end < 0 || step <= o.step_end);
}

// Whether the options name a step window (--step-begin / --step-end), not all steps.
bool windowed(const AnalysisOptions& o) { return o.step_begin > 0 || o.step_end >= 0; }

bool range_in(const TraceModel& m, const AnalysisOptions& o, const TraceRange& r) {
  if (r.step < 0) return m.steps.empty();
  return step_in(o, r.step);
}

// Whether an ancestor on the lane has the same phase (and, if `heads`, the same head range).
bool nested_in_same(const TraceModel& m, const TraceRange& r, bool heads) {
  int32_t p = r.parent;
  while (p >= 0) {
    const TraceRange& a = m.ranges[static_cast<size_t>(p)];
    if (a.phase == r.phase && (!heads || (a.head_begin == r.head_begin && a.head_end == r.head_end))) return true;
    p = a.parent;
  }
  return false;
}

template <class F>
void for_each_counted_lane(const TraceModel& m, F&& f) {
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const Lane& l = m.lanes[li];
    if (l.kind == LaneKind::HeadRange) continue;
    f(l);
  }
}

}  // namespace

std::pair<int64_t, int64_t> count_ranges_and_kernels(const TraceModel& m) {
  std::pair<int64_t, int64_t> n{0, 0};
  for_each_counted_lane(m, [&](const Lane& l) {
    for (int64_t k = 0; k < l.count; ++k) ++(m.ranges[static_cast<size_t>(l.first + k)].is_kernel ? n.second : n.first);
  });
  return n;
}

namespace {

// Whether a range is one of ZeRO's parameter all-gathers: a communication range (or NCCL
// kernel launched by one) of phase grad_allreduce with direction none (Summary::allgather).
bool is_allgather(const TraceRange& r) { return r.phase == Phase::GradAllReduce && r.dir == Direction::None; }

std::vector<StepBreakdown> breakdown_impl(const TraceModel& m, const AnalysisOptions& o, const Classified& c,
                                          OverlapResult* allgather = nullptr) {
  std::vector<StepBreakdown> out;
  std::map<int32_t, std::pair<std::vector<Interval>, std::vector<Interval>>> per_rank;
  std::map<int32_t, std::vector<Interval>> gathers;  // per rank: the all-gathers' intervals
  std::map<int32_t, std::pair<int64_t, int64_t>> extent;
  // No step records but a step window: each step's window is the extent of the rank's ranges
  // that carry it (the window was ignored: the whole trace shown as "step -1").
  const bool steps_from_ranges = m.steps.empty() && windowed(o);
  std::map<std::pair<int32_t, int64_t>, std::pair<int64_t, int64_t>> step_extent;  // (rank, step)
  for_each_counted_lane(m, [&](const Lane& l) {
    auto& pr = per_rank[l.rank];
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      auto ext = extent.find(l.rank);
      if (ext == extent.end())
        extent[l.rank] = {r.start_ns, r.end_ns};
      else
        ext->second = {std::min(ext->second.first, r.start_ns), std::max(ext->second.second, r.end_ns)};
      if (steps_from_ranges && r.step >= 0 && step_in(o, r.step)) {
        auto [se, fresh] = step_extent.try_emplace({l.rank, r.step}, r.start_ns, r.end_ns);
        if (!fresh) se->second = {std::min(se->second.first, r.start_ns), std::max(se->second.second, r.end_ns)};
      }
      if (c.flags[i] & kCompute) {
        pr.first.push_back({r.start_ns, r.end_ns});
      } else if (c.flags[i] & kComm) {
        pr.second.push_back({r.start_ns, r.end_ns});
        if (allgather && is_allgather(r)) gathers[l.rank].push_back({r.start_ns, r.end_ns});
      }
    }
  });
  std::set<int32_t> ranks;
  for (const auto& ri : m.ranks) ranks.insert(ri.rank);
  for (const auto& kv : per_rank) ranks.insert(kv.first);
  for (int32_t rank : ranks) {
    auto& pr = per_rank[rank];
    auto compute = merge_intervals(std::move(pr.first));
    auto comm = merge_intervals(std::move(pr.second));
    auto gathered = merge_intervals(std::move(gathers[rank]));
    std::vector<std::tuple<int64_t, int64_t, int64_t>> windows;  // step, start, end
    for (const auto& s : m.steps) {
      if (s.rank == rank && step_in(o, s.step)) windows.emplace_back(s.step, s.start_ns, s.end_ns);
    }
    if (steps_from_ranges) {
      for (auto it = step_extent.lower_bound({rank, INT64_MIN}); it != step_extent.end() && it->first.first == rank;
           ++it)
        windows.emplace_back(it->first.second, it->second.first, it->second.second);
    } else if (windows.empty() && m.steps.empty()) {
      auto ext = extent.find(rank);
      if (ext == extent.end()) continue;
      windows.emplace_back(-1, ext->second.first, ext->second.second);
    }
    for (const auto& [step, lo, hi] : windows) {
      StepBreakdown sb;
      sb.rank = rank;
      sb.step = step;
      sb.start_ns = lo;
      sb.end_ns = hi;
      sb.wall_ns = hi - lo;
      auto cc = clip_intervals(compute, lo, hi);
      auto mm = clip_intervals(comm, lo, hi);
      sb.compute_ns = total_length(cc);
      sb.comm_ns = total_length(mm);
      sb.overlap_ns = intersection_length(cc, mm);
      sb.idle_ns = (sb.wall_ns - sb.compute_ns) - (sb.comm_ns - sb.overlap_ns);  // each term within the wall
      sb.exposed_comm_ns = sb.comm_ns - sb.overlap_ns;
      sb.overlap_ratio = sb.comm_ns > 0 ? static_cast<double>(sb.overlap_ns) / static_cast<double>(sb.comm_ns) : 0.0;
      auto g = c.rank_gpu.find(rank);
      sb.gpu = g != c.rank_gpu.end() && g->second;
      out.push_back(sb);
      if (allgather) {  // the all-gathers within the same window, against the same compute
        auto ag = clip_intervals(gathered, lo, hi);
        const int64_t ag_ns = total_length(ag), hidden = intersection_length(cc, ag);
        sat_add(allgather->compute_ns, sb.compute_ns);
        sat_add(allgather->comm_ns, ag_ns);
        sat_add(allgather->overlap_ns, hidden);
        sat_add(allgather->busy_ns, sb.compute_ns + (ag_ns - hidden));
      }
    }
  }
  return out;
}

// Summary::comm_phases over the windows of `steps` (breakdown_impl's).
std::vector<CommPhaseRow> comm_phase_impl(const TraceModel& m, const Classified& c,
                                          const std::vector<StepBreakdown>& steps) {
  struct PerRank {
    std::vector<Interval> compute;
    std::map<Phase, std::vector<Interval>> comm;
    std::map<Phase, std::vector<std::pair<int64_t, int64_t>>> outer;  // (start, bytes) of outermost ranges
  };
  std::map<int32_t, PerRank> per_rank;
  auto comm_phase_of = [&](const TraceRange& r) {
    if (r.is_kernel) return phase_is_comm(r.phase) ? r.phase : Phase::Other;
    for (TraceRange a = r;; a = m.ranges[static_cast<size_t>(a.parent)]) {  // the range store gives copies
      if (phase_is_comm(a.phase)) return a.phase;
      if (a.parent < 0) return Phase::Other;
    }
  };
  for_each_counted_lane(m, [&](const Lane& l) {
    PerRank& pr = per_rank[l.rank];
    const size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (c.flags[i] & kCompute) pr.compute.push_back({r.start_ns, r.end_ns});
      if (!(c.flags[i] & kComm)) continue;
      const Phase ph = comm_phase_of(r);
      pr.comm[ph].push_back({r.start_ns, r.end_ns});
      const bool outermost = r.is_kernel || r.parent < 0 || !(c.flags[static_cast<size_t>(r.parent)] & kComm);
      if (outermost) pr.outer[ph].emplace_back(r.start_ns, m.extra(r).bytes_sent);
    }
  });
  std::map<Phase, CommPhaseRow> rows;
  for (auto& [rank, pr] : per_rank) {
    const auto compute = merge_intervals(std::move(pr.compute));
    std::map<Phase, std::vector<Interval>> comm;
    for (auto& [ph, v] : pr.comm) comm[ph] = merge_intervals(std::move(v));
    for (const StepBreakdown& sb : steps) {
      if (sb.rank != rank) continue;
      const auto cc = clip_intervals(compute, sb.start_ns, sb.end_ns);
      for (const auto& [ph, merged] : comm) {
        const auto mm = clip_intervals(merged, sb.start_ns, sb.end_ns);
        CommPhaseRow& row = rows[ph];
        row.phase = ph;
        sat_add(row.comm_ns, total_length(mm));
        sat_add(row.overlap_ns, intersection_length(cc, mm));
        for (const auto& [start, bytes] : pr.outer[ph]) {
          if (start < sb.start_ns || start >= sb.end_ns) continue;
          ++row.ranges;
          sat_add(row.bytes_sent, bytes);
        }
      }
    }
  }
  std::vector<CommPhaseRow> out;
  for (auto& [ph, row] : rows) {
    row.ratio = row.comm_ns > 0 ? static_cast<double>(row.overlap_ns) / static_cast<double>(row.comm_ns) : 0.0;
    out.push_back(row);
  }
  return out;
}

}  // namespace

bool is_comm_range(const TraceModel& m, const TraceRange& r) {
  if (r.is_kernel) {
    return r.name_id >= 0 && static_cast<size_t>(r.name_id) < m.strings.size() &&
           contains_ci(m.strings[static_cast<size_t>(r.name_id)], "nccl");
  }
  if (phase_is_comm(r.phase)) return true;
  for (int32_t p = r.parent; p >= 0; p = m.ranges[static_cast<size_t>(p)].parent) {
    if (phase_is_comm(m.ranges[static_cast<size_t>(p)].phase)) return true;
  }
  return false;
}

std::vector<RankIntervals> all_rank_intervals(const TraceModel& m, int64_t lo, int64_t hi) {
  const Classified c = classify(m);
  std::map<int32_t, RankIntervals> by_rank;  // every rank with a lane (classify's rank_gpu)
  for (const auto& [rank, gpu] : c.rank_gpu) {
    RankIntervals& ri = by_rank[rank];
    ri.rank = rank;
    ri.gpu = gpu;
  }
  for_each_counted_lane(m, [&](const Lane& l) {
    RankIntervals& ri = by_rank[l.rank];
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (c.flags[i] & kCompute)
        ri.compute.push_back({r.start_ns, r.end_ns});
      else if (c.flags[i] & kComm)
        ri.comm.push_back({r.start_ns, r.end_ns});
    }
  });
  std::vector<RankIntervals> out;
  out.reserve(by_rank.size());
  for (auto& [rank, ri] : by_rank) {
    ri.compute = clip_intervals(merge_intervals(std::move(ri.compute)), lo, hi);
    ri.comm = clip_intervals(merge_intervals(std::move(ri.comm)), lo, hi);
    out.push_back(std::move(ri));
  }
  return out;
}

void rank_intervals(const TraceModel& m, int32_t rank, int64_t lo, int64_t hi, std::vector<Interval>* compute,
                    std::vector<Interval>* comm, bool* gpu) {
  RankIntervals found;
  for (RankIntervals& ri : all_rank_intervals(m, lo, hi))
    if (ri.rank == rank) found = std::move(ri);
  if (compute) *compute = std::move(found.compute);
  if (comm) *comm = std::move(found.comm);
  if (gpu) *gpu = found.gpu;
}

std::vector<StepBreakdown> step_breakdown(const TraceModel& m, const AnalysisOptions& o) {
  return breakdown_impl(m, o, classify(m));
}

namespace {
// Ranks with GPU kernels (CUPTI / nsys): their tables count kernel time, not host ranges.
std::set<int32_t> gpu_ranks(const TraceModel& m) {
  std::set<int32_t> out;
  for (const auto& l : m.lanes)
    if (l.kind == LaneKind::CudaStream && l.count > 0) out.insert(l.rank);
  return out;
}

// GPU time of kernels grouped by a key: the union of each group's kernel intervals per
// (rank, step), so kernels of one range running at once on two streams count once.
template <class Key>
struct KernelTime {
  std::map<std::tuple<Key, int32_t, int32_t>, std::vector<Interval>> groups;
  std::map<Key, int64_t> count;
  void add(const Key& k, const TraceRange& r) {
    groups[{k, r.rank, r.step}].push_back({r.start_ns, r.end_ns});
    count[k] += 1;
  }
  template <class F>
  void for_each(F&& f) {  // f(key, ns)
    for (auto& [k, v] : groups) f(std::get<0>(k), total_length(merge_intervals(std::move(v))));
  }
};

bool counts_as_kernel_time(const TraceModel& m, const TraceRange& r) {
  return r.is_kernel && !(static_cast<size_t>(r.name_id) < m.strings.size() &&
                          is_memop_name(m.strings[static_cast<size_t>(r.name_id)]));
}

int64_t* layer_slot(LayerRow& row, Phase p) {
  switch (p) {
    case Phase::QkvProj:
      return &row.qkv_proj_ns;
    case Phase::A2ASeqToHead:
      return &row.a2a_seq_to_head_ns;
    case Phase::Attention:
      return &row.attention_ns;
    case Phase::A2AHeadToSeq:
      return &row.a2a_head_to_seq_ns;
    case Phase::OutProj:
      return &row.out_proj_ns;
    default:
      return nullptr;
  }
}

int64_t* head_slot(HeadRangeRow& row, Phase p) {
  switch (p) {
    case Phase::A2ASeqToHead:
      return &row.a2a_seq_to_head_ns;
    case Phase::Attention:
      return &row.attention_ns;
    case Phase::A2AHeadToSeq:
      return &row.a2a_head_to_seq_ns;
    default:
      return nullptr;
  }
}
}  // namespace

std::vector<LayerRow> layer_table(const TraceModel& m, const AnalysisOptions& o) {
  std::map<std::pair<int32_t, int>, LayerRow> rows;
  // (rank, step) pairs seen per row, appended when they change (a lane runs step by step), then
  // counted once sorted: a lane of another rank or thread starting the steps again costs no
  // tree search per range.
  std::map<std::pair<int32_t, int>, std::vector<uint64_t>> samples;
  const std::set<int32_t> gpu = gpu_ranks(m);
  using LayerKey = std::tuple<int32_t, int, int>;  // layer, dir, phase
  KernelTime<LayerKey> kt;
  std::pair<int32_t, int> last_key{-1, -1};  // r.layer >= 0 below: never a real key
  LayerRow* last_row = nullptr;              // std::map nodes stay put
  std::vector<uint64_t>* last_samples = nullptr;
  for_each_counted_lane(m, [&](const Lane& l) {
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (r.layer < 0 || !range_in(m, o, r)) continue;
      if (r.is_kernel) {  // GPU ranks: kernel time of the phase that launched it
        LayerRow probe;
        if (counts_as_kernel_time(m, r) && layer_slot(probe, r.phase))
          kt.add({r.layer, static_cast<int>(r.dir), static_cast<int>(r.phase)}, r);
        continue;
      }
      auto key = std::make_pair(static_cast<int32_t>(r.layer), static_cast<int>(r.dir));
      if (key != last_key) {  // lanes run layer by layer: look the row up once per run of ranges
        last_key = key;
        last_row = &rows[key];
        last_samples = &samples[key];
      }
      LayerRow& row = *last_row;
      row.layer = r.layer;
      row.dir = r.dir;
      int64_t* slot = layer_slot(row, r.phase);
      const uint64_t sample = (uint64_t{static_cast<uint32_t>(r.rank)} << 32) | static_cast<uint32_t>(r.step);
      if (last_samples->empty() || last_samples->back() != sample) last_samples->push_back(sample);
      if (!slot || nested_in_same(m, r, false)) continue;
      if (!gpu.count(r.rank)) sat_add(*slot, r.duration());
      if (r.phase == Phase::A2ASeqToHead || r.phase == Phase::A2AHeadToSeq) {
        const RangeExtra& x = m.extra(r);
        sat_add(row.a2a_bytes_sent, x.bytes_sent);
        sat_add(row.a2a_bytes_recv, x.bytes_recv);
      }
    }
  });
  kt.for_each([&](const LayerKey& k, int64_t ns) {
    LayerRow& row = rows[{std::get<0>(k), std::get<1>(k)}];
    row.layer = std::get<0>(k);
    row.dir = static_cast<Direction>(std::get<1>(k));
    sat_add(*layer_slot(row, static_cast<Phase>(std::get<2>(k))), ns);
  });
  std::vector<LayerRow> out;
  for (auto& [k, row] : rows) {
    std::vector<uint64_t>& v = samples[k];
    std::sort(v.begin(), v.end());
    row.samples = std::unique(v.begin(), v.end()) - v.begin();
    out.push_back(row);
  }
  return out;
}

std::vector<HeadRangeRow> head_range_table(const TraceModel& m, const AnalysisOptions& o) {
  std::map<std::pair<int32_t, int32_t>, HeadRangeRow> rows;
  const std::set<int32_t> gpu = gpu_ranks(m);
  using HeadKey = std::tuple<int32_t, int32_t, int>;  // head_begin, head_end, phase
  KernelTime<HeadKey> kt;
  for_each_counted_lane(m, [&](const Lane& l) {
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (r.head_begin < 0 || !range_in(m, o, r)) continue;
      HeadRangeRow probe;
      if (!head_slot(probe, r.phase)) continue;
      if (r.is_kernel) {  // GPU ranks: kernel time, count = kernels
        if (counts_as_kernel_time(m, r)) kt.add({r.head_begin, r.head_end, static_cast<int>(r.phase)}, r);
        continue;
      }
      if (nested_in_same(m, r, true)) continue;
      HeadRangeRow& row = rows[{r.head_begin, r.head_end}];
      row.head_begin = r.head_begin;
      row.head_end = r.head_end;
      sat_add(row.bytes_sent, m.extra(r).bytes_sent);
      if (gpu.count(r.rank)) continue;
      sat_add(*head_slot(row, r.phase), r.duration());
      row.count += 1;
    }
  });
  kt.for_each([&](const HeadKey& k, int64_t ns) {
    HeadRangeRow& row = rows[{std::get<0>(k), std::get<1>(k)}];
    row.head_begin = std::get<0>(k);
    row.head_end = std::get<1>(k);
    sat_add(*head_slot(row, static_cast<Phase>(std::get<2>(k))), ns);
  });
  for (const auto& [k, n] : kt.count) rows[{std::get<0>(k), std::get<1>(k)}].count += n;
  std::vector<HeadRangeRow> out;
  for (auto& kv : rows) {
    if (kv.second.count > 0) out.push_back(kv.second);
  }
  return out;
}

std::vector<SkewRow> rank_skew(const TraceModel& m, const AnalysisOptions& o) {
  // phase -> rank -> total ns; rank -> steps counted
  std::map<int, std::map<int32_t, double>> total;
  std::map<int32_t, std::set<int64_t>> steps_of_rank;
  for (const auto& s : m.steps) {
    if (!step_in(o, s.step)) continue;
    total[static_cast<int>(Phase::Step)][s.rank] += static_cast<double>(s.end_ns - s.start_ns);
    steps_of_rank[s.rank].insert(s.step);
  }
  // GPU ranks: a phase's time is its kernels' (union per rank), as in the layer and phase
  // tables; host ranges count on CPU ranks only (GPU ranks' host times were compared).
  const std::set<int32_t> gpu = gpu_ranks(m);
  std::map<std::pair<int, int32_t>, std::vector<Interval>> kernels;  // (phase, rank)
  std::set<int32_t> ranks;  // every rank with a counted range or a step in the window
  for (const auto& [rank, steps] : steps_of_rank) ranks.insert(rank);
  for_each_counted_lane(m, [&](const Lane& l) {
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (r.phase == Phase::Step || r.phase == Phase::Other || !range_in(m, o, r)) continue;
      if (r.is_kernel) {
        if (gpu.count(r.rank) && counts_as_kernel_time(m, r))
          kernels[{static_cast<int>(r.phase), r.rank}].push_back({r.start_ns, r.end_ns});
        continue;
      }
      if (gpu.count(r.rank) || nested_in_same(m, r, false)) continue;
      ranks.insert(r.rank);
      total[static_cast<int>(r.phase)][r.rank] += static_cast<double>(r.duration());
    }
  });
  for (auto& [key, v] : kernels) {
    ranks.insert(key.second);
    total[key.first][key.second] += static_cast<double>(total_length(merge_intervals(std::move(v))));
  }
  std::vector<SkewRow> out;
  for (auto& [phase, per_rank] : total) {
    // A rank that ran the step but never this phase took 0 ns of it (left out, the slowest and
    // fastest rank of a phase only rank 0 ran would both be rank 0, ratio 1.00).
    if (phase != static_cast<int>(Phase::Step))
      for (int32_t rank : ranks) per_rank.emplace(rank, 0.0);
    SkewRow row;
    row.phase = static_cast<Phase>(phase);
    bool first = true;
    for (auto& [rank, ns] : per_rank) {
      auto it = steps_of_rank.find(rank);
      double n = it == steps_of_rank.end() || it->second.empty() ? 1.0 : static_cast<double>(it->second.size());
      double v = ns / n;
      if (first || v > row.slowest_ns) {
        row.slowest_ns = v;
        row.slowest_rank = rank;
      }
      if (first || v < row.fastest_ns) {
        row.fastest_ns = v;
        row.fastest_rank = rank;
      }
      first = false;
    }
    row.ratio = row.fastest_ns > 0 ? row.slowest_ns / row.fastest_ns : 0.0;
    out.push_back(row);
  }
  return out;  // map order: Phase::Step (0) first
}

std::vector<PhaseMemoryRow> peak_memory(const TraceModel& m, const AnalysisOptions& o) {
  std::map<std::pair<std::string, int32_t>, PhaseMemoryRow> rows;
  for (const auto& p : m.memory) {
    if (p.step >= 0 && !step_in(o, p.step)) continue;
    const std::string& label = p.label_id >= 0 && static_cast<size_t>(p.label_id) < m.strings.size()
                                   ? m.strings[static_cast<size_t>(p.label_id)]
                                   : std::string();
    PhaseMemoryRow& row = rows[{label, p.rank}];
    row.label = label;
    row.rank = p.rank;
    row.max_allocated = std::max(row.max_allocated, p.allocated);
    row.max_reserved = std::max(row.max_reserved, p.reserved);
    row.max_peak = std::max(row.max_peak, p.peak);
    row.samples += 1;
  }
  std::vector<PhaseMemoryRow> out;
  for (auto& kv : rows) out.push_back(kv.second);
  return out;
}

std::vector<NameRow> name_totals(const TraceModel& m, size_t top) {
  AnalysisOptions o;
  o.top_names = top;
  return name_totals(m, o);
}

std::vector<NameRow> name_totals(const TraceModel& m, const AnalysisOptions& o) {
  std::unordered_map<int64_t, NameRow> rows;
  const bool window = windowed(o);  // all steps: every range, those outside steps too
  for_each_counted_lane(m, [&](const Lane& l) {
    size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (window && (r.step < 0 || !step_in(o, r.step))) continue;
      int64_t key = static_cast<int64_t>(r.name_id) * 2 + (r.is_kernel ? 1 : 0);
      NameRow& row = rows[key];
      if (row.count == 0) {
        row.name = static_cast<size_t>(r.name_id) < m.strings.size() ? m.strings[static_cast<size_t>(r.name_id)] : "?";
        row.is_kernel = r.is_kernel;
      }
      row.count += 1;
      sat_add(row.total_ns, r.duration());
      row.max_ns = std::max(row.max_ns, r.duration());
    }
  });
  std::vector<NameRow> out;
  for (auto& kv : rows) out.push_back(std::move(kv.second));
  std::sort(out.begin(), out.end(), [](const NameRow& a, const NameRow& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  if (out.size() > o.top_names) out.resize(o.top_names);
  return out;
}

namespace {
// The collectives met in the window, by id: (pg, seq) -> its ranges, at most one per rank,
// ascending rank; and per process group how many ranks were seen with it (in or out of the steps).
struct CollectiveIds {
  std::vector<std::pair<std::pair<int32_t, int64_t>, std::vector<std::pair<int32_t, size_t>>>>
      by_id;                          // (rank, index into m.ranges)
  std::map<int32_t, size_t> members;  // pg -> ranks
};

// Every collective range counted, as flat entries sorted once (no tree per range): per
// (pg, seq), per rank, the earliest range (the first met among equal starts) stands for it;
// the others are counted in `repeated`.
CollectiveIds collectives_by_id(const TraceModel& m, const AnalysisOptions& o, int64_t& repeated) {
  struct Entry {
    int32_t pg, seq, rank;
    int64_t start;
    size_t at;  // index into m.ranges: the order the ranges are met in
  };
  std::vector<Entry> entries;
  std::vector<std::pair<int32_t, int32_t>> pg_ranks;  // (pg, rank) seen, in or out of the steps
  for_each_counted_lane(m, [&](const Lane& l) {
    for (int64_t k = 0; k < l.count; ++k) {
      const size_t i = static_cast<size_t>(l.first + k);
      const TraceRange& r = m.ranges[i];
      if (r.is_kernel || r.extra < 0) continue;
      const RangeExtra& x = m.extra(r);
      if (x.pg < 0 || x.seq < 0) continue;
      if (pg_ranks.empty() || pg_ranks.back() != std::make_pair(x.pg, r.rank)) pg_ranks.emplace_back(x.pg, r.rank);
      if (!range_in(m, o, r)) continue;
      entries.push_back({x.pg, x.seq, r.rank, r.start_ns, i});
    }
  });
  CollectiveIds ids;
  std::sort(pg_ranks.begin(), pg_ranks.end());
  pg_ranks.erase(std::unique(pg_ranks.begin(), pg_ranks.end()), pg_ranks.end());
  for (const auto& [pg, rank] : pg_ranks) ids.members[pg] += 1;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.pg, a.seq, a.rank, a.start, a.at) < std::tie(b.pg, b.seq, b.rank, b.start, b.at);
  });
  for (size_t k = 0; k < entries.size(); ++k) {
    const Entry& e = entries[k];
    if (k > 0 && entries[k - 1].pg == e.pg && entries[k - 1].seq == e.seq && entries[k - 1].rank == e.rank) {
      ++repeated;  // no collective runs twice under one id on a rank: a broken or merged trace
      continue;
    }
    if (ids.by_id.empty() || ids.by_id.back().first != std::make_pair(e.pg, int64_t{e.seq}))
      ids.by_id.push_back({{e.pg, int64_t{e.seq}}, {}});
    ids.by_id.back().second.emplace_back(e.rank, e.at);
  }
  return ids;
}

// One collective's arrivals (ascending rank: ties go to the lowest rank), first and last.
CollectiveInstance collective_instance(const TraceModel& m, std::pair<int32_t, int64_t> id,
                                       const std::vector<std::pair<int32_t, size_t>>& per_rank) {
  CollectiveInstance ci;
  ci.pg = id.first;
  ci.seq = id.second;
  const TraceRange r0 = m.ranges[per_rank.front().second];
  ci.step = r0.step;
  ci.phase = r0.phase;
  ci.dir = r0.dir;
  ci.layer = r0.layer;
  bool first = true;
  for (const auto& [rank, at] : per_rank) {
    const TraceRange r = m.ranges[at];
    ci.arrivals.push_back({rank, r.start_ns, r.end_ns});
    if (first || r.start_ns < ci.first_arrival_ns) ci.first_arrival_ns = r.start_ns;
    if (first || r.start_ns > ci.last_arrival_ns) {
      ci.last_arrival_ns = r.start_ns;
      ci.last_arriver = rank;
    }
    first = false;
  }
  ci.skew_ns = ci.last_arrival_ns - ci.first_arrival_ns;
  return ci;
}

// Per step: the last arriver at the step's last collective, else the rank that ended last.
std::vector<StepEndRow> step_end_rows(const TraceModel& m, const AnalysisOptions& o,
                                      const std::vector<CollectiveInstance>& instances) {
  std::map<int64_t, const CollectiveInstance*> last_of_step;
  for (const auto& ci : instances) {
    if (ci.step < 0) continue;
    auto& slot = last_of_step[ci.step];
    if (!slot || ci.last_arrival_ns >= slot->last_arrival_ns) slot = &ci;
  }
  std::map<int64_t, std::pair<int64_t, int32_t>> latest_end;  // step -> (end, rank)
  for (const auto& st : m.steps) {
    if (!step_in(o, st.step)) continue;
    auto [it, fresh] = latest_end.emplace(st.step, std::make_pair(st.end_ns, st.rank));
    if (!fresh && st.end_ns > it->second.first) it->second = {st.end_ns, st.rank};
  }
  std::vector<StepEndRow> out;
  for (const auto& [step, end] : latest_end) {
    StepEndRow row;
    row.step = step;
    row.rank = end.second;
    auto it = last_of_step.find(step);
    if (it != last_of_step.end()) {
      row.rank = it->second->last_arriver;
      row.from_collective = true;
      row.skew_ns = it->second->skew_ns;
    }
    out.push_back(row);
  }
  return out;
}
}  // namespace

WaitingAnalysis waiting_analysis(const TraceModel& m, const AnalysisOptions& o) {
  WaitingAnalysis w;
  CollectiveIds ids = collectives_by_id(m, o, w.repeated);
  std::set<int32_t> all_ranks;
  for (const auto& ri : m.ranks) all_ranks.insert(ri.rank);
  for (const auto& l : m.lanes) all_ranks.insert(l.rank);
  std::map<int32_t, RankWaitRow> rows;
  for (int32_t r : all_ranks) rows[r].rank = r;
  std::vector<int64_t> skews;
  for (const auto& [id, per_rank] : ids.by_id) {
    if (per_rank.size() != ids.members[id.first] || per_rank.size() < 2) {
      ++w.incomplete;
      continue;
    }
    CollectiveInstance ci = collective_instance(m, id, per_rank);
    skews.push_back(ci.skew_ns);
    int64_t caused = 0;
    for (const auto& a : ci.arrivals) {
      RankWaitRow& row = rows[a.rank];
      row.rank = a.rank;
      row.collectives += 1;
      row.wait_suffered_ns += ci.last_arrival_ns - a.arrive_ns;
      caused += ci.last_arrival_ns - a.arrive_ns;
    }
    rows[ci.last_arriver].last_arrivals += 1;
    rows[ci.last_arriver].wait_caused_ns += caused;
    w.instances.push_back(std::move(ci));
  }
  std::sort(w.instances.begin(), w.instances.end(), [](const CollectiveInstance& a, const CollectiveInstance& b) {
    return std::tie(a.first_arrival_ns, a.pg, a.seq) < std::tie(b.first_arrival_ns, b.pg, b.seq);
  });
  if (!skews.empty()) {
    std::sort(skews.begin(), skews.end());
    w.median_skew_ns = static_cast<double>(skews[skews.size() / 2]);
  }
  for (auto& [rank, row] : rows) w.ranks.push_back(row);
  w.steps = step_end_rows(m, o, w.instances);
  return w;
}

Headline headline(const TraceModel& m, const AnalysisOptions& o) {
  Headline h;
  if (m.steps.empty() && m.memory.empty()) return h;
  // The lowest rank with a step in the window (docs/CONTRACTS.md): the lowest of the whole
  // trace read 0 steps when it lacked the window's steps.
  int32_t first_rank = INT32_MAX;
  for (const auto& st : m.steps)
    if (step_in(o, st.step)) first_rank = std::min(first_rank, st.rank);
  std::vector<StepFigure> figures;
  std::set<std::pair<int32_t, int64_t>> rank_steps;
  for (const auto& st : m.steps) {
    if (!step_in(o, st.step)) continue;
    rank_steps.insert({st.rank, st.step});
    if (st.rank != first_rank) continue;
    figures.push_back({st.step, st.step_ms, st.tokens_per_s});
  }
  // The one definition of the medians (step_stats.hpp; the studio uses it too).
  const SteadyState steady = steady_state(figures);
  h.steps = static_cast<int64_t>(figures.size());
  h.tokens_per_s = steady.median_tokens_per_s;
  h.step_ms = steady.median_step_ms;
  int64_t a2a = 0, ar = 0;
  for_each_counted_lane(m, [&](const Lane& l) {
    for (int64_t k = 0; k < l.count; ++k) {
      const TraceRange& r = m.ranges[static_cast<size_t>(l.first + k)];
      if (r.is_kernel || !step_in(o, r.step)) continue;
      const bool a2a_range = r.phase == Phase::A2ASeqToHead || r.phase == Phase::A2AHeadToSeq;
      if (!a2a_range && r.phase != Phase::GradAllReduce) continue;
      // Bytes per (rank, step) record: only ranges of such a record count (a rank without
      // step records doubled the figure), and a range inside one of its own phase (its
      // messages) only through that one, as in the layer table.
      if (!rank_steps.count({r.rank, r.step}) || nested_in_same(m, r, false)) continue;
      sat_add(a2a_range ? a2a : ar, m.extra(r).bytes_sent);
    }
  });
  if (!rank_steps.empty()) {
    const auto n = static_cast<int64_t>(rank_steps.size());
    h.a2a_bytes_per_step = a2a / n;
    h.allreduce_bytes_per_step = ar / n;
  }
  for (const auto& p : m.memory)
    if (p.step < 0 || step_in(o, p.step)) h.peak_memory_bytes = std::max(h.peak_memory_bytes, p.peak);
  return h;
}

std::vector<PhaseTime> phase_times(const TraceModel& m, const AnalysisOptions& o) {
  using Key = std::tuple<int32_t, int, int, int32_t, int64_t>;  // layer, phase, dir, rank, step
  std::map<Key, int64_t> host;
  std::map<Key, std::vector<Interval>> kernels;
  const std::set<int32_t> gpu = gpu_ranks(m);
  for_each_counted_lane(m, [&](const Lane& l) {
    const size_t b = static_cast<size_t>(l.first), e = b + static_cast<size_t>(l.count);
    for (size_t i = b; i < e; ++i) {
      const TraceRange& r = m.ranges[i];
      if (r.phase == Phase::Step || r.phase == Phase::Other || !range_in(m, o, r)) continue;
      const int p = static_cast<int>(r.phase), d = static_cast<int>(r.dir);
      if (r.is_kernel) {  // GPU ranks: kernel time of the phase that launched it
        if (!counts_as_kernel_time(m, r)) continue;
        kernels[{-1, p, d, r.rank, r.step}].push_back({r.start_ns, r.end_ns});
        if (r.layer >= 0) kernels[{r.layer, p, d, r.rank, r.step}].push_back({r.start_ns, r.end_ns});
        continue;
      }
      if (gpu.count(r.rank) || nested_in_same(m, r, false)) continue;
      host[{-1, p, d, r.rank, r.step}] += r.duration();
      if (r.layer >= 0) host[{r.layer, p, d, r.rank, r.step}] += r.duration();
    }
  });
  for (auto& [k, v] : kernels) host[k] += total_length(merge_intervals(std::move(v)));
  std::vector<PhaseTime> out;
  out.reserve(host.size());
  for (const auto& [k, ns] : host) {
    PhaseTime t;
    t.layer = std::get<0>(k);
    t.phase = static_cast<Phase>(std::get<1>(k));
    t.dir = static_cast<Direction>(std::get<2>(k));
    t.rank = std::get<3>(k);
    t.step = std::get<4>(k);
    t.ns = ns;
    out.push_back(t);
  }
  return out;
}

namespace {

// Runs f on a thread of its own where one can be started, else when its result is asked for.
template <class F>
auto on_another_thread(F f) -> std::future<decltype(f())> {
  try {
    return std::async(std::launch::async, std::move(f));
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, std::move(f));
  }
}

}  // namespace

Summary analyze(const TraceModel& m, const AnalysisOptions& o) {
  Summary s;
  // The tables are independent passes that only read the model: the two longest (a third of
  // the time each on a 10 M-range trace) run beside the rest.
  auto waiting = on_another_thread([&] { return waiting_analysis(m, o); });
  auto layers = on_another_thread([&] { return layer_table(m, o); });
  s.headline = headline(m, o);
  Classified c = classify(m);
  s.world_size = static_cast<int32_t>(m.rank_set().size());
  for_each_counted_lane(m, [&](const Lane& l) {
    for (int64_t k = 0; k < l.count; ++k) {
      const TraceRange& r = m.ranges[static_cast<size_t>(l.first + k)];
      if (r.is_kernel) {
        ++s.num_kernels;
        if (m.attributed_by_time(static_cast<int32_t>(l.first + k)))
          ++s.kernels_by_time;
        else if (r.origin >= 0 || m.extra(r).external_id != 0)
          ++s.kernels_by_launch;
      } else
        ++s.num_ranges;
    }
  });
  s.steps = breakdown_impl(m, o, c, &s.allgather);
  s.allgather.ratio = s.allgather.comm_ns > 0
                          ? static_cast<double>(s.allgather.overlap_ns) / static_cast<double>(s.allgather.comm_ns)
                          : 0.0;
  std::map<int32_t, RankTotals> totals;
  for (const auto& sb : s.steps) {
    RankTotals& t = totals[sb.rank];
    t.rank = sb.rank;
    t.steps += 1;
    sat_add(t.wall_ns, sb.wall_ns);
    sat_add(t.compute_ns, sb.compute_ns);
    sat_add(t.comm_ns, sb.comm_ns);
    sat_add(t.overlap_ns, sb.overlap_ns);
    sat_add(t.idle_ns, sb.idle_ns);
    sat_add(s.overall.compute_ns, sb.compute_ns);
    sat_add(s.overall.comm_ns, sb.comm_ns);
    sat_add(s.overall.overlap_ns, sb.overlap_ns);
    sat_add(s.overall.busy_ns, sb.compute_ns + (sb.comm_ns - sb.overlap_ns));
  }
  for (auto& [rank, t] : totals) {
    t.overlap_ratio = t.comm_ns > 0 ? static_cast<double>(t.overlap_ns) / static_cast<double>(t.comm_ns) : 0.0;
    s.ranks.push_back(t);
  }
  s.overall.ratio =
      s.overall.comm_ns > 0 ? static_cast<double>(s.overall.overlap_ns) / static_cast<double>(s.overall.comm_ns) : 0.0;
  s.comm_phases = comm_phase_impl(m, c, s.steps);
  s.heads = head_range_table(m, o);
  s.skew = rank_skew(m, o);
  s.memory = peak_memory(m, o);
  s.memory_by_rank = memory_by_category(m, o);
  s.names = name_totals(m, o);
  s.layers = layers.get();
  s.waiting = waiting.get();
  s.clock_error_ns = m.clock_error_ns();
  return s;
}

std::vector<RankMemoryRow> memory_by_category(const TraceModel& m, const AnalysisOptions& o) {
  std::map<int32_t, RankMemoryRow> rows;
  const MemoryCategorySample* planned = nullptr;
  for (const auto& c : m.memory_categories) {
    if (c.edge == MemEdge::Planned) {
      planned = &c;
      continue;
    }
    RankMemoryRow& r = rows[c.rank];
    r.rank = c.rank;
    if (c.edge != MemEdge::Peak || c.step < o.step_begin || (o.step_end >= 0 && c.step > o.step_end)) continue;
    if (c.c.total() > r.peak_bytes) {
      r.peak_bytes = c.c.total();
      r.peak_t_ns = c.t_ns;
      r.peak_step = c.step;
      r.at_peak = c.c;
    }
  }
  for (const auto& c : m.memory_categories) {  // the layers of each rank's chosen peak
    if (c.edge != MemEdge::PeakLayer) continue;
    auto it = rows.find(c.rank);
    if (it != rows.end() && it->second.peak_step == c.step && it->second.peak_t_ns == c.t_ns)
      it->second.at_peak_layers.emplace_back(c.layer, c.c.bytes[static_cast<int>(MemCategory::Activations)]);
  }
  std::vector<PeakTensor> planned_tensors;  // step -1: the plan's, rank 0's (every rank's row shows them)
  for (const auto& t : m.peak_tensors) {    // the named groups of each rank's chosen peak (sorted by ord)
    if (t.step == -1) {
      if (t.rank == 0) planned_tensors.push_back(t.t);
      continue;
    }
    auto it = rows.find(t.rank);
    if (it != rows.end() && it->second.peak_step == t.step) it->second.at_peak_tensors.push_back(t.t);
  }
  std::vector<RankMemoryRow> out;
  for (auto& [rank, r] : rows) {
    if (planned) {
      r.planned = planned->c;
      r.planned_peak_bytes = planned->c.total();
    }
    r.planned_tensors = planned_tensors;
    out.push_back(r);
  }
  return out;
}

}  // namespace ulysses::prof
