// Layout and per-frame draw list of the timeline (no QPainter here).
#include "trace/timeline_draw.hpp"

#include <algorithm>
#include <cmath>

#include "trace/phase_style.hpp"

namespace ulysses::ui {

TimelineLayout compute_layout(const TimelineIndex& ix, const TimelineLayoutOptions& opt) {
  TimelineLayout L;
  L.opt = opt;
  L.lanes.resize(ix.lanes().size());
  float y = 0;
  for (const auto& rk : ix.ranks()) {
    RankLayout rl;
    rl.rank = rk.rank;
    rl.y = y;
    y += opt.rank_header_h;
    rl.lanes_y = y;
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
    rl.h = y - rl.y;
    L.ranks.push_back(rl);
    y += opt.rank_gap;
  }
  L.total_h = y;
  return L;
}

std::pair<int32_t, int32_t> TimelineLayout::row_at(const TimelineIndex& ix, float y) const {
  for (const auto& ll : lanes) {
    if (y >= ll.y && y < ll.y + ll.h) {
      int32_t d = int32_t((y - ll.y) / opt.row_h);
      const auto& info = ix.lanes()[size_t(ll.lane)];
      if (d < info.row_count) return {ll.lane, d};
    }
  }
  return {-1, -1};
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
  const float y_top = p.y_scroll, y_bot = p.y_scroll + p.height;
  const auto& rows = ix.rows();
  const float rh = layout.opt.row_h;

  // Overlap shading behind each rank's lanes; intervals closer than a pixel merge.
  if (p.shade_overlap) {
    for (size_t ri = 0; ri < ix.ranks().size() && ri < layout.ranks.size(); ++ri) {
      const RankLayout& rl = layout.ranks[ri];
      if (rl.y + rl.h < y_top || rl.y > y_bot) continue;
      const IntervalList& ov = ix.ranks()[ri].overlap;
      auto it = std::partition_point(ov.begin(), ov.end(), [&](const auto& iv) { return iv.second <= t0; });
      const auto& rk = ix.ranks()[ri];
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
        sr.y = rl.lanes_y - p.y_scroll;
        sr.h = rl.y + rl.h - rl.lanes_y;
        out->shades.push_back(sr);
      }
    }
  }

  for (const auto& ll : layout.lanes) {
    if (ll.y + ll.h < y_top || ll.y > y_bot) continue;
    const auto& info = ix.lanes()[size_t(ll.lane)];
    for (int32_t d = 0; d < info.row_count; ++d) {
      const float ry = ll.y + float(d) * rh;
      if (ry + rh < y_top || ry > y_bot) continue;
      const TimelineRow& row = rows[size_t(info.first_row + d)];
      ++out->rows_visited;
      const float y = ry - p.y_scroll + 1, h = rh - 2;
      spans.clear();
      fold_row(ix, row, t0, t1, fold_ns, &spans);
      for (const FoldedSpan& sp : spans) {
        const prof::TraceRange& r = ix.at(row, sp.first);
        DrawItem it;
        const double x0 = vp.x_of(sp.start_ns), x1 = vp.x_of(sp.end_ns);
        it.x = clampx(x0, W);
        it.w = std::max(1.0f, clampx(x1, W) - it.x);  // narrow ranges stay visible: 1 px
        it.y = y;
        it.h = h;
        it.range = ix.range_at(row, sp.first);
        it.count = sp.count;
        if (sp.count == 1) {
          it.argb = phase_argb(r.phase, r.dir);
          it.name_id = r.name_id;
          if (!range_matches(p, r)) it.flags |= kDimmed;
          if (it.range == p.selected) it.flags |= kSelected;
          ++out->single_items;
        } else {
          it.argb = kFoldedArgb;
          it.flags |= kFolded;
          if ((p.match || p.match_phase) && !range_matches(p, r)) it.flags |= kDimmed;
          ++out->folded_items;
          out->folded_ranges += sp.count;
        }
        out->items.push_back(it);
      }
    }
  }
}

int64_t fold_threshold_ns(const TimelineViewport& vp, float fold_px) {
  return std::max<int64_t>(1, int64_t(std::ceil(double(fold_px) * vp.ns_per_px)));
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
    if (d <= tol && d < best_d) {
      best = int64_t(i);
      best_d = d;
    }
  }
  return best;
}

std::vector<FlowPoint> collective_flow(const TimelineIndex& ix, const TimelineLayout& layout,
                                       const TimelineViewport& vp, float y_scroll, int64_t selected) {
  std::vector<FlowPoint> out;
  const auto& m = ix.model();
  if (selected < 0 || size_t(selected) >= m.ranges.size()) return out;
  const prof::TraceRange& sel = m.ranges[size_t(selected)];
  if (sel.pg < 0 || sel.seq < 0 || sel.is_kernel) return out;
  std::vector<int64_t> best;  // per rank: earliest range with the id
  for (const auto& lane : m.lanes) {
    if (lane.kind == prof::LaneKind::HeadRange) continue;
    for (int64_t k = lane.first; k < lane.first + lane.count; ++k) {
      const prof::TraceRange& r = m.ranges[size_t(k)];
      if (r.pg != sel.pg || r.seq != sel.seq || r.is_kernel) continue;
      if (size_t(r.rank) >= best.size()) best.resize(size_t(r.rank) + 1, -1);
      int64_t& b = best[size_t(r.rank)];
      if (b < 0 || r.start_ns < m.ranges[size_t(b)].start_ns) b = k;
    }
  }
  const float rh = layout.opt.row_h;
  for (size_t rank = 0; rank < best.size(); ++rank) {
    const int64_t k = best[rank];
    if (k < 0) continue;
    const prof::TraceRange& r = m.ranges[size_t(k)];
    if (size_t(r.lane) >= layout.lanes.size()) continue;
    const LaneLayout& ll = layout.lanes[size_t(r.lane)];
    const int32_t rows = std::max(1, int32_t(ll.h / rh + 0.5f));
    const int32_t d = std::min<int32_t>(r.depth, rows - 1);
    FlowPoint fp;
    fp.rank = r.rank;
    fp.range = k;
    fp.arrive_ns = r.start_ns;
    fp.x = float(vp.x_of(r.start_ns));
    fp.y = ll.y + float(d) * rh + rh / 2 - y_scroll;
    out.push_back(fp);
  }
  std::sort(out.begin(), out.end(), [](const FlowPoint& a, const FlowPoint& b) {
    return a.arrive_ns != b.arrive_ns ? a.arrive_ns < b.arrive_ns : a.rank < b.rank;
  });
  return out;
}

}  // namespace ulysses::ui
