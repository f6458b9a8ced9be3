// Item models of the trace views: QAbstractItemModelTester on each table, and the numbers
// they carry (head ownership, per-head-range times, kernels of a range, comparison deltas).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <QAbstractItemModelTester>
#include <QTemporaryDir>
#include <cmath>
#include <map>
#include <set>

#include "profiler/fake_gpu.hpp"

#include "trace/phase_style.hpp"
#include "testdata/synthetic_trace.hpp"
#include "trace/timeline_index.hpp"
#include "trace/trace_models.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ulysses::ui;
using namespace ulysses::testdata;
namespace prof = ulysses::prof;

namespace {
std::shared_ptr<prof::TraceModel> small_gpu_trace(uint64_t seed = 1) {
  SyntheticOptions o;
  o.ranks = 4;
  o.heads = 16;
  o.layers = 3;
  o.head_chunks = 2;
  o.steps = 2;
  o.seed = seed;
  return make_synthetic_trace(o);
}
void check_model(TableData t, int min_rows) {
  TableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  model.setTable(std::move(t));
  EXPECT_GE(model.rowCount(), min_rows);
  for (int r = 0; r < model.rowCount(); ++r)
    for (int c = 0; c < model.columnCount(); ++c) EXPECT_TRUE(model.data(model.index(r, c)).isValid()) << r << "," << c;
  model.setTable({});  // reset to empty
  EXPECT_EQ(model.rowCount(), 0);
}
}  // namespace

TEST(TraceModels, EveryReportTablePassesModelTester) {
  auto m = small_gpu_trace();
  const prof::Summary s = prof::analyze(*m);
  check_model(rank_totals_table(s), 4);
  check_model(step_table(s), 8);
  check_model(layer_table_data(s), 6);  // 3 layers x 2 directions
  check_model(head_range_table_data(s), 8);
  check_model(skew_table(s), 1);
  check_model(straggler_table(s), 4);  // the synthetic all-to-alls carry (pg, seq)
  check_model(memory_phase_table(s), 1);
  check_model(names_table(s), 1);
  {
    const auto m2 = small_gpu_trace(2);
    check_model(compare_table(prof::compare_summaries(*m, s, *m2, prof::analyze(*m2))), 4);
  }
  check_model(head_map_table(head_map_rows(*m)), 8);
  auto ix = TimelineIndex::build(m);
  check_model(steps_table(*m, ix->steps()), 2);
  check_model(search_table(*m, "attention", 50), 50);
  check_model(range_details_table(*m, 0), 5);
}

TEST(TraceModels, TableModelSortAndKeyRoles) {
  TableData t;
  t.headers = {"name", "ms"};
  t.add({"a", "2.000"}, {"a", 2.0}, 7);
  t.add({"b", "10.000"}, {"b", 10.0}, 9);
  TableModel model;
  model.setTable(t);
  EXPECT_EQ(model.data(model.index(1, 1), TableModel::SortRole).toDouble(), 10.0);
  EXPECT_EQ(model.data(model.index(1, 1)).toString(), QString("10.000"));
  EXPECT_EQ(model.data(model.index(0, 0), TableModel::KeyRole).toLongLong(), 7);
  EXPECT_EQ(model.rowOfKey(9), 1);
  EXPECT_EQ(model.rowOfKey(3), -1);
  EXPECT_EQ(model.headerData(1, Qt::Horizontal).toString(), QString("ms"));
}

