// Timeline index and draw list: visible-range search and folding against brute-force
// references on random nested data, and the draw list of uniform traces at three zoom levels
// with counts computed from the trace's geometry.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <map>
#include <set>

#include "profiler/test_util.hpp"
#include "testdata/synthetic_trace.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_index.hpp"

using namespace ulysses::ui;
using namespace ulysses::testdata;
using ulysses::prof::TraceModel;
using ulysses::prof::TraceRange;

namespace {

// Random properly nested ranges on `lanes` lanes: top-level ranges with random gaps, each with
// random children (depth <= 3); widths from 1 ns to 100 us, many tiny ones.
std::shared_ptr<TraceModel> random_nested(uint64_t seed, int lanes, int top_per_lane) {
  std::mt19937_64 rng(seed);
  auto m = std::make_shared<TraceModel>();
  m->strings = {"r"};
  std::vector<std::vector<TraceRange>> per(static_cast<size_t>(lanes));
  std::function<void(int, int64_t, int64_t, int)> children = [&](int lane, int64_t s, int64_t e, int depth) {
    if (depth >= 3 || e - s < 4) return;
    int64_t t = s + int64_t(rng() % uint64_t(std::max<int64_t>(1, (e - s) / 8)));
    const int n = int(rng() % 5);
    for (int i = 0; i < n && t < e - 1; ++i) {
      const int64_t w = 1 + int64_t(rng() % uint64_t(std::max<int64_t>(1, (e - t) / 2)));
      TraceRange r;
      r.start_ns = t;
      r.end_ns = std::min(e, t + w);
      per[size_t(lane)].push_back(r);
      children(lane, r.start_ns, r.end_ns, depth + 1);
      t = r.end_ns + int64_t(rng() % 50);
    }
  };
  for (int l = 0; l < lanes; ++l) {
    int64_t t = 0;
    for (int i = 0; i < top_per_lane; ++i) {
      t += int64_t(rng() % 3 == 0 ? rng() % 20000 : rng() % 30);
      const int64_t w = rng() % 4 == 0 ? 1 + int64_t(rng() % 100000) : 1 + int64_t(rng() % 300);
      TraceRange r;
      r.start_ns = t;
      r.end_ns = t + w;
      per[size_t(l)].push_back(r);
      children(l, r.start_ns, r.end_ns, 1);
      t = r.end_ns;
    }
  }
  for (int l = 0; l < lanes; ++l) {
    auto& v = per[size_t(l)];
    std::stable_sort(v.begin(), v.end(), [](const TraceRange& a, const TraceRange& b) {
      return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns > b.end_ns);
    });
    ulysses::prof::Lane lane;
    lane.rank = l / 2;
    lane.name = "lane " + std::to_string(l);
    lane.first = int64_t(m->ranges.size());
    lane.count = int64_t(v.size());
    m->lanes.push_back(lane);
    for (auto r : v) {
      r.lane = l;
      r.rank = l / 2;
      m->ranges.push_back(r);
    }
  }
  for (int r = 0; r < (lanes + 1) / 2; ++r) m->ranks.push_back({r, r, 0, "cpu", "", 0});
  m->t_min = 0;
  m->t_max = 0;
  for (const auto& r : m->ranges) m->t_max = std::max(m->t_max, r.end_ns);
  return m;
}

