// The parallel trace loader (docs/PERFORMANCE.md: rank files read at once, lanes sorted apart)
// against the legacy one (LoadOptions::legacy: files one after another, one global sort) on
// the same files: every field of every range, lane, string, rank, step, memory sample,
// runtime call and clock, and the summary JSON, must be equal. The files are written with
// TraceWriter and hold what the Ulysses reader handles: nested host ranges on two threads,
// overlapping async all-to-alls on the comm lane (sub-lanes), collectives (pg, seq), kernels
// and copies with external correlation, memory samples, steps and clock offsets (alignment).
// Also: the same errors for a corrupt file and for two files claiming one rank.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include "common/model_compare.hpp"
#include "profiler/test_util.hpp"
#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/rank_file_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

// One rank file of about `steps` * 61 host ranges plus kernels. Starts are distinct within a
// lane (ranges equal in lane, start and end may legally come in either order).
void write_rank(const std::string& path, int rank, int world, int steps, int64_t clock_offset) {
  prof::TracerOptions o = ut::options_for(path, rank, world);
  o.run_config_json = R"({"model":{"num_attention_heads":8,"num_hidden_layers":6}})";
  prof::TraceWriter w(o, 2000 + rank);
  w.begin();
  // Rank files must not share one string table: odd ranks get a string of their own first, so
  // their ids differ from the run's (a loader that forgot to map ids would go unnoticed).
  if (rank % 2) w.string_id("only on rank " + std::to_string(rank));
  w.name_thread(1, "main");
  w.name_thread(7, "loader");
  if (rank != 0) {
    prof::ClockOffset c;
    c.offset_ns = clock_offset;
    c.error_ns = 1000 + rank;
    c.measured_at_ns = 900'000;
    w.write_clock("start", c);
    c.offset_ns = clock_offset + 5000;  // drift
    c.measured_at_ns = 900'000'000;
    w.write_clock("close", c);
  }
  w.commit();
  int64_t t = 1'000'000 + rank * 333 + clock_offset, seq = 0, corr = 1;
  const int hp = 8 / world;
  for (int step = 0; step < steps; ++step) {
    w.begin();
    const int64_t step_start = t;
    prof::RangeRecord st;
    st.tid = 1;
    st.step = step;
    st.info.phase = prof::Phase::Step;
    st.start_ns = t;
    st.end_ns = t + 2 * 6 * 5 * 1000 + 500;
    w.write_range(st);
    for (auto dir : {prof::Direction::Forward, prof::Direction::Backward}) {
      for (int l = 0; l < 6; ++l) {
        const prof::Phase phases[] = {prof::Phase::QkvProj, prof::Phase::A2ASeqToHead, prof::Phase::Attention,
                                      prof::Phase::A2AHeadToSeq, prof::Phase::OutProj};
        for (auto p : phases) {
          prof::RangeRecord r;
          r.step = step;
          r.info.phase = p;
          r.info.dir = dir;
          r.info.layer = l;
          const bool comm = prof::phase_is_comm(p);
          r.tid = comm ? prof::kCommTid : 1;
          r.push_pop = !comm;
          r.start_ns = t + 100 + l % 3;
          // comm ranges run 2.6 us: the next one (2 us later) starts before this ends (sub-lanes)
          r.end_ns = comm ? r.start_ns + 2600 : t + 900 + (rank * 37 + l) % 50;
          if (comm || p == prof::Phase::Attention) {
            r.info.head_begin = rank * hp;
            r.info.head_end = rank * hp + hp;
            r.info.chunk = l % 2;
          }
          if (comm) {
            r.info.bytes_sent = 1000 * (l + 1) + rank;
            r.info.bytes_recv = 2000 * (l + 1) + rank;
            r.info.pg = 1;
            r.info.seq = seq++;
          }
          const int64_t ev = w.write_range(r);
          if (p == prof::Phase::Attention) {  // a kernel launched by the attention range
            w.write_external_id(corr + 100, ev, step, r.info);
            w.write_external_correlation(corr, corr + 100);
            prof::KernelRecord k;
            k.start_ns = r.start_ns + 50;
            k.end_ns = r.start_ns + 400;
            k.stream = 7;
            k.correlation = corr;
            k.name = (l % 2 ? "flash_fwd_kernel_r" : "gemm_kernel_r") + std::to_string(rank);
            w.write_kernel(k);
            prof::MemcpyRecord m;
            m.start_ns = r.start_ns + 420;
            m.end_ns = r.start_ns + 480;
            m.stream = 9;
            m.correlation = corr + 50000;
            m.bytes = 4096;
            w.write_memcpy(m);
            ++corr;
          }
          t += 1000;
        }
      }
    }
    prof::RangeRecord side;  // a second host thread, with a name only it uses
    side.tid = 7;
    side.step = step;
    side.start_ns = step_start + 10;
    side.end_ns = step_start + 20000;
    side.info.phase = prof::Phase::Other;
    side.push_pop = true;
    w.write_range(side);
    t = st.end_ns + 10;
    prof::StepRecord rec;
    rec.step = step;
    rec.loss = 3.0 - 0.01 * step;
    rec.tokens = 4096;
    rec.step_ms = 0.06;
    w.write_step(rec, step_start, t);
    prof::MemorySample ms;
    ms.allocated = 1000 + step;
    ms.reserved = 2000 + rank;
    ms.peak = 3000;
    w.write_memory(t, step, rank % 2 ? "after step" : "after backward", ms);
    w.commit();
  }
  w.close();
}

