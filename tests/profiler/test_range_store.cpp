// RangeStore: sealing rows into columns gives back every range and extra record exactly
// (edge cases of each column's escape: long and negative lengths, starts that span more than
// 2^32 ns in a block, far and odd parents, big and odd steps, GPU ids), on one thread and on
// several; a loaded model is sealed, equal to the unsealed load, and stays sealed through the
// analysis; and what it saves, measured.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <random>

#include "common/model_compare.hpp"
#include "testdata/rank_files.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/range_store.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

bool same_range(const prof::TraceRange& x, const prof::TraceRange& y) {
  return std::tie(x.start_ns, x.end_ns, x.rank, x.lane, x.name_id, x.step, x.parent, x.origin, x.extra, x.layer,
                  x.head_begin, x.head_end, x.chunk, x.phase, x.dir, x.depth, x.is_kernel) ==
         std::tie(y.start_ns, y.end_ns, y.rank, y.lane, y.name_id, y.step, y.parent, y.origin, y.extra, y.layer,
                  y.head_begin, y.head_end, y.chunk, y.phase, y.dir, y.depth, y.is_kernel);
}

bool same_extra(const prof::RangeExtra& x, const prof::RangeExtra& y) {
  return std::tie(x.bytes_sent, x.bytes_recv, x.external_id, x.correlation, x.pg, x.seq) ==
         std::tie(y.bytes_sent, y.bytes_recv, y.external_id, y.correlation, y.pg, y.seq);
}

// n ranges in lanes of 1000, like a loader's (sorted starts, nesting parents, a few attribute
// combinations), with every escape of every column sprinkled in.
prof::RangeStore hostile_store(size_t n, std::vector<prof::TraceRange>* rows, std::vector<prof::RangeExtra>* extras) {
  std::mt19937_64 rng(7);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  prof::RangeStore s;
  int64_t t = -5'000'000'000;  // negative times too
  for (size_t i = 0; i < n; ++i) {
    prof::TraceRange r;
    if (i % 1000 == 0) t = -5'000'000'000 + static_cast<int64_t>(rng() % 1000);  // a new lane starts over
    t += static_cast<int64_t>(rng() % 5000);
    r.start_ns = t;
    r.end_ns = t + static_cast<int64_t>(rng() % 100000);
    r.lane = static_cast<int32_t>(i / 1000);
    r.rank = r.lane / 4;
    r.name_id = static_cast<int32_t>(rng() % 12);
    r.layer = static_cast<int16_t>(rng() % 3) - 1;
    r.head_begin = static_cast<int16_t>(rng() % 2 ? -1 : 4);
    r.head_end = static_cast<int16_t>(r.head_begin < 0 ? -1 : 8);
    r.chunk = static_cast<int16_t>(rng() % 2) - 1;
    r.phase = static_cast<prof::Phase>(rng() % 5);
    r.dir = static_cast<prof::Direction>(rng() % 3);
    r.depth = static_cast<uint8_t>(rng() % 4);
    r.is_kernel = rng() % 9 == 0;
    r.step = static_cast<int32_t>(i / 5000);
    r.parent =
        i % 1000 == 0 || rng() % 3 == 0 ? -1 : static_cast<int32_t>(i - 1 - rng() % std::min<size_t>(i % 1000, 20));
    if (rng() % 4 == 0) r.origin = static_cast<int32_t>(rng() % n);
    if (rng() % 3 == 0) {
      prof::RangeExtra x;
      x.bytes_sent = static_cast<int64_t>(rng() % 4) * 4096;
      x.bytes_recv = x.bytes_sent + (rng() % 5 == 0 ? 8 : 0);
      x.pg = static_cast<int32_t>(rng() % 3) - 1;
      x.seq = static_cast<int32_t>(i);
      if (rng() % 6 == 0) x.external_id = static_cast<int64_t>(rng() % 100000) + 1, x.correlation = 7;
      r.extra = static_cast<int32_t>(s.extras().size());
      s.extras().push_back(x);
    }
    switch (i % 9973) {  // the escapes
      case 11:
        r.end_ns = r.start_ns + (int64_t{1} << 33);
        break;  // 8.6 s: a long length
      case 12:
        r.end_ns = r.start_ns - 5;
        break;  // negative length
      case 13:
        r.start_ns = kMin + 3, r.end_ns = kMax;
        break;  // wraps around (a wide block)
      case 14:
        r.parent = static_cast<int32_t>(i > 70000 ? i - 70000 : 0);
        break;  // far
      case 15:
        r.parent = static_cast<int32_t>(i + 3);
        break;  // after it
      case 16:
        r.parent = -9;
        break;  // odd
      case 17:
        r.step = 70000;
        break;
      case 18:
        r.step = -4;
        break;
      case 19:
        r.origin = -7, r.extra = -1;
        break;
      case 20:
        r.start_ns = t + (int64_t{1} << 40), r.end_ns = r.start_ns + 1;
        break;  // far out in its block
      default:
        break;
    }
    rows->push_back(r);
    s.push_back(r);
  }
  *extras = s.extras();
  return s;
}