// Reference fold: linear walk over a row's visible ranges.
std::vector<FoldedSpan> reference_fold(const TimelineIndex& ix, const TimelineRow& row, int64_t t0, int64_t t1,
                                       int64_t fold_ns) {
  std::vector<int64_t> vis;
  for (int64_t i = 0; i < row.size; ++i) {
    const auto& r = ix.at(row, i);
    if (r.end_ns > t0 && r.start_ns < t1) vis.push_back(i);
  }
  std::vector<FoldedSpan> out;
  size_t k = 0;
  while (k < vis.size()) {
    const auto& r = ix.at(row, vis[k]);
    if (r.end_ns - r.start_ns >= fold_ns) {
      out.push_back({vis[k], 1, r.start_ns, r.end_ns});
      ++k;
      continue;
    }
    FoldedSpan s{vis[k], 1, r.start_ns, r.end_ns};
    ++k;
    while (k < vis.size()) {
      const auto& n = ix.at(row, vis[k]);
      if (n.start_ns >= s.end_ns + fold_ns || n.end_ns - n.start_ns >= fold_ns) break;
      s.end_ns = std::max(s.end_ns, n.end_ns);
      ++s.count;
      ++k;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST(TimelineIndex, RowsPartitionEachLaneIntoDisjointSortedRows) {
  auto m = random_nested(7, 4, 300);
  auto ix = TimelineIndex::build(m);
  for (const auto& li : ix->lanes()) {
    std::multiset<int64_t> seen;
    for (int32_t d = 0; d < li.row_count; ++d) {
      const auto& row = ix->rows()[size_t(li.first_row + d)];
      for (int64_t i = 0; i < row.size; ++i) {
        seen.insert(ix->range_at(row, i));
        if (i > 0) {
          ASSERT_LE(ix->at(row, i - 1).end_ns, ix->at(row, i).start_ns) << "row " << d << " pos " << i;
        }
      }
    }
    const auto& lane = m->lanes[size_t(li.lane)];
    ASSERT_EQ(int64_t(seen.size()), lane.count);
    for (int64_t r = lane.first; r < lane.first + lane.count; ++r) ASSERT_EQ(seen.count(r), 1u) << r;
  }
}

TEST(TimelineIndex, VisibleSearchMatchesBruteForce) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto m = random_nested(seed, 3, 400);
    auto ix = TimelineIndex::build(m);
    std::mt19937_64 rng(seed + 100);
    for (int q = 0; q < 200; ++q) {
      const int64_t a = int64_t(rng() % uint64_t(m->t_max + 1000)) - 500;
      const int64_t b = a + 1 + int64_t(rng() % uint64_t(q % 3 == 0 ? m->t_max + 1 : 5000));
      for (const auto& li : ix->lanes()) {
        std::set<int64_t> got, want;
        for (int32_t d = 0; d < li.row_count; ++d) {
          const auto& row = ix->rows()[size_t(li.first_row + d)];
          auto [lo, hi] = ix->visible(row, a, b);
          for (int64_t i = lo; i < hi; ++i) got.insert(ix->range_at(row, i));
        }
        const auto& lane = m->lanes[size_t(li.lane)];
        for (int64_t r = lane.first; r < lane.first + lane.count; ++r)
          if (m->ranges[size_t(r)].end_ns > a && m->ranges[size_t(r)].start_ns < b) want.insert(r);
        ASSERT_EQ(got, want) << "seed " << seed << " window [" << a << ", " << b << ")";
      }
    }
  }
}

TEST(TimelineIndex, UnsortedLaneIsToleratedAndOverlapIsCommAndComputeTogether) {
  auto m = std::make_shared<TraceModel>();
  m->strings = {"x"};
  m->ranks.push_back({0, 0, 0, "cpu", "", 0});
  ulysses::prof::Lane main, comm;
  main.name = "main";
  main.first = 0;
  main.count = 2;
  comm.name = "comm";
  comm.kind = ulysses::prof::LaneKind::Comm;
  comm.first = 2;
  comm.count = 1;
  m->lanes = {main, comm};
  TraceRange a, b, c;
  a.start_ns = 500;
  a.end_ns = 900;
  a.phase = ulysses::prof::Phase::Attention;
  a.lane = 0;
  b.start_ns = 0;
  b.end_ns = 300;
  b.phase = ulysses::prof::Phase::Mlp;
  b.lane = 0;  // out of order
  c.start_ns = 200;
  c.end_ns = 600;
  c.phase = ulysses::prof::Phase::A2ASeqToHead;
  c.lane = 1;
  m->ranges.rows() = {a, b, c};
  auto ix = TimelineIndex::build(m);
  const auto& row = ix->rows()[0];
  ASSERT_EQ(row.size, 2);
  EXPECT_EQ(ix->at(row, 0).start_ns, 0);
  EXPECT_EQ(ix->at(row, 1).start_ns, 500);
  EXPECT_EQ(ix->find_at(row, 650), 0);
  EXPECT_EQ(ix->find_at(row, 400), -1);
  ASSERT_EQ(ix->ranks().size(), 1u);
  const IntervalList want = {{200, 300}, {500, 600}};
  EXPECT_EQ(ix->ranks()[0].overlap, want);
}

// Overlap shading per rank from one classification of the model (all_rank_intervals): each
// rank gets its own compute x comm intersection, hand-computed; a rank without lanes none.
TEST(TimelineIndex, OverlapIsPerRank) {
  using ulysses::prof::LaneKind;
  using ulysses::prof::Phase;
  using ut::R;
  // rank 0: attention 500-900 (compute) against an all-to-all 200-600 -> overlap 500-600
  // rank 1: mlp 0-300 against all-to-alls 100-200 and 250-400 -> overlap 100-200, 250-300
  auto m = std::make_shared<TraceModel>(ut::make_model({
      {0, LaneKind::HostThread, "main", {R(500, 900, Phase::Attention)}},
      {0, LaneKind::Comm, "comm", {R(200, 600, Phase::A2ASeqToHead)}},
      {1, LaneKind::HostThread, "main", {R(0, 300, Phase::Mlp)}},
      {1, LaneKind::Comm, "comm", {R(100, 200, Phase::A2ASeqToHead), R(250, 400, Phase::A2AHeadToSeq)}},
  }));
  for (int32_t r : {0, 1, 5}) m->ranks.push_back({r, r, 0, "cpu", "", 0});
  auto ix = TimelineIndex::build(m);
  ASSERT_EQ(ix->ranks().size(), 3u);
  EXPECT_EQ(ix->ranks()[0].rank, 0);
  EXPECT_EQ(ix->ranks()[0].overlap, (IntervalList{{500, 600}}));
  EXPECT_EQ(ix->ranks()[0].comm, (IntervalList{{200, 600}}));
  EXPECT_EQ(ix->ranks()[1].rank, 1);
  EXPECT_EQ(ix->ranks()[1].overlap, (IntervalList{{100, 200}, {250, 300}}));
  EXPECT_EQ(ix->ranks()[1].comm, (IntervalList{{100, 200}, {250, 400}}));
  EXPECT_EQ(ix->ranks()[2].rank, 5);
  EXPECT_TRUE(ix->ranks()[2].overlap.empty());
  EXPECT_TRUE(ix->ranks()[2].comm.empty());
  // The per-rank call gives the same intervals.
  std::vector<ulysses::prof::Interval> compute, comm;
  bool gpu = true;
  ulysses::prof::rank_intervals(*m, 1, 0, 1000, &compute, &comm, &gpu);
  ASSERT_EQ(compute.size(), 1u);
  EXPECT_EQ(std::make_pair(compute[0].start, compute[0].end), std::make_pair(int64_t{0}, int64_t{300}));
  ASSERT_EQ(comm.size(), 2u);
  EXPECT_EQ(std::make_pair(comm[1].start, comm[1].end), std::make_pair(int64_t{250}, int64_t{400}));
  EXPECT_FALSE(gpu);
}

TEST(TimelineDraw, FoldMatchesLinearReference) {
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    auto m = random_nested(seed, 2, 600);
    auto ix = TimelineIndex::build(m);
    std::mt19937_64 rng(seed);
    for (int q = 0; q < 60; ++q) {
      const int64_t a = int64_t(rng() % uint64_t(m->t_max + 1));
      const int64_t b = q % 4 == 0 ? m->t_max + 1 : a + 1 + int64_t(rng() % 200000);
      const int64_t fold = 1 + int64_t(rng() % 2000);
      for (const auto& row : ix->rows()) {
        std::vector<FoldedSpan> got;
        fold_row(*ix, row, a, b, fold, &got);
        const auto want = reference_fold(*ix, row, a, b, fold);
        ASSERT_EQ(got.size(), want.size()) << "seed " << seed << " fold " << fold;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i].first, want[i].first) << i;
          ASSERT_EQ(got[i].count, want[i].count) << i;
          ASSERT_EQ(got[i].end_ns, want[i].end_ns) << i;
        }
      }
    }
  }
}