std::string make_run(const std::string& dir, int world, int steps) {
  const std::string run = dir + "/run";
  fs::create_directories(run + "/trace");
  for (int r = 0; r < world; ++r)
    write_rank(run + "/trace/rank" + std::to_string(r) + ".sqlite", r, world, steps, r == 0 ? 0 : 40'000 * r);
  return run;
}

prof::LoadOptions legacy_opts(bool head_lanes) {
  prof::LoadOptions o;
  o.legacy = true;
  o.head_lanes = head_lanes;
  return o;
}

}  // namespace

TEST(TraceScale, ParallelLoaderGivesTheLegacyModelAndSummary) {
  ut::TempDir tmp;
  const std::string run = make_run(tmp.path, 4, 40);  // ~4 x 40 x 61 host ranges + kernels
  for (bool heads : {true, false}) {
    const prof::TraceModel want = prof::load_trace(run, legacy_opts(heads));
    ASSERT_GT(want.ranges.size(), 10000u);
    ASSERT_EQ(want.ranks.size(), 4u);
    // the files hold what the comparison must cover
    EXPECT_GT(std::count_if(want.ranges.begin(), want.ranges.end(), [](const auto& r) { return r.is_kernel; }), 0);
    EXPECT_GT(std::count_if(want.lanes.begin(), want.lanes.end(), [](const auto& l) { return l.name == "comm #2"; }), 0)
        << "overlapping all-to-alls must need a sub-lane";
    EXPECT_GT(std::count_if(want.clocks.begin(), want.clocks.end(), [](const auto& c) { return c.applied; }), 0);
    for (int threads : {0, 1, 2, 3, 8}) {
      SCOPED_TRACE("head lanes " + std::to_string(heads) + ", threads " + std::to_string(threads));
      prof::LoadOptions o;
      o.head_lanes = heads;
      o.threads = threads;
      const prof::TraceModel got = prof::load_trace(run, o);
      ulysses::test::expect_same_model(want, got);
      EXPECT_EQ(prof::summary_to_json(want, prof::analyze(want)).dump(1),
                prof::summary_to_json(got, prof::analyze(got)).dump(1));
    }
  }
}

TEST(TraceScale, ParallelLoaderReportsTheLegacyErrors) {
  ut::TempDir tmp;
  const std::string run = make_run(tmp.path, 3, 2);
  auto message = [&](const prof::LoadOptions& o) -> std::string {
    try {
      prof::load_trace(run, o);
    } catch (const prof::TraceError& e) {
      return e.what();
    }
    return "no error";
  };
  // Two files claiming rank 1.
  fs::copy_file(run + "/trace/rank1.sqlite", run + "/trace/rank3.sqlite");
  const std::string dup = message(legacy_opts(true));
  EXPECT_NE(dup.find("two trace files claim rank 1"), std::string::npos) << dup;
  EXPECT_EQ(message(prof::LoadOptions{}), dup);
  fs::remove(run + "/trace/rank3.sqlite");
  // A truncated file in the middle of the folder.
  const std::string f = run + "/trace/rank1.sqlite";
  const auto size = fs::file_size(f);
  fs::resize_file(f, size / 3);
  const std::string bad = message(legacy_opts(true));
  EXPECT_NE(bad, "no error");
  EXPECT_NE(bad.find("rank1.sqlite"), std::string::npos) << bad;
  EXPECT_EQ(message(prof::LoadOptions{}), bad);
}

