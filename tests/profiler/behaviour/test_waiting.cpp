// Waiting analysis on a hand-built three-rank trace whose answers are computed by hand in
// the comments (arrival skew, last arriver, wait caused / suffered, the rank that set each
// step's end), the `collectives` JSON of `ulysses-trace summary --json`, and the collective
// identity (pgId, seq) through the writer and loader, old (format 2) files included.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "profiler/test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;
using prof::Direction;
using prof::LaneKind;
using prof::Phase;

namespace {
SpecRange C(int64_t s, int64_t e, Phase p, int32_t pg, int32_t seq, int32_t step) {
  SpecRange r = R(s, e, p, step);
  r.pg = pg;
  r.seq = seq;
  return r;
}

// Ranks 0..2; SP group pg 1 and the world group pg 0. Arrival = range start.
//   A pg1 seq0 step0: r0 100, r1 160, r2 130 -> last r1, skew 60; waits r0 60, r1 0, r2 30 (r1 caused 90)
//   B pg1 seq1 step0: r0 300, r1 310, r2 350 -> last r2, skew 50; waits r0 50, r1 40, r2 0 (r2 caused 90)
//   C pg0 seq0 step0: r0 500, r1 505, r2 500 -> last r1, skew 5;  waits r0 5, r1 0, r2 5   (r1 caused 10)
//   D pg1 seq2 step1: all 1100            -> tie: last r0 (lowest), skew 0
//   pg1 seq3 on r0, r1 only               -> incomplete, skipped
// Totals: suffered r0 115, r1 40, r2 35; caused r0 0, r1 100, r2 90 (both sum to 190);
// last arrivals r0 1, r1 2, r2 1; skews {0, 5, 50, 60}: upper median 50.
// Step ends: step 0 by C's last arriver r1, step 1 by D's r0, step 2 (no collective) by the
// rank whose step ended last: r1 (2100).
prof::TraceModel three_ranks() {
  const int64_t a[3] = {100, 160, 130}, b[3] = {300, 310, 350}, c[3] = {500, 505, 500};
  std::vector<LaneSpec> lanes;
  for (int32_t r = 0; r < 3; ++r) {
    lanes.push_back(
        {r,
         LaneKind::HostThread,
         "main",
         {R(0, 1000, Phase::Step, 0), C(c[r], 600, Phase::GradAllReduce, 0, 0, 0), R(1000, 2000, Phase::Step, 1)}});
    // A second range of A on rank 2, met before its comm lane's but starting later: the
    // earliest stands for the rank, so A's arrivals stay as above.
    if (r == 2) lanes.back().ranges.insert(lanes.back().ranges.begin() + 1, C(140, 150, Phase::A2ASeqToHead, 1, 0, 0));
    std::vector<SpecRange> comm = {C(a[r], 200, Phase::A2ASeqToHead, 1, 0, 0),
                                   C(b[r], 400, Phase::A2AHeadToSeq, 1, 1, 0),
                                   R(450, 460, Phase::A2ASeqToHead, 0),  // no identity: not paired
                                   C(1100, 1200, Phase::A2ASeqToHead, 1, 2, 1)};
    if (r < 2) comm.insert(comm.begin() + 3, C(470, 480, Phase::A2ASeqToHead, 1, 3, 0));
    lanes.push_back({r, LaneKind::Comm, "comm", comm});
    // A display copy (head lane) with an earlier start must not count.
    if (r == 0) lanes.push_back({r, LaneKind::HeadRange, "heads 0-1", {C(10, 200, Phase::A2ASeqToHead, 1, 0, 0)}});
  }
  auto m = make_model(lanes);
  for (int32_t r = 0; r < 3; ++r) {
    prof::RankInfo ri;
    ri.rank = r;
    m.ranks.push_back(ri);
    add_step(m, r, 0, 0, 1000);
    add_step(m, r, 1, 1000, 2000);
  }
  add_step(m, 0, 2, 2000, 2000 + 1000);
  add_step(m, 1, 2, 2000, 2000 + 1100);
  add_step(m, 2, 2, 2000, 2000 + 1050);
  return m;
}
}  // namespace