TEST(TraceModels, HeadMapOwnershipFollowsUlyssesSplit) {
  auto m = small_gpu_trace();
  const auto rows = head_map_rows(*m);
  const int H = 16, P = 4;
  std::map<std::pair<int, int>, int64_t> att;  // brute force from head lanes
  for (const auto& l : m->lanes) {
    if (l.kind != prof::LaneKind::HeadRange) continue;
    for (int64_t i = l.first; i < l.first + l.count; ++i) {
      const auto& r = m->ranges[size_t(i)];
      if (r.phase == prof::Phase::Attention) att[{r.rank, r.head_begin}] += r.duration();
    }
  }
  ASSERT_EQ(rows.size(), att.size());
  for (const auto& row : rows) {
    EXPECT_EQ(row.owned_begin, row.sp_rank * H / P);
    EXPECT_EQ(row.owned_end, (row.sp_rank + 1) * H / P);
    EXPECT_TRUE(row.inside_owned);
    EXPECT_EQ(row.attention_ns, (att[{row.rank, row.head_begin}])) << row.rank << " " << row.head_begin;
    EXPECT_GT(row.a2a_seq_to_head_ns, 0);
  }
  // A head range measured outside the owned heads is flagged.
  auto bad = std::make_shared<prof::TraceModel>(*m);
  for (auto& r : bad->ranges.rows())
    if (r.rank == 0 && r.head_begin == 0) {
      r.head_begin = 8;
      r.head_end = 10;
    }
  bool flagged = false;
  for (const auto& row : head_map_rows(*bad)) flagged |= row.rank == 0 && row.head_begin == 8 && !row.inside_owned;
  EXPECT_TRUE(flagged);
}

TEST(TraceModels, KernelsOfAHostRange) {
  SyntheticOptions o;
  o.ranks = 2;
  o.heads = 8;
  o.layers = 2;
  o.head_chunks = 2;
  o.steps = 1;
  o.kernels_per_range = 3;
  auto m = make_synthetic_trace(o);
  int64_t att = -1;
  for (size_t i = 0; i < m->ranges.size(); ++i) {
    const auto& r = m->ranges[i];
    if (!r.is_kernel && r.phase == prof::Phase::Attention &&
        m->lanes[size_t(r.lane)].kind == prof::LaneKind::HostThread) {
      att = int64_t(i);
      break;
    }
  }
  ASSERT_GE(att, 0);
  const TableData k = range_kernels_table(*m, att);
  EXPECT_EQ(k.rows.size(), 3);
  for (qint64 key : k.keys) {
    EXPECT_TRUE(m->ranges[size_t(key)].is_kernel);
    EXPECT_EQ(m->ranges[size_t(key)].layer, m->ranges[size_t(att)].layer);
  }
  const TableData d = range_details_table(*m, att);
  bool has_heads = false;
  for (const auto& row : d.rows) has_heads |= row[0].toString() == "heads" && row[1].toString().contains('-');
  EXPECT_TRUE(has_heads);
}

