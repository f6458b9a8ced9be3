// Lane builder of the trace loader (profiler/load/src/lane_builder.cpp), tested on hand-made
// sources without any file: sub-lanes where ranges of one source overlap without nesting,
// parents and depths against a brute-force search, lane order per rank, head-range copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "ulysses/profiler/trace_loading.hpp"

namespace prof = ulysses::prof;
namespace detail = ulysses::prof::detail;

namespace {

void add(detail::Builder& b, int32_t src, int64_t s, int64_t e, const std::string& name = "r") {
  prof::TraceRange r;
  r.start_ns = s;
  r.end_ns = e;
  r.lane = src;
  r.rank = b.sources[static_cast<size_t>(src)].rank;
  r.name_id = b.intern(name);
  b.m.ranges.push_back(r);
}

// Every final lane: ranges sorted by start, any two either disjoint or nested, and each
// range's parent is the innermost range of its lane that contains it (brute force).
void expect_lanes_nest(const prof::TraceModel& m) {
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const auto& l = m.lanes[li];
    for (int64_t i = l.first; i < l.first + l.count; ++i) {
      const auto& a = m.ranges[static_cast<size_t>(i)];
      EXPECT_EQ(a.lane, static_cast<int32_t>(li));
      if (i > l.first) {
        EXPECT_LE(m.ranges[static_cast<size_t>(i - 1)].start_ns, a.start_ns);
      }
      int32_t want_parent = -1;
      int depth = 0;
      for (int64_t j = l.first; j < l.first + l.count; ++j) {
        if (j == i) continue;
        const auto& c = m.ranges[static_cast<size_t>(j)];
        const bool disjoint = c.end_ns <= a.start_ns || a.end_ns <= c.start_ns;
        const bool c_holds_a = c.start_ns <= a.start_ns && a.end_ns <= c.end_ns;
        const bool a_holds_c = a.start_ns <= c.start_ns && c.end_ns <= a.end_ns;
        ASSERT_TRUE(disjoint || c_holds_a || a_holds_c) << "lane " << l.name << " ranges " << i << " and " << j;
        // c encloses a when it holds a and comes first in the lane's order (equal spans: index).
        if (!disjoint && c_holds_a && (c.start_ns < a.start_ns || c.end_ns > a.end_ns || j < i)) {
          ++depth;
          if (want_parent < 0 || m.ranges[static_cast<size_t>(want_parent)].start_ns <= c.start_ns)
            want_parent = static_cast<int32_t>(j);
        }
      }
      EXPECT_EQ(a.parent, want_parent) << "range " << i << " of lane " << l.name;
      EXPECT_EQ(a.depth, depth) << "range " << i << " of lane " << l.name;
    }
  }
}

}  // namespace

TEST(LaneBuilder, NestedRangesStayOnOneLaneWithParentsAndDepths) {
  detail::Builder b;
  int32_t s = b.source(0, prof::LaneKind::HostThread, 7, "main", 0);
  add(b, s, 100, 200, "inner2");
  add(b, s, 0, 1000, "outer");
  add(b, s, 10, 500, "mid");
  add(b, s, 20, 30, "leaf");
  detail::build_lanes(b);
  ASSERT_EQ(b.m.lanes.size(), 1u);
  const auto& r = b.m.ranges;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(b.m.strings[r[0].name_id], "outer");
  EXPECT_EQ(b.m.strings[r[1].name_id], "mid");
  EXPECT_EQ(b.m.strings[r[2].name_id], "leaf");
  EXPECT_EQ(b.m.strings[r[3].name_id], "inner2");
  EXPECT_EQ(r[0].parent, -1);
  EXPECT_EQ(r[1].parent, 0);
  EXPECT_EQ(r[2].parent, 1);
  EXPECT_EQ(r[3].parent, 1);
  EXPECT_EQ(r[2].depth, 2);
  expect_lanes_nest(b.m);
}

TEST(LaneBuilder, OverlappingRangesOfOneSourceSplitIntoSubLanes) {
  detail::Builder b;
  int32_t s = b.source(0, prof::LaneKind::Comm, 0xFFFFFE, "comm", 2);
  add(b, s, 0, 100);    // chunk 0
  add(b, s, 50, 150);   // chunk 1 overlaps chunk 0 without nesting
  add(b, s, 120, 130);  // after chunk 0 ends: back on the first lane (lowest that fits)
  add(b, s, 140, 200);  // overlaps chunk 1 only: first lane again
  detail::build_lanes(b);
  ASSERT_EQ(b.m.lanes.size(), 2u);
  EXPECT_EQ(b.m.lanes[0].name, "comm");
  EXPECT_EQ(b.m.lanes[1].name, "comm #2");
  EXPECT_EQ(b.m.lanes[0].count + b.m.lanes[1].count, 4);
  EXPECT_EQ(b.m.lanes[0].count, 3);  // [0,100), [120,130), [140,200)
  EXPECT_EQ(b.m.ranges[static_cast<size_t>(b.m.lanes[1].first)].start_ns, 50);
  EXPECT_EQ(b.m.lanes[1].kind, prof::LaneKind::Comm);
  expect_lanes_nest(b.m);
}