// build_lanes' parallel way (one counting pass over m.ranges and the reader's per-file
// vectors, lanes sorted apart) against the legacy whole-vector sort, on random ranges of
// 12 sources over 3 ranks that overlap without nesting (sub-lanes) and nest (parents).
TEST(TraceScale, LaneBuildingFromPerFileVectorsEqualsTheLegacySort) {
  std::mt19937_64 rng(7);
  namespace detail = ulysses::prof::detail;
  detail::Builder legacy, fast;
  for (detail::Builder* b : {&legacy, &fast}) {
    for (int s = 0; s < 12; ++s)
      b->source(s % 3, s % 4 == 3 ? prof::LaneKind::Comm : prof::LaneKind::HostThread, 100 + s,
                "src" + std::to_string(s), s % 4 == 3 ? 2 : 1);
    b->intern("r");
  }
  std::vector<prof::TraceRange> all;
  int64_t t = 0;
  for (int i = 0; i < 20000; ++i) {
    prof::TraceRange r;
    t += 1 + static_cast<int64_t>(rng() % 50);  // distinct starts: no ties in (lane, start, end)
    r.start_ns = t;
    r.end_ns = t + 1 + static_cast<int64_t>(rng() % 400);
    r.lane = static_cast<int32_t>(rng() % 12);
    r.rank = r.lane % 3;
    r.layer = i;  // identifies the range after reordering
    all.push_back(r);
  }
  std::shuffle(all.begin(), all.end(), rng);
  legacy.m.ranges.rows() = all;
  fast.m.ranges.rows().assign(all.begin(), all.begin() + 5000);
  fast.pending_ranges.emplace_back(all.begin() + 5000, all.begin() + 12000);
  fast.pending_ranges.emplace_back(all.begin() + 12000, all.end());
  detail::build_lanes(legacy, -1);
  detail::build_lanes(fast, 2);
  EXPECT_TRUE(fast.pending_ranges.empty());
  ASSERT_EQ(legacy.m.lanes.size(), fast.m.lanes.size());
  EXPECT_GT(legacy.m.lanes.size(), 12u) << "random overlaps must need sub-lanes";
  for (size_t i = 0; i < legacy.m.lanes.size(); ++i) {
    EXPECT_EQ(legacy.m.lanes[i].name, fast.m.lanes[i].name);
    EXPECT_EQ(legacy.m.lanes[i].first, fast.m.lanes[i].first);
    EXPECT_EQ(legacy.m.lanes[i].count, fast.m.lanes[i].count);
  }
  ASSERT_EQ(legacy.m.ranges.size(), fast.m.ranges.size());
  for (size_t i = 0; i < legacy.m.ranges.size(); ++i) {
    const auto &a = legacy.m.ranges[i], &b = fast.m.ranges[i];
    ASSERT_EQ(std::tie(a.layer, a.start_ns, a.end_ns, a.lane, a.parent, a.depth),
              std::tie(b.layer, b.start_ns, b.end_ns, b.lane, b.parent, b.depth))
        << "range " << i;
  }
}