// A GPU rank recorded through the Tracer with a fake CUPTI source: the panel lists the kernels
// each range launched (external correlation), not kernels matched by attributes and time.
TEST(TraceModels, KernelsOfARangeFollowCorrelation) {
  unsetenv("NSYS_PROFILING_SESSION_ID");
  unsetenv("CUDA_INJECTION64_PATH");
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const std::string path = tmp.path().toStdString() + "/rank0.sqlite";
  ut::FakeCupti* fake = nullptr;
  prof::TracerOptions o;
  o.path = path;
  o.device = "cuda:0";
  o.gpu_source = ut::fake_cupti_factory(&fake);
  {
    auto t = prof::Tracer::open(o);
    ASSERT_NE(fake, nullptr);
    t->begin_step(0);
    auto now = [] { return prof::Tracer::now_ns(); };
    {
      prof::ScopedRange st(t.get(), {prof::Phase::Step});
      {
        prof::ScopedRange a(t.get(), {prof::Phase::Attention, prof::Direction::Forward, 0, 0, 4, 0});
        fake->launch("flash_fwd_kernel", now() + 1000, now() + 9000, 7);
        fake->launch("flash_fwd_kernel_2", now() + 9000, now() + 12000, 7);
      }
      for (int i = 0; i < 2; ++i) {  // same attributes twice
        prof::ScopedRange n(t.get(), {prof::Phase::Norm, prof::Direction::Forward, 0});
        fake->launch("rms_norm_" + std::to_string(i), now() + 1000, now() + 2000, 7);
      }
      // All-to-all: its NCCL kernel starts before the comm range recorded for it.
      const prof::RangeInfo a2a{prof::Phase::A2AHeadToSeq, prof::Direction::Forward, 0, 0, 4, 0, 64, 64};
      const int64_t issued = now();
      {
        prof::ScopedCorrelation c(t.get(), a2a);
        fake->launch("ncclDevKernel_SendRecv", issued + 500, issued + 3000, 13);
      }
      t->record_range(a2a, issued + 2000, issued + 4000);
    }
    t->end_step(prof::StepRecord{0});
  }
  const auto m = prof::load_trace(path);
  auto find = [&](prof::Phase p, prof::LaneKind kind, int nth = 0) -> int64_t {
    for (size_t i = 0; i < m.ranges.size(); ++i)
      if (!m.ranges[i].is_kernel && m.ranges[i].phase == p && m.lanes[size_t(m.ranges[i].lane)].kind == kind &&
          nth-- == 0)
        return int64_t(i);
    return -1;
  };
  auto names = [&](int64_t range) {
    std::set<std::string> out;
    for (qint64 k : range_kernels_table(m, range).keys) out.insert(m.strings[size_t(m.ranges[size_t(k)].name_id)]);
    return out;
  };
  using S = std::set<std::string>;
  const int64_t att = find(prof::Phase::Attention, prof::LaneKind::HostThread);
  ASSERT_GE(att, 0);
  EXPECT_EQ(names(att), (S{"flash_fwd_kernel", "flash_fwd_kernel_2"}));
  EXPECT_EQ(names(find(prof::Phase::Norm, prof::LaneKind::HostThread, 0)), (S{"rms_norm_0"}));
  EXPECT_EQ(names(find(prof::Phase::Norm, prof::LaneKind::HostThread, 1)), (S{"rms_norm_1"}));
  EXPECT_EQ(names(find(prof::Phase::A2AHeadToSeq, prof::LaneKind::Comm)), (S{"ncclDevKernel_SendRecv"}));
  // A parent lists its children's kernels; a head-lane copy lists its original's.
  EXPECT_EQ(names(find(prof::Phase::Step, prof::LaneKind::HostThread)),
            (S{"flash_fwd_kernel", "flash_fwd_kernel_2", "rms_norm_0", "rms_norm_1"}));
  EXPECT_EQ(names(find(prof::Phase::Attention, prof::LaneKind::HeadRange)),
            (S{"flash_fwd_kernel", "flash_fwd_kernel_2"}));
  EXPECT_EQ(names(find(prof::Phase::A2AHeadToSeq, prof::LaneKind::HeadRange)), (S{"ncclDevKernel_SendRecv"}));
}