namespace {
DrawList draw(const TimelineIndex& ix, int64_t t0, double npp, int width) {
  DrawParams p;
  p.vp.t0_ns = t0;
  p.vp.ns_per_px = npp;
  p.vp.width_px = width;
  p.fold_px = 3;
  DrawList dl;
  compute_draw_list(ix, compute_layout(ix), p, &dl);
  return dl;
}
}  // namespace

// Uniform ranges 1 us wide every 2 us on 2 ranks x 2 lanes (4 lanes), 1000 per lane.
TEST(TimelineDraw, UniformRangesAtThreeZooms) {
  UniformOptions o;
  o.ranks = 2;
  o.lanes_per_rank = 2;
  o.n = 1000;
  o.width_ns = 1000;
  o.period_ns = 2000;
  auto ix = TimelineIndex::build(make_uniform_trace(o));
  const int lanes = o.ranks * o.lanes_per_rank;
  const int W = 1000;

  // 50 px per range: every visible range drawn, none folded. Window = 20 us = 10 periods.
  {
    const double npp = double(o.width_ns) / 50;
    const int64_t window = int64_t(npp * W);
    const int64_t per_lane = (window + o.period_ns - 1) / o.period_ns;
    DrawList dl = draw(*ix, 0, npp, W);
    EXPECT_EQ(dl.single_items, per_lane * lanes);
    EXPECT_EQ(dl.folded_items, 0);
    for (const auto& it : dl.items) EXPECT_NEAR(it.w, 50.0f, 0.01f);
  }
  // 1 px per range, gaps of 1 px < fold_px: each lane's visible ranges fold into one item.
  {
    const double npp = double(o.width_ns);
    const int64_t window = int64_t(npp * W);
    const int64_t per_lane = (window + o.period_ns - 1) / o.period_ns;
    DrawList dl = draw(*ix, 0, npp, W);
    EXPECT_EQ(dl.single_items, 0);
    EXPECT_EQ(dl.folded_items, lanes);
    EXPECT_EQ(dl.folded_ranges, per_lane * lanes);
  }
  // Offset window at 50 px per range: partial ranges at both edges are drawn too.
  {
    const double npp = 20;
    const int64_t t0 = 1'000'500;  // mid-range: range 500 covers [1'000'000, 1'001'000)
    DrawList dl = draw(*ix, t0, npp, W);
    const int64_t t1 = t0 + int64_t(npp * W);
    int64_t per_lane = 0;
    for (int64_t i = 0; i < o.n; ++i)
      if (i * o.period_ns + o.width_ns > t0 && i * o.period_ns < t1) ++per_lane;
    EXPECT_EQ(dl.single_items, per_lane * lanes);
    EXPECT_EQ(dl.folded_items, 0);
  }
}