// order_file_ranges (the parallel reader, per file): each source's ranges end up in the order
// a stable sort by (start, longer first) gives, in the places that source's ranges held, for
// sources already sorted, made of a few sorted runs (merged) or shuffled (sorted), with ties;
// and build_lanes gives the same model from the ordered ranges as from the ranges as read.
TEST(TraceScale, OrderingAFilesRangesIsAStableSortPerSourceAndChangesNoModel) {
  std::mt19937_64 rng(5);
  namespace detail = ulysses::prof::detail;
  for (int runs : {1, 2, 3, 7, 16, 17, 40, 1000}) {
    SCOPED_TRACE("runs per source " + std::to_string(runs));
    std::vector<prof::TraceRange> read;
    for (int lane = 0; lane < 4; ++lane) {
      for (int run = 0; run < runs; ++run) {
        int64_t t = static_cast<int64_t>(rng() % 1000);
        const size_t first = read.size();
        for (int k = 0; k < 3000 / runs + 1; ++k) {
          prof::TraceRange r;
          t += static_cast<int64_t>(rng() % 3);  // equal starts, and equal (start, end): ties
          r.start_ns = t;
          r.end_ns = t + static_cast<int64_t>(rng() % 4) * 100;
          r.lane = lane;
          read.push_back(r);
        }
        // Each run in order (longer first among equal starts), so a source is `runs` runs.
        std::stable_sort(read.begin() + static_cast<std::ptrdiff_t>(first), read.end(),
                         [](const prof::TraceRange& a, const prof::TraceRange& b) {
                           return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
                         });
        for (size_t i = first; i < read.size(); ++i) read[i].layer = static_cast<int32_t>(i);  // identifies it
      }
    }
    // Runs of one source ascend; the sources are interleaved at random (each keeps its order).
    std::vector<prof::TraceRange> mixed;
    std::vector<size_t> next(4, 0), begin(5, 0);
    for (const auto& r : read) ++begin[static_cast<size_t>(r.lane) + 1];
    for (size_t l = 0; l < 4; ++l) begin[l + 1] += begin[l];
    while (mixed.size() < read.size()) {
      const size_t l = rng() % 4;
      if (begin[l] + next[l] < begin[l + 1]) mixed.push_back(read[begin[l] + next[l]++]);
    }
    std::vector<prof::TraceRange> got = mixed;
    detail::order_file_ranges(got);
    for (int32_t lane = 0; lane < 4; ++lane) {
      std::vector<size_t> places;
      std::vector<prof::TraceRange> want;
      for (size_t i = 0; i < mixed.size(); ++i)
        if (mixed[i].lane == lane) places.push_back(i), want.push_back(mixed[i]);
      std::stable_sort(want.begin(), want.end(), [](const prof::TraceRange& a, const prof::TraceRange& b) {
        return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
      });
      for (size_t k = 0; k < places.size(); ++k)
        ASSERT_EQ(got[places[k]].layer, want[k].layer) << "source " << lane << ", place " << k;
    }
    // The same model either way.
    detail::Builder as_read, ordered;
    for (detail::Builder* b : {&as_read, &ordered}) {
      for (int l = 0; l < 4; ++l) b->source(0, prof::LaneKind::HostThread, l, "src" + std::to_string(l), 1);
      b->intern("r");
    }
    as_read.pending_ranges.push_back(mixed);
    ordered.pending_ranges.push_back(got);
    detail::build_lanes(as_read, 2);
    detail::build_lanes(ordered, 2);
    ulysses::test::expect_same_model(as_read.m, ordered.m);
  }
}

// add_head_lanes in place (rank blocks moved up once, copies written per rank on several
// threads) against the legacy way (every range copied into a new vector, a map of copies per
// head range), on random ranges of 4 ranks: overlapping head ranges (sub-lanes), kernels
// (never copied), nesting (parents to move), a rank with no head ranges, one with no ranges.
TEST(TraceScale, HeadLanesInPlaceEqualTheLegacyCopy) {
  std::mt19937_64 rng(11);
  namespace detail = ulysses::prof::detail;
  detail::Builder b;
  for (int s = 0; s < 12; ++s)
    b.source(s % 4, s % 3 == 2 ? prof::LaneKind::Comm : prof::LaneKind::HostThread, 100 + s, "src" + std::to_string(s),
             s % 3 == 2 ? 2 : 1);
  b.intern("r");
  int64_t t = 0;
  for (int i = 0; i < 30000; ++i) {
    prof::TraceRange r;
    t += 1 + static_cast<int64_t>(rng() % 40);
    r.start_ns = t;
    r.end_ns = t + 1 + static_cast<int64_t>(rng() % 500);
    r.lane = static_cast<int32_t>(rng() % 12);
    if (r.lane % 4 == 3) r.lane = 3;  // rank 3: one source only ...
    r.rank = r.lane % 4;
    r.layer = i;
    if (r.rank != 3 && rng() % 3 != 0) {  // ... and no head ranges there
      r.head_begin = static_cast<int32_t>(rng() % 4) * 4;
      r.head_end = r.head_begin + 4;
    }
    r.is_kernel = rng() % 7 == 0;
    b.m.ranges.push_back(r);
  }
  b.source(4, prof::LaneKind::HostThread, 200, "idle", 1);  // rank 4: a lane, no ranges
  detail::build_lanes(b, 2, true);
  const size_t capacity = b.m.ranges.rows().capacity();
  prof::TraceModel by_copy = b.m, in_place = b.m;
  in_place.ranges.reserve(capacity);
  detail::add_head_lanes(by_copy, false);
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    prof::TraceModel got = in_place;
    got.ranges.reserve(capacity);
    const prof::TraceRange* before = got.ranges.rows().data();
    detail::add_head_lanes(got, true, threads);
    EXPECT_EQ(got.ranges.rows().data(), before)
        << "build_lanes left the room: the ranges must not have moved to a new vector";
    ulysses::test::expect_same_model(by_copy, got);
  }
  // The comparison covered what it must.
  size_t head_lanes = 0, split = 0, copies = 0;
  std::set<int32_t> ranks_with_heads;
  for (const auto& l : by_copy.lanes) {
    if (l.kind != prof::LaneKind::HeadRange) continue;
    ++head_lanes;
    split += l.name.find('#') != std::string::npos;
    copies += static_cast<size_t>(l.count);
    ranks_with_heads.insert(l.rank);
  }
  EXPECT_TRUE(head_lanes > 12 && split > 0) << head_lanes << " head lanes, " << split << " sub-lanes";
  EXPECT_EQ(ranks_with_heads, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(by_copy.ranges.size(), b.m.ranges.size() + copies);
  EXPECT_GT(std::count_if(by_copy.ranges.begin(), by_copy.ranges.end(), [](const auto& r) { return r.parent >= 0; }),
            1000);
  EXPECT_EQ(by_copy.lanes.back().rank, 4);

  // Lanes that do not follow each other (not what build_lanes gives): the legacy way, same model.
  prof::TraceModel odd = b.m;
  std::swap(odd.lanes[0], odd.lanes[1]);
  prof::TraceModel want = odd;
  detail::add_head_lanes(want, false);
  detail::add_head_lanes(odd, true, 2);
  ulysses::test::expect_same_model(want, odd);
}