// The table shows the profiler's comparison row for row (labels and numbers as
// `ulysses-trace compare` prints them); an absent side is "-" and sorts as invalid.
TEST(TraceModels, CompareTableShowsTheProfilersComparison) {
  prof::CompareRow step;
  step.section = prof::CompareSection::Headline;
  step.key = "step_ns";
  step.unit = "ns";
  step.has_a = step.has_b = true;
  step.a = 2'000'000;
  step.b = 3'000'000;
  step.diff = 1'000'000;
  step.has_ratio = true;
  step.ratio = 1.5;
  step.flagged = true;
  prof::CompareRow only_a;
  only_a.section = prof::CompareSection::Phase;
  only_a.key = "attention forward";
  only_a.unit = "ns";
  only_a.has_a = true;
  only_a.a = 500'000;
  prof::Comparison c;
  c.rows = {step, only_a};
  const TableData t = compare_table(c);
  ASSERT_EQ(t.rows.size(), 2);
  EXPECT_EQ(t.headers, (QStringList{"metric", "run A", "run B", "B - A", "B / A"}));
  EXPECT_EQ(t.rows[0][0].toString(), QString("step ms"));
  EXPECT_EQ(t.rows[0][1].toString(), QString("2.000"));
  EXPECT_EQ(t.rows[0][2].toString(), QString("3.000"));
  EXPECT_EQ(t.rows[0][3].toString(), QString("1.000"));
  EXPECT_EQ(t.rows[0][4].toString(), QString("1.500 *"));  // flagged: off 1 by more than the threshold
  EXPECT_DOUBLE_EQ(t.sort[0][1].toDouble(), 2'000'000.0);  // sorts in ns
  EXPECT_DOUBLE_EQ(t.sort[0][3].toDouble(), 1'000'000.0);
  EXPECT_EQ(t.rows[1][0].toString(), QString("attention forward ms"));
  EXPECT_EQ(t.rows[1][1].toString(), QString("0.500"));
  EXPECT_EQ(t.rows[1][2].toString(), QString("-"));
  EXPECT_EQ(t.rows[1][3].toString(), QString("-"));
  EXPECT_EQ(t.rows[1][4].toString(), QString("-"));
  EXPECT_FALSE(t.sort[1][2].isValid());
  // B / A sorts by |ln B/A|, largest first; without a ratio -1 (last).
  EXPECT_DOUBLE_EQ(t.sort[0][4].toDouble(), std::log(1.5));
  EXPECT_DOUBLE_EQ(t.sort[1][4].toDouble(), -1.0);
  EXPECT_EQ(t.sort_column, 4);
  EXPECT_EQ(t.sort_order, Qt::DescendingOrder);
}

TEST(TraceModels, SearchFindsByNameAndPhase) {
  auto m = small_gpu_trace();
  int64_t total = 0;
  const TableData t = search_table(*m, "NCCL", 10, &total);
  int64_t want = 0;
  for (const auto& r : m->ranges) want += m->strings[size_t(r.name_id)].find("ncclDev") == 0;
  EXPECT_EQ(total, want);
  EXPECT_EQ(t.rows.size(), 10);
  for (int i = 1; i < t.rows.size(); ++i) EXPECT_LE(t.sort[i - 1][3].toLongLong(), t.sort[i][3].toLongLong());
}

TEST(PhaseStyle, AllToAllsAndAttentionAreDistinct) {
  const uint32_t a = phase_argb(prof::Phase::A2ASeqToHead), b = phase_argb(prof::Phase::A2AHeadToSeq),
                 c = phase_argb(prof::Phase::Attention);
  EXPECT_NE(a, c);
  EXPECT_NE(b, c);
  EXPECT_NE(a, b);
  EXPECT_NE(phase_argb(prof::Phase::Attention, prof::Direction::Backward), c);
  EXPECT_EQ(format_duration_ns(1'250'000), "1.25 ms");
  EXPECT_EQ(format_bytes(3 << 20), "3.00 MiB");
}

TEST(TraceModels, StragglerTableCarriesTheWaitingAnalysis) {
  prof::Summary s;
  s.waiting.instances.resize(4);
  prof::RankWaitRow a, b;
  a.rank = 0;
  a.collectives = 4;
  a.last_arrivals = 1;
  a.wait_caused_ns = 0;
  a.wait_suffered_ns = 115000000;
  b.rank = 1;
  b.collectives = 4;
  b.last_arrivals = 3;
  b.wait_caused_ns = 100000000;
  b.wait_suffered_ns = 40000000;
  s.waiting.ranks = {a, b};
  TableData t = straggler_table(s);
  check_model(t, 2);
  TableModel model;
  model.setTable(t);
  ASSERT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 3);                 // last arrivals
  EXPECT_EQ(model.data(model.index(1, 3)).toString(), QString("75.0"));     // 3 of 4
  EXPECT_EQ(model.data(model.index(1, 4)).toString(), QString("100.000"));  // wait caused ms
  EXPECT_EQ(model.data(model.index(0, 5)).toString(), QString("115.000"));  // wait suffered ms
  EXPECT_EQ(model.data(model.index(1, 0), TableModel::KeyRole).toLongLong(), 1);
}

