// Launch -> kernel flows: the correlation index and the arrows of a selection.
#include "trace/launch_flows.hpp"

#include <algorithm>

namespace ulysses::ui {

LaunchIndex build_launch_index(const prof::TraceModel& m) {
  LaunchIndex li;
  for (size_t i = 0; i < m.runtime.size(); ++i) {
    const prof::RuntimeCall& c = m.runtime[i];
    if (c.correlation != 0) li.call_of.emplace(LaunchIndex::key(c.rank, uint32_t(c.correlation)), int64_t(i));
  }
  for (const auto& lane : m.lanes) {
    if (lane.kind != prof::LaneKind::CudaStream) continue;
    for (int64_t k = lane.first; k < lane.first + lane.count; ++k) {
      const prof::TraceRange r = m.ranges[size_t(k)];
      if (!r.is_kernel || r.extra < 0) continue;
      const uint32_t corr = m.extra(r).correlation;
      if (corr != 0) li.kernel_of.emplace(LaunchIndex::key(r.rank, corr), k);
    }
  }
  return li;
}

namespace {

// Layout y (middle of a row) of lane `lane`'s row `row` (clamped to its rows; -1: its deepest),
// or of its rank's summary row when collapsed; false when hidden or not laid out.
bool launch_lane_y(const TimelineIndex& ix, const TimelineLayout& layout, int32_t lane, int32_t row, float* y) {
  if (lane < 0 || size_t(lane) >= layout.lanes.size()) return false;
  const LaneLayout& ll = layout.lanes[size_t(lane)];
  if (ll.hidden) return false;
  const float rh = layout.opt.row_h;
  if (ll.collapsed) {
    const RankLayout* rl = layout.find_rank(ll.rank);
    if (!rl) return false;
    *y = rl->lanes_y + rh / 2;
    return true;
  }
  const int32_t rows = std::max(1, ix.lanes()[size_t(lane)].row_count);
  const int32_t r = row < 0 ? rows - 1 : std::min(row, rows - 1);
  *y = ll.y + float(r) * rh + rh / 2;
  return true;
}

// Where a runtime call of (rank, tid) at time t is drawn: on its thread's lane, the row of the
// innermost range open at t (the operation that made the call), else the lane's first row; the
// rank's header when the thread has no lane.
bool launch_call_y(const TimelineIndex& ix, const TimelineLayout& layout, int32_t rank, int64_t tid, int64_t t,
                   float* y) {
  for (const auto& rk : ix.ranks()) {
    if (rk.rank != rank) continue;
    for (int32_t l : rk.lanes) {
      const prof::Lane& lane = ix.model().lanes[size_t(l)];
      if (lane.kind != prof::LaneKind::HostThread || lane.tid_or_stream != tid) continue;
      const TimelineLaneInfo& info = ix.lanes()[size_t(l)];
      int32_t row = 0;
      for (int32_t d = info.row_count - 1; d > 0; --d)
        if (ix.find_at(ix.rows()[size_t(info.first_row + d)], t) >= 0) {
          row = d;
          break;
        }
      return launch_lane_y(ix, layout, l, row, y);
    }
  }
  const RankLayout* rl = layout.find_rank(rank);
  if (!rl) return false;
  *y = rl->y + layout.opt.rank_header_h / 2;
  return true;
}

// Runtime calls of `rank` that start in [t0, t1) (TraceModel::runtime is sorted by (rank, start)).
template <class F>
void calls_in(const prof::TraceModel& m, int32_t rank, int64_t t0, int64_t t1, F&& f) {
  const auto& rt = m.runtime;
  auto it = std::lower_bound(rt.begin(), rt.end(), std::make_pair(rank, t0), [](const prof::RuntimeCall& c, auto v) {
    return c.rank != v.first ? c.rank < v.first : c.start_ns < v.second;
  });
  for (; it != rt.end() && it->rank == rank && it->start_ns < t1; ++it) f(size_t(it - rt.begin()));
}

}  // namespace

std::vector<LaunchFlow> launch_flows(const TimelineIndex& ix, const LaunchIndex& li, const TimelineLayout& layout,
                                     const TimelineViewport& vp, float y_scroll, int64_t selected, int64_t t0,
                                     int64_t t1, size_t max_flows) {
  const prof::TraceModel& m = ix.model();
  std::vector<int64_t> kernels;
  auto kernel_of_call = [&](size_t c) {
    const prof::RuntimeCall& call = m.runtime[c];
    auto k = li.kernel_of.find(LaunchIndex::key(call.rank, uint32_t(call.correlation)));
    if (k != li.kernel_of.end()) kernels.push_back(k->second);
  };
  if (selected >= 0 && size_t(selected) < m.ranges.size()) {
    prof::TraceRange r = m.ranges[size_t(selected)];
    const prof::Lane* lane = &m.lanes[size_t(r.lane)];
    if (lane->kind == prof::LaneKind::HeadRange && r.origin >= 0) {  // a copy: the range it copies
      r = m.ranges[size_t(r.origin)];
      lane = &m.lanes[size_t(r.lane)];
    }
    if (r.is_kernel) {
      kernels.push_back(selected);
    } else {
      const bool thread = lane->kind == prof::LaneKind::HostThread;
      calls_in(m, r.rank, r.start_ns, std::max(r.end_ns, r.start_ns + 1), [&](size_t c) {
        if (!thread || m.runtime[c].tid == lane->tid_or_stream) kernel_of_call(c);
      });
    }
  }
  if (t1 > t0)
    for (const auto& rk : ix.ranks()) calls_in(m, rk.rank, t0, t1, kernel_of_call);
  std::sort(kernels.begin(), kernels.end());
  kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());

  std::vector<LaunchFlow> out;
  for (int64_t k : kernels) {
    const prof::TraceRange kr = m.ranges[size_t(k)];
    LaunchFlow f;
    f.kernel = k;
    f.kernel_ns = kr.start_ns;
    float y0 = 0, y1 = 0;
    const uint32_t corr = kr.extra >= 0 ? m.extra(kr).correlation : 0;
    auto c = corr != 0 ? li.call_of.find(LaunchIndex::key(kr.rank, corr)) : li.call_of.end();
    if (c != li.call_of.end()) {
      const prof::RuntimeCall& call = m.runtime[size_t(c->second)];
      f.call = c->second;
      f.launch_ns = call.start_ns;
      if (!launch_call_y(ix, layout, call.rank, call.tid, call.start_ns, &y0)) continue;
    } else if (kr.origin >= 0 && size_t(kr.origin) < m.ranges.size()) {
      const prof::TraceRange o = m.ranges[size_t(kr.origin)];
      f.launch_ns = o.start_ns;
      if (!launch_lane_y(ix, layout, o.lane, o.depth, &y0)) continue;
    } else {
      continue;
    }
    if (!launch_lane_y(ix, layout, kr.lane, 0, &y1)) continue;
    f.x0 = float(vp.x_of(f.launch_ns));
    f.x1 = float(vp.x_of(f.kernel_ns));
    f.y0 = layout.screen_y(y0, y_scroll);
    f.y1 = layout.screen_y(y1, y_scroll);
    out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const LaunchFlow& a, const LaunchFlow& b) {
    return a.launch_ns != b.launch_ns ? a.launch_ns < b.launch_ns : a.kernel < b.kernel;
  });
  if (out.size() > max_flows) out.resize(max_flows);
  return out;
}

}  // namespace ulysses::ui