// Bursts of 10 ranges (1 us every 2 us), 100 us apart: at 1 px per range each burst is one
// folded item of 10.
TEST(TimelineDraw, BurstsFoldSeparately) {
  UniformOptions o;
  o.ranks = 1;
  o.lanes_per_rank = 1;
  o.n = 1000;
  o.width_ns = 1000;
  o.period_ns = 2000;
  o.burst = 10;
  o.burst_gap_ns = 100'000;
  auto ix = TimelineIndex::build(make_uniform_trace(o));
  const double npp = 1000;
  const int W = 1000;
  DrawList dl = draw(*ix, 0, npp, W);
  const int64_t burst_period = o.burst * o.period_ns + o.burst_gap_ns;
  const int64_t bursts = (int64_t(npp * W) + burst_period - 1) / burst_period;
  EXPECT_EQ(dl.folded_items, bursts);
  EXPECT_EQ(dl.single_items, 0);
  for (const auto& it : dl.items) EXPECT_EQ(it.count, o.burst);
  // Zoomed out so far that all bursts touch: one item for the lane.
  DrawList all = draw(*ix, 0, 1e6, W);
  EXPECT_EQ(all.folded_items, 1);
  EXPECT_EQ(all.folded_ranges, o.n);
}

TEST(TimelineDraw, FullViewOfLargeTraceIsBoundedByPixels) {
  SyntheticOptions so;
  so.ranks = 2;
  so.steps = 3;
  so.layers = 8;
  auto m = make_synthetic_trace(so);
  auto ix = TimelineIndex::build(m);
  DrawParams p;
  p.vp.width_px = 800;
  p.vp.fit(ix->t_min(), ix->t_max());
  DrawList dl;
  compute_draw_list(*ix, compute_layout(*ix), p, &dl);
  // Every range is either drawn or inside a fold, and no row has more items than pixels/1.
  EXPECT_EQ(dl.single_items + dl.folded_ranges, int64_t(m->ranges.size()));
  EXPECT_LE(int64_t(dl.items.size()), int64_t(ix->rows().size()) * 800);
  EXPECT_GT(dl.folded_items, 0);
  EXPECT_FALSE(dl.shades.empty());  // head chunks overlap a2a with attention
}

TEST(TimelineDraw, HitTestFindsItemUnderCursor) {
  UniformOptions o;
  o.ranks = 1;
  o.lanes_per_rank = 1;
  o.n = 10;
  o.width_ns = 1000;
  o.period_ns = 2000;
  auto ix = TimelineIndex::build(make_uniform_trace(o));
  DrawList dl = draw(*ix, 0, 20, 1000);
  ASSERT_EQ(dl.items.size(), 10u);
  const auto& third = dl.items[2];  // range 2: x = 4000/20 = 200 .. 250
  EXPECT_NEAR(third.x, 200.0f, 0.01f);
  EXPECT_EQ(hit_test(dl, 225, third.y + 2), 2);
  EXPECT_EQ(hit_test(dl, 275, third.y + 2), -1);  // in the gap, > 2 px from both
  EXPECT_EQ(dl.items[size_t(hit_test(dl, 225, third.y + 2))].range, 2);
}

TEST(MaxTree, FirstKeyAtLeastMatchesBruteForce) {
  std::mt19937_64 rng(5);
  for (int64_t n : {0, 1, 15, 16, 17, 255, 256, 257, 5000}) {
    std::vector<int64_t> keys(static_cast<size_t>(n));
    for (auto& k : keys) k = int64_t(rng() % 1000);
    MaxTree t;
    auto key = [&](int64_t i) { return keys[size_t(i)]; };
    t.build(n, key);
    for (int q = 0; q < 300; ++q) {
      const int64_t j = n ? int64_t(rng() % uint64_t(n + 2)) : 0;
      const int64_t x = int64_t(rng() % 1100);
      int64_t want = n;
      for (int64_t i = std::max<int64_t>(0, j); i < n; ++i)
        if (keys[size_t(i)] >= x) {
          want = i;
          break;
        }
      ASSERT_EQ(t.find_first(j, x, key), want) << "n " << n << " j " << j << " x " << x;
    }
  }
}

TEST(TimelineDraw, CollectiveFlowJoinsOneCollectiveAcrossRanks) {
  namespace prof = ulysses::prof;
  SyntheticOptions so;
  so.ranks = 4;
  so.steps = 2;
  so.layers = 2;
  so.head_chunks = 2;
  auto m = make_synthetic_trace(so);
  auto ix = TimelineIndex::build(m);
  const TimelineLayout layout = compute_layout(*ix);
  TimelineViewport vp;
  vp.width_px = 1000;
  vp.fit(ix->t_min(), ix->t_max());
  // Rank 0's third all-to-all on its comm lane: the brute-force answer is every rank's
  // comm-lane range with the same (pg, seq), ordered by start.
  int64_t sel = -1;
  int seen = 0;
  for (const auto& l : m->lanes) {
    if (l.rank != 0 || l.kind != prof::LaneKind::Comm) continue;
    for (int64_t k = l.first; k < l.first + l.count && sel < 0; ++k)
      if (m->extra(m->ranges[size_t(k)]).pg >= 0 && ++seen == 3) sel = k;
  }
  ASSERT_GE(sel, 0);
  const auto& s = m->extra(m->ranges[size_t(sel)]);
  std::vector<std::pair<int64_t, int32_t>> expect;
  for (const auto& l : m->lanes)
    if (l.kind == prof::LaneKind::Comm)
      for (int64_t k = l.first; k < l.first + l.count; ++k)
        if (m->extra(m->ranges[size_t(k)]).pg == s.pg && m->extra(m->ranges[size_t(k)]).seq == s.seq)
          expect.push_back({m->ranges[size_t(k)].start_ns, l.rank});
  std::sort(expect.begin(), expect.end());
  ASSERT_EQ(expect.size(), 4u);
  const auto flow = collective_flow(*ix, layout, vp, 0, sel);
  ASSERT_EQ(flow.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(flow[i].rank, expect[i].second);
    EXPECT_EQ(flow[i].arrive_ns, expect[i].first);
    EXPECT_FLOAT_EQ(flow[i].x, float(vp.x_of(expect[i].first)));
    const LaneLayout& ll = layout.lanes[size_t(m->ranges[size_t(flow[i].range)].lane)];
    EXPECT_GE(flow[i].y, ll.y);
    EXPECT_LE(flow[i].y, ll.y + ll.h);
  }
  // Not a collective: no flow.
  int64_t plain = -1;
  for (size_t k = 0; k < m->ranges.size() && plain < 0; ++k)
    if (m->extra(m->ranges[k]).pg < 0) plain = int64_t(k);
  EXPECT_TRUE(collective_flow(*ix, layout, vp, 0, plain).empty());
}