// prepare_capacity (huge pages asked for, and the page faults of a big vector's room taken on
// several threads before it is filled) changes nothing a caller can see: the same buffer, size
// and capacity, the ranges already there kept, and what resize adds then value-initialised.
// 12 MB of room (it does nothing below 8 MB; touched in 4 MB slices), on 1 and 3 threads,
// asked for more than the room (only the room may be touched; the sanitizer builds watch the
// stores).
TEST(TraceScale, PreparingCapacityKeepsTheVectorAsItWas) {
  namespace detail = ulysses::prof::detail;
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::vector<prof::TraceRange> v;
    v.reserve((size_t{12} << 20) / sizeof(prof::TraceRange));  // 12 MB
    for (int i = 0; i < 1000; ++i) {
      prof::TraceRange r;
      r.start_ns = i;
      r.layer = static_cast<int16_t>(i);
      v.push_back(r);
    }
    const prof::TraceRange* data = v.data();
    const size_t cap = v.capacity();
    ASSERT_GE((cap - v.size()) * sizeof(prof::TraceRange), size_t{8} << 20);
    detail::prepare_capacity(v, cap * 2, threads);
    EXPECT_EQ(v.data(), data);
    EXPECT_EQ(v.size(), 1000u);
    EXPECT_EQ(v.capacity(), cap);
    v.resize(cap);
    EXPECT_EQ(v.data(), data);
    size_t kept = 0, fresh = 0;
    const prof::TraceRange d;
    for (size_t i = 0; i < v.size(); ++i) {
      const prof::TraceRange& r = v[i];
      if (i < 1000)
        kept += r.start_ns == static_cast<int64_t>(i) && r.layer == static_cast<int32_t>(i);
      else
        fresh += r.start_ns == d.start_ns && r.layer == d.layer && r.parent == -1 && r.extra == -1 && r.origin == -1;
    }
    EXPECT_EQ(kept, 1000u);
    EXPECT_EQ(fresh, cap - 1000);
  }
}