void expect_same_store(const prof::RangeStore& s, const std::vector<prof::TraceRange>& rows,
                       const std::vector<prof::RangeExtra>& extras) {
  ASSERT_EQ(s.size(), rows.size());
  ASSERT_EQ(s.extras_size(), extras.size());
  size_t bad = 0;
  for (size_t i = 0; i < rows.size() && bad < 5; ++i)
    if (!same_range(s[i], rows[i])) {
      ++bad;
      ADD_FAILURE() << "range " << i << ": start " << s[i].start_ns << " vs " << rows[i].start_ns << ", end "
                    << s[i].end_ns << " vs " << rows[i].end_ns << ", parent " << s[i].parent << " vs " << rows[i].parent
                    << ", step " << s[i].step << " vs " << rows[i].step;
    }
  for (size_t e = 0; e < extras.size() && bad < 10; ++e)
    if (!same_extra(s.extra(static_cast<int32_t>(e)), extras[e])) ++bad, ADD_FAILURE() << "extra " << e;
  // The iterators give the same ranges as operator[].
  size_t k = 0;
  for (const prof::TraceRange& r : s) bad += !same_range(r, rows[k++]);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(k, rows.size());
}

}  // namespace

TEST(RangeStore, SealGivesBackEveryRangeAndExtraExactlyWhateverTheirValues) {
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::vector<prof::TraceRange> rows;
    std::vector<prof::RangeExtra> extras;
    prof::RangeStore s = hostile_store(230000, &rows, &extras);  // several parts of whole blocks
    const size_t row_bytes = s.heap_bytes();
    s.seal(threads);
    ASSERT_TRUE(s.sealed());
    expect_same_store(s, rows, extras);
    EXPECT_LT(s.heap_bytes(), row_bytes) << "sealed: " << s.heap_bytes() << " B, rows: " << row_bytes << " B";
    // A copy is sealed too, and equal.
    const prof::RangeStore copy = s;
    EXPECT_TRUE(copy.sealed());
    expect_same_store(copy, rows, extras);
    // Changing it turns it back into the same rows, counted.
    const uint64_t unseals = prof::RangeStore::unseal_count();
    s.row(5).step = 77;
    EXPECT_FALSE(s.sealed());
    EXPECT_EQ(prof::RangeStore::unseal_count(), unseals + 1);
    rows[5].step = 77;
    expect_same_store(s, rows, extras);
    EXPECT_TRUE(same_extra(s.extras().at(3), extras.at(3)));
  }
}

TEST(RangeStore, SmallAndEmptyStoresSeal) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{256}, size_t{257}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<prof::TraceRange> rows;
    std::vector<prof::RangeExtra> extras;
    prof::RangeStore s = hostile_store(n, &rows, &extras);
    s.seal(2);
    EXPECT_TRUE(s.sealed());
    expect_same_store(s, rows, extras);
    EXPECT_EQ(s.empty(), n == 0);
  }
}

// A run loaded as the studio loads it is sealed, equal to the same load left as rows, and the
// analysis and its report read it without turning it back into rows. Also prints what sealing
// saves on it.
TEST(RangeStore, ALoadedRunIsSealedEqualAndStaysSealedThroughTheAnalysis) {
  ut::TempDir tmp;
  const fs::path run = fs::path(tmp.path) / "run";
  fs::create_directories(run / "trace");
  for (int r = 0; r < 4; ++r)
    ulysses::testdata::generate_rank((run / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string(), r, 4, 20000,
                                     4);
  prof::LoadOptions lo;
  lo.threads = 2;
  lo.file_caches = false;
  prof::LoadOptions rows_lo = lo;
  rows_lo.seal = false;
  const prof::TraceModel rows = prof::load_trace(run.string(), rows_lo);
  const uint64_t unseals = prof::RangeStore::unseal_count();
  const prof::TraceModel sealed = prof::load_trace(run.string(), lo);
  ASSERT_TRUE(sealed.ranges.sealed());
  ASSERT_FALSE(rows.ranges.sealed());
  ASSERT_GT(sealed.ranges.size(), 80000u);
  ulysses::test::expect_same_model(rows, sealed);
  const prof::Summary a = prof::analyze(rows), b = prof::analyze(sealed);
  nlohmann::json ja = prof::summary_to_json(rows, a), jb = prof::summary_to_json(sealed, b);
  EXPECT_EQ(ja.dump(), jb.dump());
  EXPECT_GT(b.waiting.instances.size(), 0u);
  EXPECT_TRUE(sealed.ranges.sealed());
  EXPECT_EQ(prof::RangeStore::unseal_count(), unseals) << "nothing above may turn the loaded ranges back into rows";
  const double n = static_cast<double>(sealed.ranges.size());
  std::printf("[ figures ] %zu ranges (with head-range copies): %.1f B/range as rows, %.1f B/range sealed\n",
              sealed.ranges.size(), static_cast<double>(rows.ranges.heap_bytes()) / n,
              static_cast<double>(sealed.ranges.heap_bytes()) / n);
  // The aim (docs/PERFORMANCE.md): 24 bytes per range (the columns: 16 B for every range, the rest for those
  // with an origin or an extra record).
  EXPECT_LE(static_cast<double>(sealed.ranges.heap_bytes()) / n, 24.0);
}
