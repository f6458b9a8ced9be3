// Builds the timeline's per-row search structure and the per-rank overlap intervals.
#include "trace/timeline_index.hpp"

#include <stdexcept>

#include "trace/phase_style.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>

namespace ulysses::ui {

using prof::Phase;
using prof::TraceModel;
using prof::TraceRange;

IntervalList interval_union(IntervalList v) {
  std::sort(v.begin(), v.end());
  IntervalList out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

IntervalList interval_intersection(const IntervalList& a, const IntervalList& b) {
  IntervalList out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].first, b[j].first);
    int64_t hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return out;
}

struct TimelineIndex::LaneRows {
  std::vector<TimelineRow> rows;
  bool have_t = false;
  int64_t t_min = 0, t_max = 0;
};

uint32_t TimelineIndex::range_argb(const prof::TraceRange& r) const {
  if (r.phase != prof::Phase::Other || r.name_id < 0 || size_t(r.name_id) >= name_argb_.size())
    return phase_argb(r.phase, r.dir);
  return name_argb_[size_t(r.name_id)];
}

std::shared_ptr<TimelineIndex> TimelineIndex::build(std::shared_ptr<const TraceModel> model,
                                                    const std::function<void(int)>& progress,
                                                    std::vector<int64_t> weights) {
  auto ix = std::make_shared<TimelineIndex>();
  ix->model_ = model;
  const TraceModel& m = *model;
  if (!weights.empty() && weights.size() != m.ranges.size())
    throw std::invalid_argument("TimelineIndex::build: one weight per range expected");
  ix->weights_ = std::move(weights);
  ix->name_argb_.reserve(m.strings.size());
  for (const auto& name : m.strings) ix->name_argb_.push_back(name_family_argb(name));
  const int64_t total = std::max<int64_t>(1, int64_t(m.ranges.size()));
  int64_t done = 0;
  int last_pct = -1;
  auto report = [&](int64_t n) {
    done += n;
    int pct = int(done * 100 / total);
    if (progress && pct != last_pct) {
      last_pct = pct;
      progress(std::min(pct, 100));
    }
  };

  std::map<int32_t, size_t> rank_slot;
  for (const auto& ri : m.ranks) ix->slot_of(rank_slot, ri.rank);

  // Each lane's rows are built apart, lanes shared out over one thread per core (largest
  // first), while this thread reports progress; then they are appended in lane order.
  std::vector<LaneRows> built(m.lanes.size());
  std::atomic<int64_t> ranges_done{0};
  auto build_lane = [&](size_t li) { ix->build_lane_rows(li, built[li], ranges_done); };
  {
    std::vector<size_t> by_size(m.lanes.size());
    std::iota(by_size.begin(), by_size.end(), size_t{0});
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](size_t x, size_t y) { return m.lanes[x].count > m.lanes[y].count; });
    prof::parallel_for(
        by_size.size(), 0, [&](size_t k) { build_lane(by_size[k]); }, [&] { report(ranges_done.exchange(0)); },
        std::chrono::milliseconds(50));
  }
  int64_t t_min = 0, t_max = 0;
  const bool have_t = ix->append_lanes(built, rank_slot, t_min, t_max);
  ix->build_overlap(t_min, t_max);
  ix->build_steps();
  ix->set_extent(have_t, t_min, t_max);
  if (progress) progress(100);
  return ix;
}

// Slot of a rank in ranks_, added (in order of first sight) when new.
size_t TimelineIndex::slot_of(std::map<int32_t, size_t>& rank_slot, int32_t rank) {
  auto it = rank_slot.find(rank);
  if (it != rank_slot.end()) return it->second;
  size_t s = ranks_.size();
  rank_slot[rank] = s;
  TimelineRankInfo info;
  info.rank = rank;
  ranks_.push_back(std::move(info));
  return s;
}

