// One clock: the ping-pong offset measurement (sync_clock) against clocks that really differ
// by a known constant, with its error bound; and the loader's alignment of a rank's times
// with the stored offsets (ULYSSES_CLOCK), drift interpolation included.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "test_util.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

using namespace ut;
using prof::Phase;

namespace {
class MemStore final : public prof::ClockStore {
 public:
  void set(const std::string& k, const std::string& v) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      kv_[k] = v;
    }
    cv_.notify_all();
  }
  std::string get(const std::string& k) override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return kv_.count(k) > 0; });
    return kv_[k];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};
}  // namespace

TEST(ClockSync, MeasuresAnInjectedOffsetWithinItsErrorBound) {
  // Rank r's clock = the real clock + offset[r]; the measured offset to rank 0 must lie
  // within the reported error of the true one (offset[r] - offset[0]).
  const int64_t offset[3] = {-1000000, 5000000000LL, -250000000LL};
  MemStore store;
  prof::ClockOffset got[3];
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      got[r] = prof::sync_clock(store, r, 3, 8, "t", [&, r] { return prof::Tracer::now_ns() + offset[r]; });
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(got[0].offset_ns, 0);
  for (int r = 1; r < 3; ++r) {
    const int64_t truth = offset[r] - offset[0];
    EXPECT_LE(std::llabs(got[r].offset_ns - truth), got[r].error_ns)
        << "rank " << r << ": measured " << got[r].offset_ns << " true " << truth << " error bound " << got[r].error_ns;
    EXPECT_GT(got[r].error_ns, 0);
    EXPECT_LT(got[r].error_ns, 50000000) << "a round trip through an in-memory store takes far less than 100 ms";
    EXPECT_EQ(got[r].rounds, 8);
    EXPECT_EQ(got[r].error_ns, (got[r].rtt_ns + 1) / 2);
  }
}

namespace {
// Rank 1's clock rows: `off` ahead of rank 0 at local time base + off (error 40 ns), `off + drift`
// 2 ms later (error 70 ns).
void write_rank1_clock(prof::TraceWriter& w, int64_t base, int64_t off, int64_t drift) {
  prof::ClockOffset c;
  c.offset_ns = off;
  c.error_ns = 40;
  c.measured_at_ns = base + off;
  w.write_clock("start", c);
  c.offset_ns = off + drift;
  c.error_ns = 70;
  c.measured_at_ns = base + 2000000 + off + drift;
  w.write_clock("close", c);
}

// Rank 1's file: its clock runs `off` ns ahead of rank 0's (with `drift` more at close).
// Each rank records one range at real times [1000, 2000) + k*1e6 relative to a base.
void write_rank(const std::string& run, int rank, int64_t base, int64_t off, int64_t drift, bool with_clock) {
  auto o = options_for((fs::path(run) / "trace" / ("rank" + std::to_string(rank) + ".sqlite")).string(), rank, 2);
  prof::TraceWriter w(o, 1000 + rank);
  w.begin();
  for (int k = 0; k < 3; ++k) {
    prof::RangeRecord r;
    r.tid = 1;
    r.step = 0;
    r.info.phase = Phase::Attention;
    // the clock drifts linearly from `off` at base to `off + drift` at base + 2e6
    const int64_t real = base + 1000 + k * 1000000;
    const int64_t o_t = rank == 1 ? off + drift * (k * 1000000) / 2000000 : 0;
    r.start_ns = real + o_t;
    r.end_ns = real + 1000 + o_t;
    w.write_range(r);
  }
  if (with_clock && rank == 1) write_rank1_clock(w, base, off, drift);
  w.commit();
  w.close();
}
}  // namespace