// ---- rank pin / collapse / hide ------------------------------------------------------------
namespace {
// 3 ranks x 2 lanes x 10 ranges of 1 us every 2 us; at 20 ns/px every range is 50 px (no folds).
std::shared_ptr<TimelineIndex> three_ranks() {
  UniformOptions o;
  o.ranks = 3;
  o.lanes_per_rank = 2;
  o.n = 10;
  return TimelineIndex::build(make_uniform_trace(o));
}
DrawParams whole(const TimelineIndex& ix) {
  DrawParams p;
  p.vp.width_px = 1000;
  p.vp.t0_ns = ix.t_min();
  p.vp.ns_per_px = 20;
  p.shade_overlap = false;
  return p;
}
int32_t rank_of(const TimelineIndex& ix, const DrawItem& it) { return ix.model().ranges[size_t(it.range)].rank; }
// A 4-rank synthetic trace of one step, 2 layers, head chunks 2 (collectives with ids).
std::shared_ptr<ulysses::prof::TraceModel> four_rank_trace() {
  SyntheticOptions so;
  so.ranks = 4;
  so.steps = 1;
  so.layers = 2;
  so.head_chunks = 2;
  return make_synthetic_trace(so);
}
// The first range on rank 0's comm lane that carries a collective identity (-1: none).
int64_t first_rank0_collective(const ulysses::prof::TraceModel& m) {
  for (const auto& l : m.lanes) {
    if (l.rank != 0 || l.kind != ulysses::prof::LaneKind::Comm) continue;
    for (int64_t k = l.first; k < l.first + l.count; ++k)
      if (m.extra(m.ranges[size_t(k)]).pg >= 0) return k;
  }
  return -1;
}
}  // namespace

TEST(TimelineRanks, HiddenRankLeavesTheLayoutAndTheNextRankTakesItsPlace) {
  auto ix = three_ranks();
  const TimelineLayout base = compute_layout(*ix);
  ASSERT_EQ(base.ranks.size(), 3u);
  const TimelineLayout L = compute_layout(*ix, {}, {0, kRankHidden, 0});
  ASSERT_EQ(L.ranks.size(), 2u);
  EXPECT_EQ(L.ranks[0].rank, 0);
  EXPECT_EQ(L.ranks[1].rank, 2);
  EXPECT_EQ(L.hidden_ranks, 1);
  EXPECT_EQ(L.find_rank(1), nullptr);
  EXPECT_FLOAT_EQ(L.ranks[1].y, base.ranks[1].y);
  EXPECT_FLOAT_EQ(L.total_h, base.total_h - base.ranks[1].h - base.opt.rank_gap);
  for (int32_t li : ix->ranks()[1].lanes) EXPECT_TRUE(L.lanes[size_t(li)].hidden);
  // Where rank 1's first lane was, rank 2's first lane is now.
  const float old_y = base.lanes[size_t(ix->ranks()[1].lanes[0])].y + base.opt.row_h / 2;
  EXPECT_EQ(L.row_at(*ix, old_y).first, ix->ranks()[2].lanes[0]);
  DrawList dl;
  compute_draw_list(*ix, L, whole(*ix), &dl);
  EXPECT_EQ(dl.items.size(), 40u);  // 2 shown ranks x 2 lanes x 10
  for (const auto& it : dl.items) EXPECT_NE(rank_of(*ix, it), 1);
  const int64_t hit = hit_test(dl, 25, old_y);  // x 25: inside the first range (0..50 px)
  ASSERT_GE(hit, 0);
  EXPECT_EQ(rank_of(*ix, dl.items[size_t(hit)]), 2);
  // The unfiltered layout has rank 1 there.
  compute_draw_list(*ix, base, whole(*ix), &dl);
  EXPECT_EQ(dl.items.size(), 60u);
  EXPECT_EQ(rank_of(*ix, dl.items[size_t(hit_test(dl, 25, old_y))]), 1);
}