// One lane's rows (run on a worker thread; reads the model only): its ranges in start
// order, each on the row of its nesting depth.
void TimelineIndex::build_lane_rows(size_t li, LaneRows& out, std::atomic<int64_t>& ranges_done) const {
  const TraceModel& m = *model_;
  const prof::Lane& lane = m.lanes[li];
  const int64_t n = std::max<int64_t>(0, std::min<int64_t>(lane.count, int64_t(m.ranges.size()) - lane.first));

  // Order of the lane's ranges by start (identity when already sorted, the normal case).
  bool sorted = true;
  for (int64_t i = 1; i < n && sorted; ++i)
    sorted = m.ranges[size_t(lane.first + i - 1)].start_ns <= m.ranges[size_t(lane.first + i)].start_ns;
  std::vector<uint32_t> order;
  if (!sorted) {
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return m.ranges[size_t(lane.first + a)].start_ns < m.ranges[size_t(lane.first + b)].start_ns;
    });
  }
  auto off = [&](int64_t i) -> uint32_t { return sorted ? uint32_t(i) : order[size_t(i)]; };

  // Row of each range = nesting depth from a stack of open ends.
  std::vector<uint8_t> row_of(static_cast<size_t>(n));
  std::vector<int64_t> row_count;
  std::vector<int64_t> open_ends;  // stack of ends of open ranges, one per row
  for (int64_t i = 0; i < n; ++i) {
    const TraceRange& r = m.ranges[size_t(lane.first + off(i))];
    while (!open_ends.empty() && open_ends.back() <= r.start_ns) open_ends.pop_back();
    size_t depth = std::min<size_t>(open_ends.size(), 255);
    if (open_ends.size() < 255) open_ends.push_back(std::max(r.end_ns, r.start_ns));
    row_of[size_t(i)] = uint8_t(depth);
    if (row_count.size() <= depth) row_count.resize(depth + 1, 0);
    ++row_count[depth];
    if (!out.have_t) {
      out.t_min = r.start_ns;
      out.t_max = r.end_ns;
      out.have_t = true;
    }
    out.t_min = std::min(out.t_min, r.start_ns);
    out.t_max = std::max(out.t_max, r.end_ns);
    if ((i & 0xFFFF) == 0xFFFF) ranges_done += 0x10000;
  }
  ranges_done += n & 0xFFFF;
  // A lane that is never empty keeps at least one row so it is drawn.
  if (row_count.empty()) row_count.push_back(0);
  for (size_t d = 0; d < row_count.size(); ++d) {
    TimelineRow row;
    row.lane = int32_t(li);
    row.depth = int32_t(d);
    row.size = row_count[d];
    row.identity = sorted && row_count.size() == 1;
    if (!row.identity) row.offsets.reserve(size_t(row_count[d]));
    out.rows.push_back(std::move(row));
  }
  if (!(sorted && row_count.size() == 1)) {
    for (int64_t i = 0; i < n; ++i) out.rows[row_of[size_t(i)]].offsets.push_back(off(i));
  }
  for (TimelineRow& row : out.rows) row.fold_keys.build(row.size, [&](int64_t i) { return fold_key(row, i); });
}

// The lanes' rows appended in lane order, each lane recorded under its rank; the time span
// of all ranges into t_min / t_max (false when there is none).
bool TimelineIndex::append_lanes(std::vector<LaneRows>& built, std::map<int32_t, size_t>& rank_slot, int64_t& t_min,
                                 int64_t& t_max) {
  const TraceModel& m = *model_;
  bool have_t = false;
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const prof::Lane& lane = m.lanes[li];
    size_t rs = slot_of(rank_slot, lane.rank);
    ranks_[rs].lanes.push_back(int32_t(li));
    TimelineLaneInfo info;
    info.lane = int32_t(li);
    info.rank = lane.rank;
    info.first_row = int32_t(rows_.size());
    LaneRows& b = built[li];
    if (b.have_t) {
      t_min = have_t ? std::min(t_min, b.t_min) : b.t_min;
      t_max = have_t ? std::max(t_max, b.t_max) : b.t_max;
      have_t = true;
    }
    info.row_count = int32_t(b.rows.size());
    for (TimelineRow& row : b.rows) rows_.push_back(std::move(row));
    std::vector<TimelineRow>().swap(b.rows);
    lanes_.push_back(info);
  }
  return have_t;
}

