// The trace overview (profiler/trace_overview.hpp): the reduction on a hand-built lane with
// hand-computed merged ranges; on a synthetic engine-shaped trace every range lies inside an
// overview range of its lane and depth (depths recomputed here from the times), counts add up
// and the overview is much smaller; the encoding round-trips and refuses garbage; the cache
// beside a run is written once settled, read back equal, and ignored when an input changes,
// when corrupt and when disabled.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "testdata/rank_files.hpp"
#include "testdata/synthetic_trace.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

prof::TraceRange rng(int64_t s, int64_t e, int32_t name) {
  prof::TraceRange r;
  r.start_ns = s;
  r.end_ns = e;
  r.name_id = name;
  return r;
}

// (start, end, depth, count) of each overview range of lane 0.
std::vector<std::tuple<int64_t, int64_t, int, int64_t>> rows_of(const prof::TraceOverview& o) {
  std::vector<std::tuple<int64_t, int64_t, int, int64_t>> v;
  const auto& l = o.model.lanes.at(0);
  for (int64_t k = l.first; k < l.first + l.count; ++k) {
    const auto& r = o.model.ranges[size_t(k)];
    v.emplace_back(r.start_ns, r.end_ns, int(r.depth), o.counts[size_t(k)]);
  }
  return v;
}

// Depth of each range of a lane from the times alone (independent of the overview's code).
std::vector<int> depths(const prof::TraceModel& m, const prof::Lane& l) {
  std::vector<int> d;
  std::vector<int64_t> ends;
  for (int64_t i = l.first; i < l.first + l.count; ++i) {
    const auto& r = m.ranges[size_t(i)];
    while (!ends.empty() && ends.back() <= r.start_ns) ends.pop_back();
    d.push_back(int(ends.size()));
    ends.push_back(r.end_ns);
  }
  return d;
}

void set_old(const std::string& f) {
  const struct timespec ts[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), ts, 0), 0) << f;
}

}  // namespace

TEST(TraceOverview, MergesNarrowSiblingsAndTheirDescendantsAsComputedByHand) {
  // t in [0, 8000], resolution 1000: q = 8 ns.
  prof::TraceModel m;
  m.strings = {"p", "a", "b", "c"};
  m.t_min = 0;
  m.t_max = 8000;
  m.ranges.rows() = {
      rng(0, 1000, 0),     // P1, wide
      rng(10, 12, 1),      // A  narrow: A, B, C are one run [10, 18], count 3
      rng(13, 15, 2),      // B  narrow, gap 1
      rng(13, 14, 3),      //   B's child: the run's depth-2 range [13, 14]
      rng(16, 18, 1),      // C  narrow
      rng(100, 200, 2),    // D  wide: copied, ends the run
      rng(201, 203, 1),    // E  \ run [201, 206]
      rng(204, 206, 1),    // F  /
      rng(1000, 2000, 0),  // P2, wide
      rng(1001, 1003, 1),  // G  another parent: a new run
      rng(1010, 1012, 1),  // H  gap 7 < q: joins G's run [1001, 1012]
      rng(1030, 1032, 1),  // I  gap 18 >= q: a new run
  };
  m.lanes.push_back(prof::Lane{0, prof::LaneKind::HostThread, "main", -1, -1, 7, 0, int64_t(m.ranges.size())});
  const prof::TraceOverview o = prof::build_overview(m, 1000);
  EXPECT_EQ(o.quantum_ns, 8);
  EXPECT_EQ(o.full_ranges, 12);
  using T = std::tuple<int64_t, int64_t, int, int64_t>;
  const std::vector<T> want = {T{0, 1000, 0, 1},  T{10, 18, 1, 3},     T{13, 14, 2, 1},     T{100, 200, 1, 1},
                               T{201, 206, 1, 2}, T{1000, 2000, 0, 1}, T{1001, 1012, 1, 2}, T{1030, 1032, 1, 1}};
  EXPECT_EQ(rows_of(o), want);
  // Merged runs carry their first range's name; copies keep theirs.
  EXPECT_EQ(o.model.ranges[1].name_id, 1);
  EXPECT_EQ(o.model.ranges[3].name_id, 2);
  EXPECT_EQ(o.model.lanes[0].name, "main");
  EXPECT_EQ(o.model.lanes[0].tid_or_stream, 7);
}