// Rank-file caches (rank_file_cache.hpp): a run folder read once with write_file_caches is
// read again from the caches, giving the same model (every field) and summary as the SQLite
// rows; a cache is used only for the file, build and options it was made for, and any
// trouble with one (stale, torn, swapped, switched off) means that file's rows are read.
TEST(TraceScale, RankFileCachesGiveTheSameModelAndStepAsideWhenInDoubt) {
  ut::TempDir tmp;
  const std::string run = make_run(tmp.path, 4, 10);
  const std::vector<std::string> files = prof::find_rank_files(run);
  ASSERT_EQ(files.size(), 4u);
  auto load = [&](prof::LoadOptions o, prof::LoadOptions::Stats* st) {
    *st = {};
    o.stats = st;
    return prof::load_trace(run, o);
  };
  auto summary = [](const prof::TraceModel& m) { return prof::summary_to_json(m, prof::analyze(m)).dump(1); };
  prof::LoadOptions::Stats st;

  // Freshly written files are inside the default racy window: nothing is cached.
  prof::LoadOptions write;
  write.write_file_caches = true;
  (void)load(write, &st);
  EXPECT_EQ(st.file_caches_written, 0);
  for (const auto& f : files) EXPECT_FALSE(fs::exists(prof::rank_file_cache_path(f))) << f;

  write.file_cache_racy_window_ns = 0;
  const prof::TraceModel rows = load(write, &st);
  EXPECT_EQ(st.files, 4);
  EXPECT_EQ(st.from_file_cache, 0);
  EXPECT_EQ(st.file_caches_written, 4);
  for (const auto& f : files) EXPECT_TRUE(fs::exists(prof::rank_file_cache_path(f))) << f;

  for (bool heads : {true, false}) {
    SCOPED_TRACE(heads ? "head lanes" : "no head lanes");
    const prof::TraceModel want = prof::load_trace(run, legacy_opts(heads));
    prof::LoadOptions o;
    o.head_lanes = heads;
    const prof::TraceModel got = load(o, &st);
    EXPECT_EQ(st.from_file_cache, 4);
    EXPECT_EQ(st.file_caches_written, 0);
    ulysses::test::expect_same_model(want, got);
    EXPECT_EQ(summary(want), summary(got));
  }
  const prof::TraceModel want = prof::load_trace(run, legacy_opts(true));

  // Other reading options: a cache made with GPU activity is not one without it.
  prof::LoadOptions no_gpu;
  no_gpu.gpu_activity = false;
  prof::LoadOptions no_gpu_legacy = legacy_opts(true);
  no_gpu_legacy.gpu_activity = false;
  ulysses::test::expect_same_model(prof::load_trace(run, no_gpu_legacy), load(no_gpu, &st));
  EXPECT_EQ(st.from_file_cache, 0);

  // Switched off: by the option and by the environment.
  prof::LoadOptions off;
  off.file_caches = false;
  (void)load(off, &st);
  EXPECT_EQ(st.from_file_cache, 0);
  ASSERT_EQ(setenv("ULYSSES_TRACE_NO_CACHE", "1", 1), 0);
  (void)load(prof::LoadOptions{}, &st);
  unsetenv("ULYSSES_TRACE_NO_CACHE");
  EXPECT_EQ(st.from_file_cache, 0);

  // A rank file touched since (its mtime is in the key): its rows are read.
  ASSERT_EQ(utimensat(AT_FDCWD, files[1].c_str(), nullptr, 0), 0);
  // A torn cache: one byte of its payload flipped (the checksum catches it).
  {
    const std::string c = prof::rank_file_cache_path(files[2]);
    std::fstream f(c, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char b = static_cast<char>(f.get());
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(b ^ 0x5a));
  }
  // Another file's cache under this file's name (the file name is in the key).
  fs::copy_file(prof::rank_file_cache_path(files[0]), prof::rank_file_cache_path(files[3]),
                fs::copy_options::overwrite_existing);
  ulysses::test::expect_same_model(want, load(prof::LoadOptions{}, &st));
  EXPECT_EQ(st.from_file_cache, 1);  // rank 0's only

  // Written again where stale, then all four are used again.
  (void)load(write, &st);
  EXPECT_EQ(st.file_caches_written, 3);
  ulysses::test::expect_same_model(want, load(prof::LoadOptions{}, &st));
  EXPECT_EQ(st.from_file_cache, 4);
  EXPECT_EQ(summary(rows), summary(load(prof::LoadOptions{}, &st)));
}