// Overlap shading from the analysis core's own compute / comm intervals (kernels on GPU
// ranks, leaf host ranges otherwise), so the picture agrees with the report.
void TimelineIndex::build_overlap(int64_t t_min, int64_t t_max) {
  const TraceModel& m = *model_;
  std::map<int32_t, prof::RankIntervals> intervals;  // the model classified once for all ranks
  for (prof::RankIntervals& ri : prof::all_rank_intervals(m, t_min, t_max + 1)) intervals[ri.rank] = std::move(ri);
  for (auto& rk : ranks_) {
    const prof::RankIntervals& ri = intervals[rk.rank];  // a rank without lanes: none
    const std::vector<prof::Interval>&comp = ri.compute, &comm = ri.comm;
    IntervalList a, b;
    a.reserve(comp.size());
    b.reserve(comm.size());
    for (const auto& iv : comp) a.emplace_back(iv.start, iv.end);
    for (const auto& iv : comm) b.emplace_back(iv.start, iv.end);
    rk.overlap = interval_intersection(a, b);
    rk.comm = std::move(b);
    const IntervalList& ov = rk.overlap;
    rk.overlap_gaps.build(int64_t(ov.size()), [&](int64_t i) {
      return i == 0 ? std::numeric_limits<int64_t>::max() : ov[size_t(i)].first - ov[size_t(i - 1)].second;
    });
  }
  std::sort(ranks_.begin(), ranks_.end(),
            [](const TimelineRankInfo& a, const TimelineRankInfo& b) { return a.rank < b.rank; });
}

// Steps over all ranks.
void TimelineIndex::build_steps() {
  const TraceModel& m = *model_;
  std::map<int64_t, StepSpan> steps;
  for (const auto& st : m.steps) {
    auto it = steps.find(st.step);
    if (it == steps.end()) {
      steps[st.step] = StepSpan{st.step, st.start_ns, st.end_ns};
    } else {
      it->second.start_ns = std::min(it->second.start_ns, st.start_ns);
      it->second.end_ns = std::max(it->second.end_ns, st.end_ns);
    }
  }
  for (auto& kv : steps) steps_.push_back(kv.second);
}

// The time span shown: the ranges', widened to the model's own span and to the memory
// samples.
void TimelineIndex::set_extent(bool have_t, int64_t t_min, int64_t t_max) {
  const TraceModel& m = *model_;
  if (!have_t) {
    t_min = m.t_min;
    t_max = m.t_max;
  }
  if (m.t_max > m.t_min && have_t) {
    t_min = std::min(t_min, m.t_min);
    t_max = std::max(t_max, m.t_max);
  }
  for (const auto& mp : m.memory) {
    if (!have_t) {
      t_min = t_max = mp.t_ns;
      have_t = true;
    }
    t_min = std::min(t_min, mp.t_ns);
    t_max = std::max(t_max, mp.t_ns);
  }
  t_min_ = t_min;
  t_max_ = std::max(t_max, t_min + 1);
}

std::pair<int64_t, int64_t> TimelineIndex::visible(const TimelineRow& row, int64_t t0, int64_t t1) const {
  // Rows are disjoint and sorted, so ends are sorted too.
  int64_t lo = 0, hi = row.size;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (at(row, mid).end_ns > t0)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int64_t first = lo;
  return {first, first_start_at_or_after(row, first, row.size, t1)};
}

int64_t TimelineIndex::first_start_at_or_after(const TimelineRow& row, int64_t lo, int64_t hi, int64_t t) const {
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (at(row, mid).start_ns >= t)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

int64_t TimelineIndex::find_at(const TimelineRow& row, int64_t t) const {
  auto [lo, hi] = visible(row, t, t + 1);
  for (int64_t i = lo; i < hi; ++i) {
    const auto& r = at(row, i);
    if (r.start_ns <= t && t < std::max(r.end_ns, r.start_ns + 1)) return range_at(row, i);
  }
  return -1;
}

}  // namespace ulysses::ui