TEST(TimelineRanks, PinnedRankStaysAtTheTopWhileTheRestScrolls) {
  auto ix = three_ranks();
  const TimelineLayout L = compute_layout(*ix, {}, {0, 0, kRankPinned});
  ASSERT_EQ(L.ranks.size(), 3u);
  EXPECT_EQ(L.ranks[0].rank, 2);
  EXPECT_TRUE(L.ranks[0].pinned);
  EXPECT_FLOAT_EQ(L.ranks[0].y, 0);
  EXPECT_FLOAT_EQ(L.pinned_h, L.ranks[0].h + L.opt.rank_gap);
  EXPECT_EQ(L.ranks[1].rank, 0);
  EXPECT_FLOAT_EQ(L.ranks[1].y, L.pinned_h);
  for (float scroll : {0.0f, 30.0f, 75.0f}) {
    DrawParams p = whole(*ix);
    p.y_scroll = scroll;
    p.height = 200;
    DrawList dl;
    compute_draw_list(*ix, L, p, &dl);
    int pinned_items = 0, rank0_items = 0;
    for (const auto& it : dl.items) {
      rank0_items += rank_of(*ix, it) == 0;
      const auto& r = ix->model().ranges[size_t(it.range)];
      const LaneLayout& ll = L.lanes[size_t(r.lane)];
      if (r.rank == 2) {
        ++pinned_items;
        EXPECT_FLOAT_EQ(it.y, ll.y + 1) << "scroll " << scroll;  // not scrolled
      } else {
        // scrolled, and cut off under the pinned band
        EXPECT_FLOAT_EQ(it.y, std::max(ll.y + 1 - scroll, L.pinned_h)) << "scroll " << scroll;
        EXPECT_FLOAT_EQ(it.y + it.h, std::min(ll.y + L.opt.row_h - 1 - scroll, 200.0f)) << "scroll " << scroll;
      }
    }
    EXPECT_EQ(pinned_items, 20) << "scroll " << scroll;
    // Band 0..70 (rank 2: header 20 + 2 x (18 + 3) + gap 8); rank 0's lanes at layout 90 and
    // 111: by 75 both are under the band (screen 15 and 36), so none of its items shows.
    EXPECT_EQ(rank0_items, scroll < 75 ? 20 : 0) << "scroll " << scroll;
    // A point in the band hits the pinned rank whatever the scroll.
    const int64_t hit = hit_test(dl, 25, L.lanes[size_t(ix->ranks()[2].lanes[1])].y + 5);
    ASSERT_GE(hit, 0);
    EXPECT_EQ(rank_of(*ix, dl.items[size_t(hit)]), 2);
    EXPECT_FLOAT_EQ(L.screen_y(L.layout_y(150, scroll), scroll), 150);
  }
}

TEST(TimelineRanks, CollapsedRankIsOneSummaryRowOfItsRanges) {
  auto ix = three_ranks();
  const TimelineLayout base = compute_layout(*ix);
  const TimelineLayout L = compute_layout(*ix, {}, {0, kRankCollapsed, 0});
  const RankLayout* r1 = L.find_rank(1);
  ASSERT_NE(r1, nullptr);
  EXPECT_TRUE(r1->collapsed);
  EXPECT_FLOAT_EQ(r1->h, L.opt.rank_header_h + L.opt.row_h + L.opt.lane_gap);
  // rank 2 moves up by what rank 1 lost: 2 lanes of one row -> one row
  EXPECT_FLOAT_EQ(L.find_rank(2)->y, base.find_rank(2)->y - (base.find_rank(1)->h - r1->h));
  for (int32_t li : ix->ranks()[1].lanes) {
    EXPECT_TRUE(L.lanes[size_t(li)].collapsed);
    EXPECT_FLOAT_EQ(L.lanes[size_t(li)].y, r1->lanes_y);
  }
  EXPECT_EQ(L.row_at(*ix, r1->lanes_y + 2).first, -1);  // no lane rows there
  DrawList dl;
  compute_draw_list(*ix, L, whole(*ix), &dl);
  int summary = 0;
  for (const auto& it : dl.items) {
    if (rank_of(*ix, it) != 1) {
      EXPECT_FALSE(it.flags & kSummary);
      continue;
    }
    ++summary;
    EXPECT_TRUE(it.flags & kSummary);
    EXPECT_FLOAT_EQ(it.y, r1->lanes_y + 1);
  }
  EXPECT_EQ(summary, 20);  // both lanes' 10 ranges, merged into the one row
  EXPECT_EQ(dl.items.size(), 60u);
  const int64_t hit = hit_test(dl, 125, r1->lanes_y + L.opt.row_h / 2);  // x 125: the 2nd range (100..150)
  ASSERT_GE(hit, 0);
  EXPECT_EQ(rank_of(*ix, dl.items[size_t(hit)]), 1);
  EXPECT_EQ(ix->model().ranges[size_t(dl.items[size_t(hit)].range)].start_ns, ix->t_min() + 2000);
}