TEST(Waiting, HandComputedArrivalsSkewAndWaits) {
  const auto m = three_ranks();
  const prof::WaitingAnalysis w = prof::waiting_analysis(m);
  ASSERT_EQ(w.instances.size(), 4u);
  EXPECT_EQ(w.incomplete, 1);
  EXPECT_EQ(w.repeated, 1);  // rank 2's second range of A
  // Sorted by first arrival: A (100), B (300), C (500), D (1100).
  const int32_t last[4] = {1, 2, 1, 0};
  const int64_t skew[4] = {60, 50, 5, 0};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(w.instances[i].last_arriver, last[i]) << "instance " << i;
    EXPECT_EQ(w.instances[i].skew_ns, skew[i]) << "instance " << i;
    EXPECT_EQ(w.instances[i].arrivals.size(), 3u);
  }
  EXPECT_EQ(w.instances[2].pg, 0);
  EXPECT_EQ(w.instances[2].phase, Phase::GradAllReduce);
  EXPECT_EQ(w.instances[0].first_arrival_ns, 100);  // the head-lane copy at 10 is ignored
  EXPECT_DOUBLE_EQ(w.median_skew_ns, 50.0);
  ASSERT_EQ(w.ranks.size(), 3u);
  const int64_t suffered[3] = {115, 40, 35}, caused[3] = {0, 100, 90}, lasts[3] = {1, 2, 1};
  int64_t sum_s = 0, sum_c = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(w.ranks[r].rank, r);
    EXPECT_EQ(w.ranks[r].collectives, 4);
    EXPECT_EQ(w.ranks[r].wait_suffered_ns, suffered[r]) << "rank " << r;
    EXPECT_EQ(w.ranks[r].wait_caused_ns, caused[r]) << "rank " << r;
    EXPECT_EQ(w.ranks[r].last_arrivals, lasts[r]) << "rank " << r;
    sum_s += w.ranks[r].wait_suffered_ns;
    sum_c += w.ranks[r].wait_caused_ns;
  }
  EXPECT_EQ(sum_s, sum_c);
  ASSERT_EQ(w.steps.size(), 3u);
  EXPECT_EQ(w.steps[0].rank, 1);
  EXPECT_TRUE(w.steps[0].from_collective);
  EXPECT_EQ(w.steps[0].skew_ns, 5);
  EXPECT_EQ(w.steps[1].rank, 0);
  EXPECT_EQ(w.steps[2].rank, 1);
  EXPECT_FALSE(w.steps[2].from_collective);
}

// The HTML report's "Stragglers" section is the waiting analysis, which names the ranks that
// waited longest (not the phase-duration table under that heading): the hand-computed rows above.
TEST(Waiting, HtmlReportHasTheStragglerTable) {
  const auto m = three_ranks();
  const std::string html = prof::summary_to_html(m, prof::analyze(m), "t");
  EXPECT_NE(html.find("<h2>Stragglers: who waits for whom</h2>"), std::string::npos);
  EXPECT_NE(html.find("4 collectives paired across ranks"), std::string::npos);
  EXPECT_NE(html.find("median arrival skew 0.000 ms"), std::string::npos);  // 50 ns
  // rank, collectives, last arrivals, wait caused ms, wait suffered ms (ns / 1e6)
  EXPECT_NE(html.find("<tr><td>0</td><td>4</td><td>1</td><td>0.000</td><td>0.000</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>1</td><td>4</td><td>2</td><td>0.000</td><td>0.000</td></tr>"), std::string::npos);
  EXPECT_EQ(html.find("<h2>Stragglers: slowest and fastest"), std::string::npos);
}

TEST(Waiting, StepWindowRestrictsInstances) {
  prof::AnalysisOptions o;
  o.step_begin = 1;
  const prof::WaitingAnalysis w = prof::waiting_analysis(three_ranks(), o);
  ASSERT_EQ(w.instances.size(), 1u);  // D only
  EXPECT_EQ(w.instances[0].seq, 2);
  EXPECT_EQ(w.ranks[0].last_arrivals, 1);
  EXPECT_EQ(w.ranks[1].wait_suffered_ns, 0);
}

TEST(Waiting, SummaryJsonHasExactlyTheCollectivesFields) {
  const auto m = three_ranks();
  const auto j = prof::summary_to_json(m, prof::analyze(m));
  ASSERT_TRUE(j.contains("collectives"));
  const auto& c = j["collectives"];
  EXPECT_EQ(c.size(), 5u);
  EXPECT_EQ(c["count"], 4);
  EXPECT_NEAR(c["median_skew_ms"].get<double>(), 50e-6, 1e-12);
  EXPECT_EQ(c["last_arriver"], (nlohmann::json{{"0", 1}, {"1", 2}, {"2", 1}}));
  EXPECT_NEAR(c["wait_caused_ms"]["1"].get<double>(), 100e-6, 1e-12);
  EXPECT_NEAR(c["wait_suffered_ms"]["0"].get<double>(), 115e-6, 1e-12);
  EXPECT_NEAR(c["wait_suffered_ms"]["2"].get<double>(), 35e-6, 1e-12);
  const std::string text = prof::summary_to_text(m, prof::analyze(m));
  EXPECT_NE(text.find("Stragglers: 4 collectives"), std::string::npos) << text;
  EXPECT_NE(text.find("s2:r1*"), std::string::npos) << text;
  // What was left out is said, in the text and in the JSON's notes (the collectives object keeps
  // exactly its fields).
  const std::string note =
      "collective ids left out of the straggler table: 1 seen on only some ranks of their group, 1 ranges "
      "repeating an id on one rank (only the earliest counted)";
  EXPECT_NE(text.find("Note: " + note), std::string::npos) << text;
  ASSERT_TRUE(j["notes"].is_array());
  EXPECT_NE(std::find(j["notes"].begin(), j["notes"].end(), note), j["notes"].end()) << j["notes"].dump();
}