TEST(LaneBuilder, LanesAreGroupedByRankThenOrderThenId) {
  detail::Builder b;
  int32_t k1 = b.source(1, prof::LaneKind::CudaStream, 7, "stream 7", 3);
  int32_t c1 = b.source(1, prof::LaneKind::Comm, 5, "comm", 2);
  int32_t m0 = b.source(0, prof::LaneKind::HostThread, 9, "main", 0);
  int32_t w0 = b.source(0, prof::LaneKind::HostThread, 3, "worker", 1);
  int32_t m1 = b.source(1, prof::LaneKind::HostThread, 4, "main", 0);
  for (int32_t s : {k1, c1, m0, w0, m1}) add(b, s, 0, 10);
  detail::build_lanes(b);
  std::vector<std::tuple<int32_t, std::string>> got;
  for (const auto& l : b.m.lanes) got.emplace_back(l.rank, l.name);
  std::vector<std::tuple<int32_t, std::string>> want = {
      {0, "main"}, {0, "worker"}, {1, "main"}, {1, "comm"}, {1, "stream 7"}};
  EXPECT_EQ(got, want);
  for (const auto& l : b.m.lanes) EXPECT_EQ(b.m.ranges[static_cast<size_t>(l.first)].rank, l.rank);
}

TEST(LaneBuilder, RandomRangesAlwaysNestAndNoneIsLost) {
  std::mt19937 rng(17);
  for (int round = 0; round < 20; ++round) {
    detail::Builder b;
    int32_t s0 = b.source(0, prof::LaneKind::HostThread, 1, "main", 0);
    int32_t s1 = b.source(1, prof::LaneKind::Comm, 2, "comm", 2);
    std::vector<std::pair<int64_t, int64_t>> in;
    for (int i = 0; i < 60; ++i) {
      int64_t a = rng() % 1000, len = 1 + rng() % 200;
      add(b, (i % 3) ? s0 : s1, a, a + len);
      in.emplace_back(a, a + len);
    }
    detail::build_lanes(b);
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto& r : b.m.ranges) out.emplace_back(r.start_ns, r.end_ns);
    std::sort(in.begin(), in.end());
    std::sort(out.begin(), out.end());
    EXPECT_EQ(in, out);
    int64_t covered = 0;
    for (const auto& l : b.m.lanes) covered += l.count;
    EXPECT_EQ(covered, 60);
    expect_lanes_nest(b.m);
  }
}

TEST(LaneBuilder, HeadLanesCopyRangesThatCarryHeadsAndPointBack) {
  detail::Builder b;
  int32_t s = b.source(0, prof::LaneKind::HostThread, 1, "main", 0);
  add(b, s, 0, 100, "attention");
  add(b, s, 200, 300, "attention");
  add(b, s, 400, 500, "mlp");
  b.m.ranges.row(0).head_begin = 0;
  b.m.ranges.row(0).head_end = 4;
  b.m.ranges.row(1).head_begin = 4;
  b.m.ranges.row(1).head_end = 8;
  detail::build_lanes(b);
  detail::add_head_lanes(b.m);
  ASSERT_EQ(b.m.lanes.size(), 3u);
  EXPECT_EQ(b.m.lanes[1].name, "heads 0-3");
  EXPECT_EQ(b.m.lanes[2].name, "heads 4-7");
  EXPECT_EQ(b.m.lanes[1].kind, prof::LaneKind::HeadRange);
  ASSERT_EQ(b.m.ranges.size(), 5u);
  const auto& copy = b.m.ranges[static_cast<size_t>(b.m.lanes[2].first)];
  ASSERT_GE(copy.origin, 0);
  const auto& orig = b.m.ranges[static_cast<size_t>(copy.origin)];
  EXPECT_EQ(orig.start_ns, 200);
  EXPECT_EQ(orig.lane, 0);
  EXPECT_EQ(copy.start_ns, 200);
}