TEST(TimelineRanks, FlowSkipsHiddenRanksAndLandsOnSummaryAndPinnedRows) {
  namespace prof = ulysses::prof;
  auto m = four_rank_trace();
  auto ix = TimelineIndex::build(m);
  const int64_t sel = first_rank0_collective(*m);
  ASSERT_GE(sel, 0);
  TimelineViewport vp;
  vp.width_px = 1000;
  vp.fit(ix->t_min(), ix->t_max());
  // rank 1 hidden, rank 2 collapsed, rank 3 pinned; scrolled by 40
  const TimelineLayout L = compute_layout(*ix, {}, {0, kRankHidden, kRankCollapsed, kRankPinned});
  const float scroll = 40;
  const auto flow = collective_flow(*ix, L, vp, scroll, sel);
  ASSERT_EQ(flow.size(), 3u);
  std::set<int32_t> ranks;
  for (const auto& fp : flow) {
    ranks.insert(fp.rank);
    const RankLayout* rl = L.find_rank(fp.rank);
    ASSERT_NE(rl, nullptr);
    if (fp.rank == 2) {
      EXPECT_FLOAT_EQ(fp.y, rl->lanes_y + L.opt.row_h / 2 - scroll);
    }
    if (fp.rank == 3) {  // pinned: not scrolled
      EXPECT_GE(fp.y, rl->lanes_y);
      EXPECT_LT(fp.y, rl->y + rl->h);
    }
    if (fp.rank == 0) {
      EXPECT_GE(fp.y, rl->lanes_y - scroll);
      EXPECT_LT(fp.y, rl->y + rl->h - scroll);
    }
  }
  EXPECT_EQ(ranks, (std::set<int32_t>{0, 2, 3}));
}

// The arrows' label is over every rank of the instance: a hidden last arriver is named (not
// the last visible one), a tie goes to the lowest rank (as the Stragglers table), an instance
// a member rank lacks is said, and a rank id of 2e9 is no 16 GB vector (bad_alloc at each
// repaint). The brute-force answer comes from the model's own ranges.
TEST(TimelineRanks, FlowLabelCoversHiddenRanksTiesAndIncompleteInstances) {
  namespace prof = ulysses::prof;
  auto m = four_rank_trace();
  auto ix = TimelineIndex::build(m);
  const int64_t sel = first_rank0_collective(*m);
  ASSERT_GE(sel, 0);
  const auto inst = collective_instance(*ix, sel);
  ASSERT_EQ(inst.ranges.size(), 4u);
  EXPECT_EQ(inst.group_ranks, 4);
  TimelineViewport vp;
  vp.width_px = 1000;
  vp.fit(ix->t_min(), ix->t_max());
  // Brute force: the last arriver and the skew over the four ranges.
  auto truth = [&](int32_t* rank, int64_t* skew) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    *rank = -1;
    for (int64_t k : inst.ranges) {
      const auto& r = m->ranges[size_t(k)];
      lo = std::min(lo, r.start_ns);
      if (r.start_ns > hi || (r.start_ns == hi && r.rank < *rank)) {
        hi = r.start_ns;
        *rank = r.rank;
      }
    }
    *skew = hi - lo;
  };
  int32_t last = -1;
  int64_t skew = 0;
  truth(&last, &skew);
  // Hide the last arriver: the label still names it, and says it is hidden.
  std::vector<uint8_t> flags(4, 0);
  flags[size_t(last)] = kRankHidden;
  FlowSummary sum;
  const auto flow = collective_flow(*ix, compute_layout(*ix, {}, flags), vp, 0, inst, &sum);
  EXPECT_EQ(flow.size(), 3u);
  EXPECT_EQ(sum.last_rank, last);
  EXPECT_TRUE(sum.last_hidden);
  EXPECT_EQ(sum.skew_ns, skew);
  EXPECT_EQ(sum.ranks, 4);
  // A tie for the last arrival: the lowest rank of the tie is the last arriver.
  int32_t other = last == 3 ? 2 : 3;
  for (int64_t k : inst.ranges)
    if (m->ranges[size_t(k)].rank == other)
      m->ranges.row(size_t(k)).start_ns = m->ranges[size_t(inst.ranges[size_t(last)])].start_ns;
  truth(&last, &skew);
  collective_flow(*ix, compute_layout(*ix), vp, 0, inst, &sum);
  EXPECT_EQ(sum.last_rank, std::min(last, other));
  EXPECT_EQ(sum.last_rank, last);
  const auto tied = collective_flow(*ix, compute_layout(*ix), vp, 0, inst, &sum);
  EXPECT_EQ(tied.back().rank, last);
  // A member rank without the instance: incomplete, 3 of 4.
  for (int64_t k : inst.ranges)
    if (m->ranges[size_t(k)].rank == 1) m->ranges.extras()[size_t(m->ranges[size_t(k)].extra)].seq += 1000000;
  const auto part = collective_instance(*ix, sel);
  EXPECT_EQ(part.ranges.size(), 3u);
  EXPECT_EQ(part.group_ranks, 4);
  // A rank id of 2e9.
  for (auto& r : m->ranges.rows())
    if (r.rank == 2) r.rank = 2000000000;
  const auto huge = collective_instance(*ix, sel);
  EXPECT_EQ(huge.ranges.size(), 3u);
}