TEST(TraceOverview, EveryRangeLiesInAnOverviewRangeOfItsLaneAndDepth) {
  ulysses::testdata::SyntheticOptions so;  // 8 ranks, kernels on two streams, head lanes
  so.target_ranges = 300000;
  const auto m = ulysses::testdata::make_synthetic_trace(so);
  const prof::TraceOverview o = prof::build_overview(*m);
  ASSERT_EQ(o.model.lanes.size(), m->lanes.size());
  ASSERT_EQ(o.counts.size(), o.model.ranges.size());
  int64_t total = 0;
  for (int64_t c : o.counts) {
    EXPECT_GE(c, 1);
    total += c;
  }
  EXPECT_EQ(total, int64_t(m->ranges.size()));
  EXPECT_EQ(o.full_ranges, int64_t(m->ranges.size()));
  // Bounded by the resolution, not by the trace: per row (lane, depth) the copied ranges are
  // disjoint and at least q long, and a merged run ends at a gap of at least q, a wide
  // sibling or a new parent; so at most about 3 x resolution per row. At a coarse resolution
  // the same trace shrinks by far more than 5x.
  int64_t rows = 0;
  for (const auto& l : m->lanes) {
    const auto d = depths(*m, l);
    rows += d.empty() ? 0 : *std::max_element(d.begin(), d.end()) + 1;
  }
  const prof::TraceOverview coarse = prof::build_overview(*m, 256);
  EXPECT_LE(int64_t(coarse.model.ranges.size()), rows * 3 * 256);
  EXPECT_LT(coarse.model.ranges.size() * 5, m->ranges.size())
      << coarse.model.ranges.size() << " of " << m->ranges.size() << ", " << rows << " rows";
  EXPECT_LE(int64_t(o.model.ranges.size()), rows * 3 * prof::kOverviewResolution);
  std::printf("overview: %zu ranges at resolution %d, %zu at 256, of %zu (%lld rows)\n", o.model.ranges.size(),
              prof::kOverviewResolution, coarse.model.ranges.size(), m->ranges.size(), static_cast<long long>(rows));
  for (size_t li = 0; li < m->lanes.size(); ++li) {
    const auto& fl = m->lanes[li];
    const auto& ol = o.model.lanes[li];
    EXPECT_EQ(ol.name, fl.name);
    EXPECT_EQ(ol.rank, fl.rank);
    const std::vector<int> fd = depths(*m, fl), od = depths(o.model, ol);
    // The overview nests as written (its depth field is the depth from the times).
    for (int64_t k = 0; k < ol.count; ++k) {
      const auto& r = o.model.ranges[size_t(ol.first + k)];
      ASSERT_EQ(int(r.depth), od[size_t(k)]) << "lane " << li << " range " << k;
      ASSERT_EQ(r.lane, int32_t(li));
      if (k > 0) {
        ASSERT_LE(o.model.ranges[size_t(ol.first + k - 1)].start_ns, r.start_ns);
      }
    }
    // Each full range is inside an overview range at its depth: walk both in start order.
    std::vector<int64_t> cursor(256, ol.first);  // per depth: next overview candidate
    for (int64_t i = 0; i < fl.count; ++i) {
      const auto& r = m->ranges[size_t(fl.first + i)];
      const int d = fd[size_t(i)];
      int64_t& c = cursor[size_t(d)];
      while (c < ol.first + ol.count && (od[size_t(c - ol.first)] != d || o.model.ranges[size_t(c)].end_ns < r.end_ns))
        ++c;
      ASSERT_LT(c, ol.first + ol.count) << "lane " << li << " range " << i << " depth " << d;
      const auto& v = o.model.ranges[size_t(c)];
      ASSERT_LE(v.start_ns, r.start_ns) << "lane " << li << " range " << i;
      ASSERT_GE(v.end_ns, r.end_ns);
      ASSERT_EQ(v.rank, r.rank);
    }
  }
}

TEST(TraceOverview, EncodingRoundTripsAndRefusesGarbage) {
  ulysses::testdata::SyntheticOptions so;
  so.steps = 2;
  const auto m = ulysses::testdata::make_synthetic_trace(so);
  m->clocks.push_back({1, true, true, 5, 6, 7, 8, 9, 10, true});
  const prof::TraceOverview o = prof::build_overview(*m, 512);
  const std::string bytes = prof::encode_overview(o);
  const prof::TraceOverview d = prof::decode_overview(bytes);
  EXPECT_EQ(prof::encode_overview(d), bytes);
  ASSERT_EQ(d.model.ranges.size(), o.model.ranges.size());
  EXPECT_EQ(d.counts, o.counts);
  EXPECT_EQ(d.quantum_ns, o.quantum_ns);
  EXPECT_EQ(d.model.strings, m->strings);
  EXPECT_EQ(d.model.steps.size(), m->steps.size());
  ASSERT_EQ(d.model.clocks.size(), 1u);
  EXPECT_EQ(d.model.clocks[0].close_at_ns, 10);
  for (size_t k = 0; k < o.model.ranges.size(); ++k) {
    const auto &a = o.model.ranges[k], &b = d.model.ranges[k];
    const auto &ax = o.model.extra(a), &bx = d.model.extra(b);
    ASSERT_EQ(std::tie(a.start_ns, a.end_ns, a.rank, a.lane, a.name_id, a.step, a.layer, a.head_begin, a.head_end,
                       a.chunk, ax.bytes_sent, ax.bytes_recv, a.phase, a.dir, a.depth, a.is_kernel, ax.pg, ax.seq),
              std::tie(b.start_ns, b.end_ns, b.rank, b.lane, b.name_id, b.step, b.layer, b.head_begin, b.head_end,
                       b.chunk, bx.bytes_sent, bx.bytes_recv, b.phase, b.dir, b.depth, b.is_kernel, bx.pg, bx.seq))
        << k;
  }
  // Truncations, a flipped byte in a name id and trailing bytes are refused (or decode to
  // something valid), never read out of bounds (the ASan run checks that).
  for (size_t cut : {size_t(0), size_t(1), bytes.size() / 3, bytes.size() - 1})
    EXPECT_THROW(prof::decode_overview(bytes.substr(0, cut)), std::runtime_error) << cut;
  EXPECT_THROW(prof::decode_overview(bytes + "x"), std::runtime_error);
  for (size_t pos = 0; pos < bytes.size(); pos += bytes.size() / 97 + 1) {
    std::string bad = bytes;
    bad[pos] = char(bad[pos] ^ 0x5a);
    try {
      const prof::TraceOverview x = prof::decode_overview(bad);
      for (const auto& r : x.model.ranges) ASSERT_LT(size_t(r.name_id), x.model.strings.size());
    } catch (const std::runtime_error&) {
    }
  }
}