// Kernel -> launcher links (TraceRange::origin) against a brute-force search over the host
// ranges in lane order: the first host range of the kernel's rank with its external id; for
// a kernel whose id no host range carries, the first id-less host range of its rank with the
// same step, phase, direction, layer, heads and chunk; else none. Random ids with repeats and
// misses, on 1 and 3 threads, with lanes grouped by rank and with one rank's lanes split.
TEST(LaneBuilder, KernelsLinkToTheFirstHostRangeWithTheirIdOrTheirInfo) {
  std::mt19937_64 rng(5);
  auto pick = [&](int n) { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n)); };
  prof::TraceModel m;
  for (int32_t rank : {0, 1, 2, 0}) {  // rank 0 comes twice: its lanes are not grouped
    for (prof::LaneKind kind :
         {prof::LaneKind::HostThread, prof::LaneKind::Comm, prof::LaneKind::CudaStream, prof::LaneKind::HeadRange}) {
      prof::Lane l;
      l.rank = rank;
      l.kind = kind;
      l.first = static_cast<int64_t>(m.ranges.size());
      for (int i = 0; i < 700; ++i) {
        prof::TraceRange r;
        r.rank = rank;
        r.lane = static_cast<int32_t>(m.lanes.size());
        r.start_ns = i;
        r.end_ns = i + 1;
        r.is_kernel = kind == prof::LaneKind::CudaStream;
        const int64_t ext = pick(3) == 0 ? 0 : 1 + pick(400);
        if (ext != 0) m.extra_for(r).external_id = ext;
        r.step = pick(2), r.layer = static_cast<int16_t>(pick(3)), r.chunk = static_cast<int16_t>(pick(2) - 1);
        r.phase = static_cast<prof::Phase>(pick(3));
        r.dir = static_cast<prof::Direction>(pick(2));
        r.head_begin = static_cast<int16_t>(pick(2) * 4), r.head_end = static_cast<int16_t>(r.head_begin + 4);
        m.ranges.push_back(r);
      }
      l.count = static_cast<int64_t>(m.ranges.size()) - l.first;
      m.lanes.push_back(l);
    }
  }
  auto info = [](const prof::TraceRange& r) {
    return std::make_tuple(r.step, r.phase, r.dir, r.layer, r.head_begin, r.head_end, r.chunk);
  };
  struct Want {
    std::vector<int32_t> origin;
    size_t by_id = 0, by_info = 0;
  };
  auto brute_force = [&](const prof::TraceModel& t) {
    Want w;
    w.origin.assign(t.ranges.size(), -1);
    for (size_t k = 0; k < t.ranges.size(); ++k) {
      const prof::TraceRange& kr = t.ranges[k];
      const int64_t kid = t.extra(kr).external_id;
      if (!kr.is_kernel || kid == 0) continue;
      int32_t id_hit = -1, info_hit = -1;
      for (const prof::Lane& l : t.lanes) {
        if (l.kind == prof::LaneKind::HeadRange || l.kind == prof::LaneKind::CudaStream) continue;
        for (int64_t i = l.first; i < l.first + l.count; ++i) {
          const prof::TraceRange& h = t.ranges[static_cast<size_t>(i)];
          if (h.rank != kr.rank) continue;
          const int64_t hid = t.extra(h).external_id;
          if (id_hit < 0 && hid == kid) id_hit = static_cast<int32_t>(i);
          if (info_hit < 0 && hid == 0 && info(h) == info(kr)) info_hit = static_cast<int32_t>(i);
        }
      }
      w.origin[k] = id_hit >= 0 ? id_hit : info_hit;
      w.by_id += id_hit >= 0;
      w.by_info += id_hit < 0 && info_hit >= 0;
    }
    return w;
  };
  // The same ranges with the last group's rank renamed to 3: lanes grouped by rank.
  prof::TraceModel grouped = m;
  for (size_t l = 12; l < grouped.lanes.size(); ++l) {
    grouped.lanes[l].rank = 3;
    for (int64_t i = grouped.lanes[l].first; i < grouped.lanes[l].first + grouped.lanes[l].count; ++i)
      grouped.ranges.row(static_cast<size_t>(i)).rank = 3;
  }
  // And a range of rank 1 on rank 0's host lane (no reader makes one), the first in lane order
  // with the id of one of rank 1's kernels.
  prof::TraceModel stray = grouped;
  for (int64_t i = stray.lanes[6].first;; ++i) {
    ASSERT_EQ(stray.lanes[6].kind, prof::LaneKind::CudaStream);
    const int64_t kid = stray.extra(stray.ranges[static_cast<size_t>(i)]).external_id;
    if (kid == 0) continue;
    stray.ranges.row(static_cast<size_t>(stray.lanes[0].first)).rank = 1;
    stray.extra_for(stray.ranges.row(static_cast<size_t>(stray.lanes[0].first))).external_id = kid;
    break;
  }
  for (const prof::TraceModel* t : {&m, &grouped, &stray}) {
    SCOPED_TRACE(t == &m ? "rank 0's lanes in two groups" : t == &grouped ? "lanes grouped by rank" : "a stray range");
    const Want want = brute_force(*t);
    EXPECT_GT(want.by_id, 500u);
    EXPECT_GT(want.by_info, 20u);
    EXPECT_GT(std::count(want.origin.begin(), want.origin.end(), -1), 1000);  // host, id-less kernels, misses
    for (int threads : {1, 3}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      prof::TraceModel got = *t;
      detail::link_kernels_to_launchers(got, threads);
      for (size_t k = 0; k < got.ranges.size(); ++k) ASSERT_EQ(got.ranges[k].origin, want.origin[k]) << "range " << k;
    }
  }
}