TEST(ClockAlign, LoaderShiftsRanksOntoRankZerosClockWithDrift) {
  TempDir d;
  fs::create_directories(fs::path(d.path) / "trace");
  const int64_t base = 10000000000LL, off = 3000000000LL, drift = 2000;
  for (int r = 0; r < 2; ++r) write_rank(d.path, r, base, off, drift, true);
  auto starts = [](const prof::TraceModel& m, int rank) {
    std::vector<int64_t> v;
    for (const auto& r : m.ranges)
      if (r.rank == rank && m.lanes[static_cast<size_t>(r.lane)].kind != prof::LaneKind::HeadRange)
        v.push_back(r.start_ns);
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto aligned = prof::load_trace(d.path);
  const auto a0 = starts(aligned, 0), a1 = starts(aligned, 1);
  ASSERT_EQ(a0.size(), 3u);
  ASSERT_EQ(a1.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(double(a1[k]), double(a0[k]), 2.0) << "range " << k;
  EXPECT_EQ(aligned.clock_error_ns(), 70);
  prof::LoadOptions raw;
  raw.align_clocks = false;
  const auto r = prof::load_trace(d.path, raw);
  const auto r0 = starts(r, 0), r1 = starts(r, 1);
  EXPECT_EQ(r1[0] - r0[0], off);
  EXPECT_EQ(r1[2] - r0[2], off + drift);
  EXPECT_EQ(r.clock_error_ns(), -1);
}

// With drift, one offset per range (its start's) would move a child's end past its parent's
// end: in a plain 2-rank run the optimizer ranges would leave their step's lane for a "main #2".
// Each time is moved by the offset at that time, which keeps nesting.
TEST(ClockAlign, DriftKeepsNestedRangesNested) {
  TempDir d;
  fs::create_directories(fs::path(d.path) / "trace");
  const int64_t base = 10000000000LL, off = 3000000000LL, drift = 5000;  // 2500 ppm over 2 ms
  for (int rank = 0; rank < 2; ++rank) {
    auto o = options_for((fs::path(d.path) / "trace" / ("rank" + std::to_string(rank) + ".sqlite")).string(), rank, 2);
    prof::TraceWriter w(o, 1000 + rank);
    w.begin();
    const int64_t shift = rank == 1 ? off : 0;
    for (const auto& [a, z] : {std::pair<int64_t, int64_t>{0, 1000000}, {900000, 1000000 - 400}}) {
      prof::RangeRecord r;
      r.tid = 1;
      r.step = 0;
      r.info.phase = a == 0 ? Phase::Step : Phase::Optimizer;
      r.start_ns = base + a + shift;
      r.end_ns = base + z + shift;
      w.write_range(r);
    }
    if (rank == 1) write_rank1_clock(w, base, off, drift);
    w.commit();
    w.close();
  }
  const auto m = prof::load_trace(d.path);
  int host_lanes = 0;
  for (const auto& l : m.lanes) host_lanes += l.rank == 1 && l.kind == prof::LaneKind::HostThread;
  EXPECT_EQ(host_lanes, 1) << "the optimizer range left its step's lane";
  for (const auto& r : m.ranges) {
    if (r.rank == 1 && r.phase == Phase::Optimizer) {
      EXPECT_EQ(r.depth, 1);
    }
  }
}

// Offsets no clock has (INT64_MAX, text, a drift of 9e18 ns over the run) would overflow every
// shifted time ("median arrival skew -9223372036853 ms") or read as a perfect 0 +- 0; the
// measurement is left out with a note and the rank stays on its own clock.
TEST(ClockAlign, OffsetsNoClockHasAreLeftOutWithANote) {
  const std::vector<std::string> damage = {
      "UPDATE ULYSSES_CLOCK SET offsetNs = 9223372036854775807",
      "UPDATE ULYSSES_CLOCK SET offsetNs = 'abc', errorNs = 'x'",
      "UPDATE ULYSSES_CLOCK SET offsetNs = 100000777 WHERE kind = 'close'",  // 0.1 s of drift over 2 ms
  };
  for (const auto& sql : damage) {
    TempDir d;
    fs::create_directories(fs::path(d.path) / "trace");
    for (int r = 0; r < 2; ++r) write_rank(d.path, r, 5000000, 777, 0, true);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((fs::path(d.path) / "trace" / "rank1.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
    sqlite3_close(db);
    prof::LoadOptions lo;
    lo.file_caches = false;
    const auto m = prof::load_trace(d.path, lo);
    std::string notes;
    for (const auto& n : m.notes) notes += n + "\n";
    EXPECT_NE(notes.find("rank 1's clock offset"), std::string::npos) << sql << "\n" << notes;
    for (const auto& rg : m.ranges) {
      EXPECT_GT(rg.start_ns, 0) << sql;
      EXPECT_LT(rg.start_ns, int64_t{1} << 40) << sql;
    }
    if (sql.find("close") == std::string::npos) {  // both measurements out: rank 1 as recorded
      EXPECT_NE(notes.find("rank 1 is left on its own clock"), std::string::npos) << notes;
      EXPECT_EQ(m.clock_error_ns(), -1) << sql;
    } else {  // the drift: the start offset alone
      EXPECT_NE(notes.find("ppm between start and close"), std::string::npos) << notes;
      EXPECT_EQ(m.clock_error_ns(), 40);
      int64_t min1 = INT64_MAX;
      for (const auto& rg : m.ranges)
        if (rg.rank == 1) min1 = std::min(min1, rg.start_ns);
      EXPECT_EQ(min1, 5000000 + 1000);  // rank 1 recorded at +777, moved back by the start offset
    }
  }
}

TEST(ClockAlign, TracesWithoutClockRowsStayAsRecorded) {
  TempDir d;
  fs::create_directories(fs::path(d.path) / "trace");
  for (int r = 0; r < 2; ++r) write_rank(d.path, r, 5000000, 777, 0, false);
  const auto m = prof::load_trace(d.path);
  EXPECT_EQ(m.clock_error_ns(), -1);
  int64_t min1 = INT64_MAX;
  for (const auto& rg : m.ranges)
    if (rg.rank == 1) min1 = std::min(min1, rg.start_ns);
  EXPECT_EQ(min1, 5000000 + 1000 + 777);
}
