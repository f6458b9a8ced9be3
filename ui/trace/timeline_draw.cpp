// Layout and per-frame draw list of the timeline (no QPainter here).
#include "trace/timeline_draw.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trace/phase_style.hpp"

namespace ulysses::ui {

TimelineLayout compute_layout(const TimelineIndex& ix, const TimelineLayoutOptions& opt,
                              const std::vector<uint8_t>& rank_flags) {
  TimelineLayout L;
  L.opt = opt;
  L.lanes.resize(ix.lanes().size());
  auto flags_of = [&](size_t pos) -> uint8_t { return pos < rank_flags.size() ? rank_flags[pos] : 0; };
  float y = 0;
  auto place = [&](size_t pos) {
    const auto& rk = ix.ranks()[pos];
    const uint8_t f = flags_of(pos);
    RankLayout rl;
    rl.rank = rk.rank;
    rl.pos = int32_t(pos);
    rl.pinned = (f & kRankPinned) != 0;
    rl.collapsed = (f & kRankCollapsed) != 0;
    rl.y = y;
    y += opt.rank_header_h;
    rl.lanes_y = y;
    if (rl.collapsed) {  // one summary row; every lane of the rank points at it
      for (int32_t li : rk.lanes) {
        LaneLayout ll;
        ll.lane = li;
        ll.rank = rk.rank;
        ll.y = y;
        ll.h = opt.row_h;
        ll.collapsed = true;
        L.lanes[size_t(li)] = ll;
      }
      y += opt.row_h + opt.lane_gap;
    } else {
      for (int32_t li : rk.lanes) {
        const auto& info = ix.lanes()[size_t(li)];
        LaneLayout ll;
        ll.lane = li;
        ll.rank = rk.rank;
        ll.y = y;
        ll.h = float(std::max(1, info.row_count)) * opt.row_h;
        L.lanes[size_t(li)] = ll;
        y += ll.h + opt.lane_gap;
      }
    }
    rl.h = y - rl.y;
    L.ranks.push_back(rl);
    y += opt.rank_gap;
  };
  for (size_t pos = 0; pos < ix.ranks().size(); ++pos)
    if ((flags_of(pos) & (kRankPinned | kRankHidden)) == kRankPinned) place(pos);
  L.pinned_h = y;
  for (size_t pos = 0; pos < ix.ranks().size(); ++pos) {
    const uint8_t f = flags_of(pos);
    if (f & kRankHidden) {
      ++L.hidden_ranks;
      for (int32_t li : ix.ranks()[pos].lanes) {
        LaneLayout ll;
        ll.lane = li;
        ll.rank = ix.ranks()[pos].rank;
        ll.hidden = true;
        L.lanes[size_t(li)] = ll;
      }
    } else if (!(f & kRankPinned)) {
      place(pos);
    }
  }
  L.total_h = y;
  return L;
}

std::pair<int32_t, int32_t> TimelineLayout::row_at(const TimelineIndex& ix, float y) const {
  for (const auto& ll : lanes) {
    if (ll.hidden || ll.collapsed) continue;
    if (y >= ll.y && y < ll.y + ll.h) {
      int32_t d = int32_t((y - ll.y) / opt.row_h);
      const auto& info = ix.lanes()[size_t(ll.lane)];
      if (d < info.row_count) return {ll.lane, d};
    }
  }
  return {-1, -1};
}

const RankLayout* TimelineLayout::rank_at(float y) const {
  for (const auto& rl : ranks)
    if (y >= rl.y && y < rl.y + rl.h) return &rl;
  return nullptr;
}

const RankLayout* TimelineLayout::find_rank(int32_t rank) const {
  for (const auto& rl : ranks)
    if (rl.rank == rank) return &rl;
  return nullptr;
}

namespace {

inline float clampx(double x, double w) { return float(std::clamp(x, -2.0, w + 2.0)); }

}  // namespace

bool range_matches(const DrawParams& p, const prof::TraceRange& r) {
  if (!p.match && !p.match_phase) return true;
  if (p.match && r.name_id >= 0 && size_t(r.name_id) < p.match->size() && (*p.match)[size_t(r.name_id)]) return true;
  return p.match_phase && size_t(r.phase) < p.match_phase->size() && (*p.match_phase)[size_t(r.phase)];
}

void compute_draw_list(const TimelineIndex& ix, const TimelineLayout& layout, const DrawParams& p, DrawList* out) {
  out->clear();
  const TimelineViewport& vp = p.vp;
  const double npp = vp.ns_per_px;
  const double W = vp.width_px;
  const int64_t t0 = vp.t0_ns;
  const int64_t t1 = vp.t1_ns();  // exclusive: a range starting at the right edge is not visible
  // Integer fold threshold: a range is narrow when shorter than fold_ns (see the fold loop).
  const int64_t fold_ns = fold_threshold_ns(vp, p.fold_px);
  std::vector<FoldedSpan> spans;
  const auto& rows = ix.rows();
  const float rh = layout.opt.row_h;
  const float band = layout.pinned_h;
  // Widget y of [ly, ly + h) clipped to what shows: pinned rows anywhere above p.height,
  // scrolled rows only under the pinned band. false when nothing of it shows.
  auto clip = [&](float ly, float h, float* sy, float* sh) {
    float top = layout.screen_y(ly, p.y_scroll), bot = top + h;
    if (ly >= band) top = std::max(top, band);
    bot = std::min(bot, p.height);
    if (bot <= top) return false;
    *sy = top;
    *sh = bot - top;
    return true;
  };

  // Overlap shading behind each rank's lanes; intervals closer than a pixel merge.
  if (p.shade_overlap) {
    for (const RankLayout& rl : layout.ranks) {
      float sy = 0, sh = 0;
      if (size_t(rl.pos) >= ix.ranks().size() || !clip(rl.lanes_y, rl.y + rl.h - rl.lanes_y, &sy, &sh)) continue;
      const auto& rk = ix.ranks()[size_t(rl.pos)];
      const IntervalList& ov = rk.overlap;
      auto it = std::partition_point(ov.begin(), ov.end(), [&](const auto& iv) { return iv.second <= t0; });
      const int64_t px_ns = std::max<int64_t>(1, int64_t(std::ceil(npp)));
      int64_t i = it - ov.begin();
      const int64_t n = int64_t(ov.size());
      while (i < n && ov[size_t(i)].first < t1) {
        // Merge every following interval whose gap to the previous one is under a pixel.
        const int64_t stop = rk.overlap_gaps.find_first(
            i + 1, px_ns, [&](int64_t k) { return ov[size_t(k)].first - ov[size_t(k - 1)].second; });
        const int64_t s = ov[size_t(i)].first;
        const int64_t e = ov[size_t(stop - 1)].second;
        i = stop;
        const double x0 = vp.x_of(s), x1 = vp.x_of(e);
        ShadeRect sr;
        sr.x = clampx(x0, W);
        sr.w = std::max(1.0f, clampx(x1, W) - sr.x);
        sr.y = sy;
        sr.h = sh;
        out->shades.push_back(sr);
      }
    }
  }

  // One row's visible ranges at layout y `ry` (folded), as items.
  auto draw_row = [&](const TimelineRow& row, float ry, uint8_t extra_flags) {
    float sy = 0, sh = 0;
    if (!clip(ry + 1, rh - 2, &sy, &sh)) return;
    ++out->rows_visited;
    spans.clear();
    fold_row(ix, row, t0, t1, fold_ns, &spans);
    for (const FoldedSpan& sp : spans) {
      const prof::TraceRange& r = ix.at(row, sp.first);
      DrawItem it;
      const double x0 = vp.x_of(sp.start_ns), x1 = vp.x_of(sp.end_ns);
      it.x = clampx(x0, W);
      it.w = std::max(1.0f, clampx(x1, W) - it.x);  // narrow ranges stay visible: 1 px
      it.y = sy;
      it.h = sh;
      it.range = ix.range_at(row, sp.first);
      it.count = sp.count;
      if (ix.weighted()) {  // an overview: count the trace's ranges, not the overview's
        it.count = 0;
        for (int64_t k = 0; k < sp.count; ++k) it.count += ix.weight(ix.range_at(row, sp.first + k));
      }
      it.flags = extra_flags;
      if (it.count == 1) {
        it.argb = ix.range_argb(r);
        it.name_id = r.name_id;
        if (!range_matches(p, r)) it.flags |= kDimmed;
        if (it.range == p.selected) it.flags |= kSelected;
        ++out->single_items;
      } else {
        it.argb = kFoldedArgb;
        it.flags |= kFolded;
        if ((p.match || p.match_phase) && !range_matches(p, r)) it.flags |= kDimmed;
        ++out->folded_items;
        out->folded_ranges += it.count;
      }
      out->items.push_back(it);
    }
  };

  for (const auto& ll : layout.lanes) {
    if (ll.hidden || ll.collapsed) continue;
    const auto& info = ix.lanes()[size_t(ll.lane)];
    for (int32_t d = 0; d < info.row_count; ++d) draw_row(rows[size_t(info.first_row + d)], ll.y + float(d) * rh, 0);
  }
  // Collapsed ranks: the top-level (depth 0) row of each lane, merged into the summary row;
  // a lane whose top level is step ranges also draws depth 1 over it, so the phases show.
  for (const RankLayout& rl : layout.ranks) {
    if (!rl.collapsed || size_t(rl.pos) >= ix.ranks().size()) continue;
    for (int32_t li : ix.ranks()[size_t(rl.pos)].lanes) {
      const auto& info = ix.lanes()[size_t(li)];
      if (info.row_count == 0 || ix.model().lanes[size_t(li)].kind == prof::LaneKind::HeadRange) continue;
      const TimelineRow& top = rows[size_t(info.first_row)];
      draw_row(top, rl.lanes_y, kSummary);
      if (info.row_count > 1 && top.size > 0 && ix.at(top, 0).phase == prof::Phase::Step)
        draw_row(rows[size_t(info.first_row + 1)], rl.lanes_y, kSummary);
    }
  }
}

int64_t fold_threshold_ns(const TimelineViewport& vp, float fold_px) {
  return std::max<int64_t>(1, TimelineViewport::sat_ns(std::ceil(double(fold_px) * vp.ns_per_px)));
}

void fold_row(const TimelineIndex& ix, const TimelineRow& row, int64_t t0, int64_t t1, int64_t fold_ns,
              std::vector<FoldedSpan>* out) {
  auto [lo, hi] = ix.visible(row, t0, t1);
  int64_t i = lo;
  while (i < hi) {
    const prof::TraceRange& r = ix.at(row, i);
    if (r.end_ns - r.start_ns >= fold_ns) {
      out->push_back(FoldedSpan{i, 1, r.start_ns, r.end_ns});
      ++i;
      continue;
    }
    // Fold: absorb every following range that starts less than fold_ns after the previous
    // one ends and is itself narrow; the fold tree finds where that stops in one query.
    const int64_t j = std::min(hi, ix.fold_stop(row, i + 1, fold_ns));
    const int64_t fold_end = ix.at(row, j - 1).end_ns;
    out->push_back(FoldedSpan{i, j - i, r.start_ns, fold_end});
    i = j;
  }
}

int64_t hit_test(const DrawList& dl, float x, float y, float tol) {
  int64_t best = -1;
  float best_d = tol + 1;
  for (size_t i = 0; i < dl.items.size(); ++i) {
    const DrawItem& it = dl.items[i];
    if (y < it.y || y >= it.y + it.h) continue;
    float d = 0;
    if (x < it.x)
      d = it.x - x;
    else if (x > it.x + it.w)
      d = x - (it.x + it.w);
    if (d <= tol && (d < best_d || d == 0)) {  // containing items: the last (topmost) wins
      best = int64_t(i);
      best_d = d;
    }
  }
  return best;
}

CollectiveArrivals collective_arrivals(const prof::TraceModel& m, int64_t range) {
  CollectiveArrivals out;
  if (range < 0 || size_t(range) >= m.ranges.size()) return out;
  const prof::TraceRange& sel = m.ranges[size_t(range)];
  if (sel.is_kernel || sel.extra < 0) return out;
  const prof::RangeExtra& id = m.extra(sel);
  if (id.pg < 0 || id.seq < 0) return out;
  std::map<int32_t, int64_t> best;  // rank -> range (a map: rank ids may be huge)
  std::set<int32_t> members;
  for (const auto& lane : m.lanes) {
    if (lane.kind == prof::LaneKind::HeadRange) continue;
    const int64_t end = std::min<int64_t>(lane.first + lane.count, int64_t(m.ranges.size()));
    for (int64_t k = lane.first; k < end; ++k) {
      const prof::TraceRange& r = m.ranges[size_t(k)];
      if (r.extra < 0 || r.is_kernel) continue;
      const prof::RangeExtra& x = m.extra(r);
      if (x.pg != id.pg) continue;
      members.insert(r.rank);
      if (x.seq != id.seq) continue;
      auto [it, fresh] = best.emplace(r.rank, k);
      if (!fresh && r.start_ns < m.ranges[size_t(it->second)].start_ns) it->second = k;
    }
  }
  out.pg = id.pg;
  out.seq = id.seq;
  out.group_ranks = int32_t(members.size());
  bool first = true;
  for (const auto& [rank, k] : best) {  // ascending rank: a tie for the last goes to the lowest
    const int64_t t = m.ranges[size_t(k)].start_ns;
    out.arrivals.push_back({rank, k, t, 0});
    if (first || t < out.first_ns) out.first_ns = t;
    if (first || t > out.last_ns) {
      out.last_ns = t;
      out.last_rank = rank;
    }
    first = false;
  }
  out.skew_ns = out.last_ns - out.first_ns;
  for (auto& a : out.arrivals) a.wait_ns = out.last_ns - a.arrive_ns;
  return out;
}

int64_t collective_range(const prof::TraceModel& m, int32_t pg, int64_t seq, int32_t rank) {
  int64_t best = -1;
  for (const auto& lane : m.lanes) {
    if (lane.kind == prof::LaneKind::HeadRange || lane.rank != rank) continue;
    const int64_t end = std::min<int64_t>(lane.first + lane.count, int64_t(m.ranges.size()));
    for (int64_t k = lane.first; k < end; ++k) {
      const prof::TraceRange& r = m.ranges[size_t(k)];
      if (r.extra < 0 || r.is_kernel || r.rank != rank) continue;
      const prof::RangeExtra& x = m.extra(r);
      if (x.pg != pg || x.seq != seq) continue;
      if (best < 0 || r.start_ns < m.ranges[size_t(best)].start_ns) best = k;
    }
  }
  return best;
}

int64_t next_collective_instance(const prof::TraceModel& m, int64_t range, bool forward) {
  if (range < 0 || size_t(range) >= m.ranges.size()) return -1;
  const prof::TraceRange& sel = m.ranges[size_t(range)];
  if (sel.is_kernel || sel.extra < 0 || m.extra(sel).pg < 0 || m.extra(sel).seq < 0) return -1;
  const int32_t pg = m.extra(sel).pg;
  int64_t best = -1;
  for (const auto& lane : m.lanes) {
    if (lane.kind == prof::LaneKind::HeadRange || lane.rank != sel.rank) continue;
    const int64_t end = std::min<int64_t>(lane.first + lane.count, int64_t(m.ranges.size()));
    for (int64_t k = lane.first; k < end; ++k) {
      if (k == range) continue;
      const prof::TraceRange& r = m.ranges[size_t(k)];
      if (r.extra < 0 || r.is_kernel || r.name_id != sel.name_id || r.phase != sel.phase || r.dir != sel.dir ||
          r.layer != sel.layer || r.head_begin != sel.head_begin)
        continue;
      const prof::RangeExtra& x = m.extra(r);
      if (x.pg != pg || x.seq < 0) continue;
      // Ordered by (start, index) so that equal starts still walk one by one.
      const bool after = r.start_ns > sel.start_ns || (r.start_ns == sel.start_ns && k > range);
      if (after != forward) continue;
      if (best < 0) {
        best = k;
        continue;
      }
      const prof::TraceRange& b = m.ranges[size_t(best)];
      const bool nearer = forward ? (r.start_ns < b.start_ns || (r.start_ns == b.start_ns && k < best))
                                  : (r.start_ns > b.start_ns || (r.start_ns == b.start_ns && k > best));
      if (nearer) best = k;
    }
  }
  return best;
}

CollectiveInstanceRanges collective_instance(const TimelineIndex& ix, int64_t selected) {
  // One definition of an instance: the details table's (collective_arrivals).
  CollectiveInstanceRanges out;
  const CollectiveArrivals c = collective_arrivals(ix.model(), selected);
  for (const auto& a : c.arrivals) out.ranges.push_back(a.range);
  out.group_ranks = c.group_ranks;
  return out;
}

std::vector<FlowPoint> collective_flow(const TimelineIndex& ix, const TimelineLayout& layout,
                                       const TimelineViewport& vp, float y_scroll, int64_t selected) {
  return collective_flow(ix, layout, vp, y_scroll, collective_instance(ix, selected));
}

std::vector<FlowPoint> collective_flow(const TimelineIndex& ix, const TimelineLayout& layout,
                                       const TimelineViewport& vp, float y_scroll,
                                       const CollectiveInstanceRanges& instance, FlowSummary* summary) {
  std::vector<FlowPoint> out;
  const auto& m = ix.model();
  const float rh = layout.opt.row_h;
  int64_t first = 0, last = 0;
  int32_t last_rank = -1;
  bool last_hidden = false;
  for (const int64_t k : instance.ranges) {
    if (k < 0 || size_t(k) >= m.ranges.size()) continue;
    const prof::TraceRange& r = m.ranges[size_t(k)];
    const bool shown = size_t(r.lane) < layout.lanes.size() && !layout.lanes[size_t(r.lane)].hidden;
    // Ascending rank: a later arrival, or an equal one of a lower rank, never replaces the last.
    if (last_rank < 0 || r.start_ns < first) first = r.start_ns;
    if (last_rank < 0 || r.start_ns > last) {
      last = r.start_ns;
      last_rank = r.rank;
      last_hidden = !shown;
    }
    if (!shown) continue;
    const LaneLayout& ll = layout.lanes[size_t(r.lane)];
    const int32_t rows = std::max(1, int32_t(ll.h / rh + 0.5f));
    const int32_t d = ll.collapsed ? 0 : std::min<int32_t>(r.depth, rows - 1);
    FlowPoint fp;
    fp.rank = r.rank;
    fp.range = k;
    fp.arrive_ns = r.start_ns;
    fp.x = float(vp.x_of(r.start_ns));
    fp.y = layout.screen_y(ll.y + float(d) * rh + rh / 2, y_scroll);
    out.push_back(fp);
  }
  // By arrival; among equal arrivals the lowest rank last (the last arriver, as the analysis).
  std::sort(out.begin(), out.end(), [](const FlowPoint& a, const FlowPoint& b) {
    return a.arrive_ns != b.arrive_ns ? a.arrive_ns < b.arrive_ns : a.rank > b.rank;
  });
  if (summary) {
    summary->last_rank = last_rank;
    summary->last_hidden = last_hidden;
    summary->skew_ns = last - first;
    summary->ranks = int32_t(instance.ranges.size());
    summary->group_ranks = instance.group_ranks;
  }
  return out;
}

std::vector<std::vector<FlowPoint>> flows_in_view(const TimelineIndex& ix, const DrawList& dl, size_t max_groups) {
  const auto& m = ix.model();
  std::map<std::pair<int32_t, int32_t>, std::map<int32_t, FlowPoint>> groups;  // (pg, seq) -> rank -> point
  for (const auto& it : dl.items) {
    if (it.count != 1 || it.range < 0 || size_t(it.range) >= m.ranges.size()) continue;
    const prof::TraceRange& r = m.ranges[size_t(it.range)];
    if (r.is_kernel || r.extra < 0 || size_t(r.lane) >= m.lanes.size() ||
        m.lanes[size_t(r.lane)].kind == prof::LaneKind::HeadRange)
      continue;
    const prof::RangeExtra& x = m.extra(r);
    if (x.pg < 0 || x.seq < 0) continue;
    auto [pt, fresh] = groups[{x.pg, x.seq}].try_emplace(r.rank);
    if (!fresh && pt->second.arrive_ns <= r.start_ns) continue;
    pt->second.rank = r.rank;
    pt->second.range = it.range;
    pt->second.arrive_ns = r.start_ns;
    pt->second.x = it.x;
    pt->second.y = it.y + it.h / 2;
  }
  std::vector<std::vector<FlowPoint>> out;
  for (auto& [id, per_rank] : groups) {
    if (per_rank.size() < 2) continue;
    std::vector<FlowPoint> g;
    for (auto& [rank, fp] : per_rank) g.push_back(fp);
    std::sort(g.begin(), g.end(), [](const FlowPoint& a, const FlowPoint& b) {
      return a.arrive_ns != b.arrive_ns ? a.arrive_ns < b.arrive_ns : a.rank > b.rank;
    });
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const std::vector<FlowPoint>& a, const std::vector<FlowPoint>& b) {
    return a.front().arrive_ns < b.front().arrive_ns;
  });
  if (out.size() > max_groups) out.resize(max_groups);
  return out;
}

int64_t hit_flow(const std::vector<std::vector<FlowPoint>>& groups, float x, float y, float tolerance_px) {
  int64_t best = -1;
  double best_d = double(tolerance_px);
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    const FlowPoint& b = g.back();
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      const FlowPoint& a = g[i];
      // Distance from (x, y) to the segment a -> b.
      const double dx = double(b.x) - a.x, dy = double(b.y) - a.y, len2 = dx * dx + dy * dy;
      double t = len2 > 0 ? ((double(x) - a.x) * dx + (double(y) - a.y) * dy) / len2 : 0.0;
      t = std::clamp(t, 0.0, 1.0);
      const double px = a.x + t * dx - x, py = a.y + t * dy - y, d = std::sqrt(px * px + py * py);
      if (d <= best_d) {
        best_d = d;
        best = a.range;
      }
    }
  }
  return best;
}

}  // namespace ulysses::ui