// "All arrows": every collective whose ranges are drawn gets its arrows; brute force over the
// draw list: per (pg, seq) the ranks among the single, non-kernel, non-head-copy items.
TEST(TimelineRanks, FlowsInViewJoinEveryDrawnCollective) {
  namespace prof = ulysses::prof;
  auto m = four_rank_trace();
  auto ix = TimelineIndex::build(m);
  const TimelineLayout layout = compute_layout(*ix);
  DrawParams p;
  p.vp.width_px = 4000;
  p.vp.fit(ix->t_min(), ix->t_max());
  p.fold_px = 0;
  DrawList dl;
  compute_draw_list(*ix, layout, p, &dl);
  std::map<std::pair<int32_t, int32_t>, std::set<int32_t>> want;
  for (const auto& it : dl.items) {
    if (it.count != 1 || it.range < 0) continue;
    const auto& r = m->ranges[size_t(it.range)];
    if (r.is_kernel || m->lanes[size_t(r.lane)].kind == prof::LaneKind::HeadRange) continue;
    const auto& x = m->extra(r);
    if (x.pg >= 0 && x.seq >= 0) want[{x.pg, x.seq}].insert(r.rank);
  }
  size_t groups = 0;
  for (const auto& [id, ranks] : want) groups += ranks.size() >= 2;
  ASSERT_GT(groups, 4u);
  const auto got = flows_in_view(*ix, dl);
  ASSERT_EQ(got.size(), groups);
  for (const auto& g : got) {
    const auto& x = m->extra(m->ranges[size_t(g.front().range)]);
    std::set<int32_t> ranks;
    for (const auto& fp : g) {
      ranks.insert(fp.rank);
      EXPECT_EQ(m->extra(m->ranges[size_t(fp.range)]).seq, x.seq);
    }
    EXPECT_EQ(ranks, (want[{x.pg, x.seq}]));
    for (size_t i = 1; i < g.size(); ++i) EXPECT_LE(g[i - 1].arrive_ns, g[i].arrive_ns);
  }
  EXPECT_EQ(flows_in_view(*ix, dl, 3).size(), 3u);
}

TEST(TimelineRanks, CollapsedRankShowsPhasesUnderItsSteps) {
  namespace prof = ulysses::prof;
  // CPU run (no kernels): the main lane's top level is one step range per step; the phases
  // are at depth 1. The summary row must draw them, not only the step bars and the comm lane.
  SyntheticOptions so;
  so.ranks = 2;
  so.steps = 1;
  so.layers = 2;
  so.head_chunks = 2;
  so.gpu = false;
  auto m = make_synthetic_trace(so);
  auto ix = TimelineIndex::build(m);
  const TimelineLayout L = compute_layout(*ix, {}, {kRankCollapsed, 0});
  DrawParams p;
  p.vp.width_px = 4000;
  p.vp.fit(ix->t_min(), ix->t_max());
  DrawList dl;
  compute_draw_list(*ix, L, p, &dl);
  std::set<prof::Phase> host_phases;
  bool step = false;
  for (const auto& it : dl.items) {
    const auto& r = m->ranges[size_t(it.range)];
    if (r.rank != 0 || it.count != 1) continue;
    EXPECT_TRUE(it.flags & kSummary);
    if (m->lanes[size_t(r.lane)].kind == prof::LaneKind::Comm) continue;
    step = step || r.phase == prof::Phase::Step;
    host_phases.insert(r.phase);
  }
  EXPECT_TRUE(step);
  EXPECT_TRUE(host_phases.count(prof::Phase::Attention)) << "phases drawn: " << host_phases.size();
  EXPECT_TRUE(host_phases.count(prof::Phase::Mlp));
}

// One range far off the rest (a CLOCK_REALTIME stamp among monotonic ones): at "fit all" every
// range is still drawn, the bulk as folds at the left and the far one at the right edge.
TEST(TimelineDraw, FitAllDrawsTheBulkAndAFarOffRange) {
  SyntheticOptions so;
  so.ranks = 1;
  so.steps = 2;
  so.layers = 2;
  auto m = make_synthetic_trace(so);
  const int64_t far = 1'764'682'000'000'000'000;
  {  // move the last range of lane 0 far away, keeping the lane sorted
    auto& lane = m->lanes[0];
    TraceRange& r = m->ranges.row(size_t(lane.first + lane.count - 1));
    r.parent = -1;
    r.depth = 0;
    r.start_ns = far;
    r.end_ns = far + 1'000'000;
    m->t_max = r.end_ns;
  }
  auto ix = TimelineIndex::build(m);
  ASSERT_EQ(ix->t_max(), far + 1'000'000);
  DrawParams p;
  p.vp.width_px = 1300;
  p.vp.fit(ix->t_min(), ix->t_max(), 0.01);
  DrawList dl;
  compute_draw_list(*ix, compute_layout(*ix), p, &dl);
  EXPECT_EQ(dl.single_items + dl.folded_ranges, int64_t(m->ranges.size()));
  float left = 1e9f, right = -1e9f;
  for (const auto& it : dl.items) {
    left = std::min(left, it.x);
    right = std::max(right, it.x + it.w);
  }
  EXPECT_LT(left, 20.0f);
  EXPECT_GT(right, 1270.0f);
}