// The payload decoder (what a crafted cache with a matching key and checksum would reach):
// the encoding of a rank file decodes to the model the loader builds from that file; every
// truncation is refused with std::runtime_error, and flipped bytes either are refused or
// give a model whose lanes, names and durations are sound.
TEST(TraceScale, RankFileCacheDecoderRoundTripsAndRefusesMalformedPayloads) {
  ut::TempDir tmp;
  const std::string run = make_run(tmp.path, 2, 3);
  const std::string f = prof::find_rank_files(run)[1];
  {  // documents per shard (ULYSSES_DOCUMENTS) travel through the cache too
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO ULYSSES_DOCUMENTS VALUES (1, 0, 0, 7, 0, 32, 64, 4, 30, 0, 20, 50), "
                           "(1, 0, 0, 7, 1, 96, 128, -1, 12, 0, 116, 128)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const std::string payload = prof::encode_rank_file(f);
  ASSERT_EQ(prof::load_trace(f).documents.size(), 2u);
  ASSERT_GT(payload.size(), 1000u);
  ulysses::test::expect_same_model(prof::load_trace(f), prof::model_from_rank_file_cache(payload));
  for (size_t n = 0; n < payload.size(); n += 1 + n / 16)
    EXPECT_THROW(prof::model_from_rank_file_cache(payload.substr(0, n)), std::runtime_error) << n;
  std::mt19937 rng(13);
  int refused = 0;
  for (int k = 0; k < 300; ++k) {
    std::string p = payload;
    for (int j = 0; j < 3; ++j) p[rng() % p.size()] ^= static_cast<char>(1 + rng() % 255);
    try {
      const prof::TraceModel m = prof::model_from_rank_file_cache(p);
      int64_t in_lanes = 0;
      for (const auto& l : m.lanes) {
        ASSERT_TRUE(l.first >= 0 && l.count >= 0 && static_cast<size_t>(l.first + l.count) <= m.ranges.size());
        in_lanes += l.count;
      }
      EXPECT_EQ(in_lanes, static_cast<int64_t>(m.ranges.size()));
      for (const auto& r : m.ranges) {
        ASSERT_TRUE(r.name_id >= 0 && static_cast<size_t>(r.name_id) < m.strings.size());
        ASSERT_GE(r.end_ns, r.start_ns);
        ASSERT_TRUE(r.lane >= 0 && static_cast<size_t>(r.lane) < m.lanes.size());
      }
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_THROW(prof::encode_rank_file(tmp.path + "/missing.sqlite"), prof::TraceError);
}

// prepare_trace_caches counts rank-file caches only where the loader uses them: a run folder
// of Ulysses rank files gets one per file and is then fully prepared; nsys exports that happen
// to be named rank*.sqlite are read one after another (no rank-file caches), and a second
// prepare still finds the folder prepared instead of reading it again forever.
TEST(TraceScale, PrepareWritesRankFileCachesOnlyWhereTheLoaderReadsThem) {
  ut::TempDir tmp;
  const std::string run = make_run(tmp.path, 3, 2);
  const prof::PreparedCaches p = prof::prepare_trace_caches(run, 0);
  EXPECT_TRUE(p.loaded);
  EXPECT_EQ(p.rank_files, 3);
  EXPECT_EQ(p.rank_files_cached, 3);
  // The ranges it reports are those the summary (and the studio's status bar) counts.
  EXPECT_EQ(p.ranges, prof::analyze(prof::load_trace(run)).num_ranges);
  for (const auto& f : prof::find_rank_files(run)) EXPECT_TRUE(fs::exists(prof::rank_file_cache_path(f))) << f;
  EXPECT_FALSE(prof::prepare_trace_caches(run, 0).loaded);
  fs::remove(prof::rank_file_cache_path(prof::find_rank_files(run)[1]));
  const prof::PreparedCaches again = prof::prepare_trace_caches(run, 0);
  EXPECT_TRUE(again.loaded);  // the summary and overview were there; one rank file's cache was not
  EXPECT_EQ(again.rank_files_cached, 3);

  const std::string nsys = tmp.path + "/nsys";
  fs::create_directories(nsys + "/trace");
  for (int r = 0; r < 2; ++r) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((nsys + "/trace/rank" + std::to_string(r) + ".sqlite").c_str(), &db), SQLITE_OK);
    const std::string sql =
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT, "
        "globalTid INTEGER, textId INTEGER);"
        "INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (0, 1000, 59, 'step', " +
        std::to_string(4242 + r) + " * 16777216 + 7);";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  const prof::PreparedCaches n = prof::prepare_trace_caches(nsys, 0);
  EXPECT_TRUE(n.loaded);
  EXPECT_EQ(n.rank_files, 0);
  EXPECT_TRUE(n.summary_cached && n.overview_cached);
  EXPECT_FALSE(prof::prepare_trace_caches(nsys, 0).loaded);
}