TEST(TraceOverview, CacheBesideARunIsReadBackAndIgnoredWhenStaleCorruptOrOff) {
  ut::TempDir dir;
  const std::string run = dir.path + "/run";
  fs::create_directories(run + "/trace");
  std::vector<std::string> files;
  for (int r = 0; r < 3; ++r) {
    files.push_back(run + "/trace/rank" + std::to_string(r) + ".sqlite");
    ulysses::testdata::generate_rank(files.back(), r, 3, 500, 2);
    set_old(files.back());
  }
  const std::string cpath = run + "/trace/.ulysses-overview-cache";
  EXPECT_EQ(prof::overview_cache_path(run), cpath);
  const prof::LoadOptions lo;

  prof::OverviewCacheProbe p = prof::probe_overview_cache(run, lo);
  EXPECT_FALSE(prof::read_overview_cache(p, run));
  const prof::TraceModel m = prof::load_trace(run, lo);
  const prof::TraceOverview o = prof::build_overview(m);
  ASSERT_TRUE(prof::write_overview_cache(p, run, lo, o));
  ASSERT_TRUE(fs::exists(cpath));

  p = prof::probe_overview_cache(run, lo);
  auto hit = prof::read_overview_cache(p, run);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->model.source, run);
  EXPECT_EQ(prof::encode_overview(*hit), prof::encode_overview(o));
  EXPECT_EQ(hit->full_ranges, int64_t(m.ranges.size()));

  // Other load options: another key.
  prof::LoadOptions other = lo;
  other.head_lanes = !lo.head_lanes;
  EXPECT_FALSE(prof::read_overview_cache(prof::probe_overview_cache(run, other), run));

  // An input touched after the probe: not written; touched before: the old cache is stale.
  p = prof::probe_overview_cache(run, lo);
  {
    const struct timespec ts[2] = {{::time(nullptr) - 7200, 5}, {::time(nullptr) - 7200, 5}};
    ASSERT_EQ(utimensat(AT_FDCWD, files[1].c_str(), ts, 0), 0);
  }
  EXPECT_FALSE(prof::write_overview_cache(p, run, lo, o));
  EXPECT_FALSE(prof::read_overview_cache(prof::probe_overview_cache(run, lo), run));

  // A run still being written (an input modified just now): computed, not cached.
  ASSERT_EQ(utimensat(AT_FDCWD, files[2].c_str(), nullptr, 0), 0);
  p = prof::probe_overview_cache(run, lo);
  EXPECT_FALSE(prof::write_overview_cache(p, run, lo, o));
  set_old(files[2]);

  // Written again, then corrupted: ignored.
  p = prof::probe_overview_cache(run, lo);
  ASSERT_TRUE(prof::write_overview_cache(p, run, lo, o));
  ASSERT_TRUE(prof::read_overview_cache(prof::probe_overview_cache(run, lo), run));
  {
    std::fstream f(cpath, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(cpath) / 2));
    f.put('\x7f');
  }
  EXPECT_FALSE(prof::read_overview_cache(prof::probe_overview_cache(run, lo), run));
  fs::resize_file(cpath, 20);
  EXPECT_FALSE(prof::read_overview_cache(prof::probe_overview_cache(run, lo), run));

  // Off: neither read nor written.
  ::setenv("ULYSSES_TRACE_NO_CACHE", "1", 1);
  p = prof::probe_overview_cache(run, lo);
  EXPECT_FALSE(prof::write_overview_cache(p, run, lo, o));
  ::unsetenv("ULYSSES_TRACE_NO_CACHE");
  prof::SummaryCacheOptions off;
  off.enabled = false;
  EXPECT_FALSE(prof::write_overview_cache(prof::probe_overview_cache(run, lo, off), run, lo, o));
  EXPECT_EQ(fs::file_size(cpath), 20u);
}