TEST(TraceModels, RangeStatisticsOfADraggedRange) {
  // One lane: 20 "attention" ranges of 1..20 ms starting at 100 ms steps, and 3 "mlp" ranges of
  // 5 ms; a head-lane copy that must not count. Window [0, 1500 ms) holds attention 1..15.
  auto m = std::make_shared<prof::TraceModel>();
  m->strings = {"attention", "mlp"};
  prof::Lane main;
  main.first = 0;
  for (int i = 0; i < 20; ++i) {
    prof::TraceRange r;
    r.start_ns = int64_t(i) * 100000000;
    r.end_ns = r.start_ns + int64_t(i + 1) * 1000000;
    r.name_id = 0;
    m->ranges.push_back(r);
  }
  for (int i = 0; i < 3; ++i) {
    prof::TraceRange r;
    r.start_ns = int64_t(i) * 100000000 + 50000000;
    r.end_ns = r.start_ns + 5000000;
    r.name_id = 1;
    m->ranges.push_back(r);
  }
  std::sort(m->ranges.rows().begin(), m->ranges.rows().end(),
            [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  main.count = int64_t(m->ranges.size());
  m->lanes.push_back(main);
  prof::Lane copy;
  copy.kind = prof::LaneKind::HeadRange;
  copy.first = int64_t(m->ranges.size());
  m->ranges.push_back(m->ranges[0]);
  copy.count = 1;
  m->lanes.push_back(copy);
  TableData t = range_stats_table(*m, 0, 1500000000);
  check_model(t, 2);
  TableModel model;
  model.setTable(t);
  ASSERT_EQ(model.rowCount(), 2);
  // attention 1..15 ms: count 15, total 120, mean 8, p50 = 8th = 8, p95 = ceil(14.25) = 15th = 15, max 15.
  EXPECT_EQ(model.data(model.index(0, 0)).toString(), QString("attention"));
  EXPECT_EQ(model.data(model.index(0, 2)).toLongLong(), 15);
  EXPECT_EQ(model.data(model.index(0, 3)).toString(), QString("120.000"));
  EXPECT_EQ(model.data(model.index(0, 4)).toString(), QString("8.000"));
  EXPECT_EQ(model.data(model.index(0, 5)).toString(), QString("8.000"));
  EXPECT_EQ(model.data(model.index(0, 6)).toString(), QString("15.000"));
  EXPECT_EQ(model.data(model.index(0, 7)).toString(), QString("15.000"));
  // mlp: 3 x 5 ms
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 3);
  EXPECT_EQ(model.data(model.index(1, 3)).toString(), QString("15.000"));
  // Ranges of hidden ranks are left out (every range above is rank 0's: nothing is left).
  EXPECT_EQ(range_stats_table(*m, 0, 1500000000, StatsGroup::Name, {0}).rows.size(), 0);
  EXPECT_EQ(range_stats_table(*m, 0, 1500000000, StatsGroup::Name, {1}).rows.size(), 2);
  // Sub-microsecond figures keep their digits (a p50 of 55 ns read "0.000").
  prof::TraceModel tiny;
  tiny.strings = {"tiny"};
  prof::TraceRange tr;
  tr.start_ns = 10;
  tr.end_ns = 65;
  tiny.ranges.push_back(tr);
  prof::Lane tl;
  tl.count = 1;
  tiny.lanes.push_back(tl);
  const TableData fine = range_stats_table(tiny, 0, 100);
  ASSERT_EQ(fine.rows.size(), 1);
  EXPECT_EQ(fine.rows[0][5].toString(), QString("0.000055"));
  // Histograms (16 log-spaced buckets over [min, max]), by hand: attention lo = 1 ms, hi = 15 ms,
  // bucket(v ms) = floor(16 ln v / ln 15): 1->0, 2->4, 3->6, 4->8, 5->9, 6->10, 7->11, 8->12,
  // 9->12 (12.98), 10->13, 11->14, 12->14, 13->15, 14->15, 15->15 (16, clamped).
  const std::vector<qint64> attention_hist = {1, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 2, 1, 2, 3};
  const QVariantList h0 = model.data(model.index(0, 0), TableModel::HistogramRole).toList();
  ASSERT_EQ(h0.size(), 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(h0[i].toLongLong(), attention_hist[size_t(i)]) << "bucket " << i;
  EXPECT_EQ(model.data(model.index(0, 8)).toString(), QString("1.00 ms .. 15.0 ms"));
  // mlp: min = max = 5 ms: all three in bucket 0.
  const QVariantList h1 = model.data(model.index(1, 8), TableModel::HistogramRole).toList();
  ASSERT_EQ(h1.size(), 16);
  EXPECT_EQ(h1[0].toLongLong(), 3);
  for (int i = 1; i < 16; ++i) EXPECT_EQ(h1[i].toLongLong(), 0) << "bucket " << i;
}

TEST(TraceModels, LogHistogramBucketsByHand) {
  // lo = 1000, hi = 1000 * 2^15, 16 buckets: 1000 * 2^i lies at 16 i / 15 -> bucket i (i < 15),
  // i = 15 -> 16, clamped to 15; 1500 = 2^0.585 * lo -> bucket 0 (16 * 0.585 / 15 = 0.62).
  std::vector<int64_t> d;
  for (int i = 0; i <= 15; ++i) d.push_back(int64_t(1000) << i);
  d.push_back(1500);
  auto h = log_histogram(d, 16);
  ASSERT_EQ(h.size(), 16u);
  EXPECT_EQ(h[0], 2);
  for (int i = 1; i < 16; ++i) EXPECT_EQ(h[size_t(i)], 1) << "bucket " << i;
  // 4 buckets over [10, 10000] (ln ratio 3 ln 10): 10->0, 50 (0.93)->0, 100 (1.33)->1,
  // 1000 (2.67)->2, 5000 (3.6)->3, 10000 (4)->3.
  h = log_histogram({10, 50, 100, 1000, 5000, 10000}, 4);
  EXPECT_EQ(h, (std::vector<int64_t>{2, 1, 1, 2}));
  EXPECT_EQ(log_histogram({}, 4), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(TraceModels, RangeStatisticsGroupedByPhase) {
  // Names a (attention, 2 and 4 ms), b (attention, 6 ms), c (mlp, 1 ms): per phase,
  // attention = 3 ranges, 12 ms; mlp = 1 range, 1 ms.
  auto m = std::make_shared<prof::TraceModel>();
  m->strings = {"a", "b", "c"};
  const struct {
    int32_t name;
    prof::Phase phase;
    int64_t start_ms, dur_ms;
  } spec[] = {{0, prof::Phase::Attention, 0, 2},
              {2, prof::Phase::Mlp, 10, 1},
              {0, prof::Phase::Attention, 20, 4},
              {1, prof::Phase::Attention, 30, 6}};
  for (const auto& sp : spec) {
    prof::TraceRange r;
    r.name_id = sp.name;
    r.phase = sp.phase;
    r.start_ns = sp.start_ms * 1000000;
    r.end_ns = r.start_ns + sp.dur_ms * 1000000;
    m->ranges.push_back(r);
  }
  prof::Lane lane;
  lane.count = 4;
  m->lanes.push_back(lane);
  TableData by_name = range_stats_table(*m, 0, 100000000);
  EXPECT_EQ(by_name.rows.size(), 3);
  TableData t = range_stats_table(*m, 0, 100000000, StatsGroup::Phase);
  check_model(t, 2);
  TableModel model;
  model.setTable(t);
  ASSERT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.headerData(0, Qt::Horizontal).toString(), QString("phase"));
  EXPECT_EQ(model.data(model.index(0, 0)).toString(), QString("attention"));
  EXPECT_EQ(model.data(model.index(0, 2)).toLongLong(), 3);
  EXPECT_EQ(model.data(model.index(0, 3)).toString(), QString("12.000"));
  EXPECT_EQ(model.data(model.index(1, 0)).toString(), QString("mlp"));
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 1);
  // attention: lo 2, hi 6 ms; 4 ms at 16 ln 2 / ln 3 = 10.09 -> bucket 10.
  const QVariantList h = model.data(model.index(0, 8), TableModel::HistogramRole).toList();
  ASSERT_EQ(h.size(), 16);
  EXPECT_EQ(h[0].toLongLong(), 1);
  EXPECT_EQ(h[10].toLongLong(), 1);
  EXPECT_EQ(h[15].toLongLong(), 1);
}

// Area selection as in Perfetto (docs/STUDIO.md): every range overlapping the window counts, with the
// part inside it. Hand-built: a [0, 10) and [5, 15) ms, b [8, 12) and [12, 30) ms, c [30, 40) ms,
// a zero-length b at 19 ms; window [10, 20) ms. By hand: a: [5, 15) -> 5 ms ([0, 10) only touches
// the edge: out); b: 2 + 8 + 0 = 10 ms over 3 ranges, p50 = 2nd smallest = 2 ms, max 8 ms; c: out.
// Cut at an edge: [5, 15), [8, 12) and [12, 30): 3.
TEST(TraceModels, AreaSelectionCountsOverlappingRangesWithTheirClippedDurations) {
  prof::TraceModel m;
  m.strings = {"a", "b", "c"};
  const struct {
    int32_t name;
    int64_t a_ms, b_ms;
  } spec[] = {{0, 0, 10}, {0, 5, 15}, {1, 8, 12}, {1, 12, 30}, {1, 19, 19}, {2, 30, 40}};
  for (const auto& sp : spec) {
    prof::TraceRange r;
    r.name_id = sp.name;
    r.start_ns = sp.a_ms * 1000000;
    r.end_ns = sp.b_ms * 1000000;
    m.ranges.push_back(r);
  }
  prof::Lane lane;
  lane.count = int64_t(m.ranges.size());
  m.lanes.push_back(lane);
  int64_t clipped = -1;
  const TableData t = range_stats_table(m, 10000000, 20000000, StatsGroup::Name, {}, &clipped);
  EXPECT_EQ(clipped, 3);
  ASSERT_EQ(t.rows.size(), 2);
  // Longest total first: b (10 ms), then a (5 ms).
  EXPECT_EQ(t.rows[0][0].toString(), QString("b"));
  EXPECT_EQ(t.rows[0][2].toLongLong(), 3);
  EXPECT_EQ(t.rows[0][3].toString(), QString("10.000"));
  EXPECT_EQ(t.rows[0][5].toString(), QString("2.000"));  // p50
  EXPECT_EQ(t.rows[0][7].toString(), QString("8.000"));  // max
  EXPECT_EQ(t.rows[1][0].toString(), QString("a"));
  EXPECT_EQ(t.rows[1][2].toLongLong(), 1);
  EXPECT_EQ(t.rows[1][3].toString(), QString("5.000"));
  // The sums equal a brute-force clip over every range.
  int64_t total = 0;
  for (const auto& r : m.ranges.rows()) {
    const int64_t a = std::max<int64_t>(r.start_ns, 10000000), b = std::min<int64_t>(r.end_ns, 20000000);
    if (b > a) total += b - a;
  }
  EXPECT_EQ(total, 15000000);
}