namespace {
// Two rank files whose comm ranges carry (pg 1, seq k); rank 1 arrives 7 us late each time.
void write_pair(const std::string& run, int format = 0) {
  fs::create_directories(fs::path(run) / "trace");
  const int64_t base = prof::Tracer::now_ns();
  for (int r = 0; r < 2; ++r) {
    auto o = options_for((fs::path(run) / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string(), r, 2);
    o.trace_format = format;
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    for (int k = 0; k < 3; ++k) {
      prof::RangeInfo info{Phase::A2ASeqToHead, Direction::Forward, 0};
      info.pg = 1;
      info.seq = k;
      const int64_t s = base + k * 100000 + (r == 1 ? 7000 : 0);
      t->record_range(info, s, base + k * 100000 + 50000, prof::Tracer::kCommLane);
    }
    t->end_step(prof::StepRecord{});
    t->close();
  }
}
}  // namespace

TEST(Waiting, IdentitySurvivesWriterAndLoader) {
  TempDir d;
  write_pair(d.path);
  const auto m = prof::load_trace(d.path);
  int with_id = 0;
  for (const auto& r : m.ranges)
    if (r.phase == Phase::A2ASeqToHead && r.lane >= 0 && m.lanes[static_cast<size_t>(r.lane)].kind == LaneKind::Comm) {
      EXPECT_EQ(m.extra(r).pg, 1);
      EXPECT_GE(m.extra(r).seq, 0);
      ++with_id;
    }
  EXPECT_EQ(with_id, 6);
  const auto w = prof::waiting_analysis(m);
  ASSERT_EQ(w.instances.size(), 3u);
  for (const auto& ci : w.instances) {
    EXPECT_EQ(ci.last_arriver, 1);
    EXPECT_EQ(ci.skew_ns, 7000);
  }
  EXPECT_EQ(w.ranks[0].wait_suffered_ns, 21000);
  EXPECT_EQ(w.ranks[1].wait_caused_ns, 21000);
}

// One rank's file of a two-rank run opened alone: no collective pairs, and the summary says why
// there is no straggler table instead of leaving it out without a word.
TEST(Waiting, OneRankOfARunOpenedAloneIsSaidNotSilent) {
  TempDir d;
  write_pair(d.path);
  const auto m = prof::load_trace((fs::path(d.path) / "trace" / "rank0.sqlite").string());
  const auto s = prof::analyze(m);
  EXPECT_TRUE(s.waiting.instances.empty());
  EXPECT_EQ(s.waiting.incomplete, 3);
  const std::string text = prof::summary_to_text(m, s);
  EXPECT_EQ(text.find("Stragglers:"), std::string::npos) << text;
  EXPECT_NE(text.find("Note: collective ids left out of the straggler table: 3 seen on only some ranks"),
            std::string::npos)
      << text;
}

TEST(Waiting, FormatTwoFilesStillLoadWithoutIdentity) {
  TempDir d;
  write_pair(d.path, 3);
  for (int r = 0; r < 2; ++r) {  // turn the files into format 2: no pgId / seq columns
    sqlite3* db = nullptr;
    const std::string f = (fs::path(d.path) / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string();
    ASSERT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db,
                           "ALTER TABLE ULYSSES_RANGES DROP COLUMN seq; ALTER TABLE ULYSSES_RANGES DROP COLUMN pgId; "
                           "PRAGMA user_version = 2;",
                           nullptr, nullptr, &err),
              SQLITE_OK)
        << (err ? err : "");
    sqlite3_close(db);
  }
  const auto m = prof::load_trace(d.path);
  int comm = 0;
  for (const auto& r : m.ranges) {
    EXPECT_EQ(m.extra(r).pg, -1);
    EXPECT_EQ(m.extra(r).seq, -1);
    comm += r.phase == Phase::A2ASeqToHead;
  }
  EXPECT_GE(comm, 6);
  EXPECT_TRUE(prof::waiting_analysis(m).instances.empty());
}
