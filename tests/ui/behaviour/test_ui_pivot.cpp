// Range statistics (docs/STUDIO.md): the histogram of a row has axes with units (a log
// duration axis with 1-2-5 ticks in ms, a count axis) and the window can be pivoted by name,
// phase and rank (count, total, mean), on a hand-built 2-rank trace, the window dragged with
// QTest on the real trace page and every figure computed by hand from the window's ends.
#include <gtest/gtest.h>

#include <QAbstractItemModel>
#include <QApplication>
#include <QComboBox>
#include <QMouseEvent>
#include <QTableView>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "trace/histogram_chart.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_models.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {

constexpr int64_t kMs = 1000000;
struct Span {
  int rank;
  int name;  // 0 attention, 1 mlp, 2 mlp_act
  prof::Phase phase;
  int64_t start, end;
};
// Two attention names and an MLP per rank; "mlp_act" carries the Mlp phase too, so grouping by
// phase and by name differ.
const Span kSpans[] = {
    {0, 0, prof::Phase::Attention, 0, 10 * kMs},         {0, 0, prof::Phase::Attention, 20 * kMs, 25 * kMs},
    {0, 1, prof::Phase::Mlp, 30 * kMs, 31 * kMs},        {0, 2, prof::Phase::Mlp, 32 * kMs, 32 * kMs + 300000},
    {1, 0, prof::Phase::Attention, 5 * kMs, 9 * kMs},    {1, 1, prof::Phase::Mlp, 40 * kMs, 50 * kMs},
    {1, 2, prof::Phase::Mlp, 51 * kMs, 51 * kMs + 20000}};
const char* kNames[] = {"attention", "mlp", "mlp_act"};

std::shared_ptr<prof::TraceModel> handTrace() {
  auto m = std::make_shared<prof::TraceModel>();
  m->strings = {kNames[0], kNames[1], kNames[2]};
  for (int rank = 0; rank < 2; ++rank) {
    prof::RankInfo ri;
    ri.rank = rank;
    m->ranks.push_back(ri);
    prof::Lane lane;
    lane.rank = rank;
    lane.name = "main";
    lane.first = int64_t(m->ranges.size());
    for (const Span& s : kSpans) {
      if (s.rank != rank) continue;
      prof::TraceRange r;
      r.rank = rank;
      r.lane = int32_t(m->lanes.size());
      r.name_id = s.name;
      r.phase = s.phase;
      r.start_ns = s.start;
      r.end_ns = s.end;
      m->ranges.push_back(r);
      ++lane.count;
    }
    m->lanes.push_back(lane);
  }
  m->t_min = 0;
  m->t_max = 52 * kMs;
  return m;
}

class RangeStats : public ::testing::Test {
 protected:
  void SetUp() override {
    m = handTrace();
    tv = std::make_unique<TraceView>();
    tv->resize(1400, 900);
    tv->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(tv.get()));
    tv->setModel(m);
    QApplication::processEvents();
    tl = tv->timeline();
    tl->fitAll();
    view = tv->findChild<QTableView*>(QStringLiteral("rangeStats"));
    group = tv->findChild<QComboBox*>(QStringLiteral("statsGroup"));
    hist = tv->findChild<HistogramChart*>(QStringLiteral("rangeHistogram"));
    ASSERT_NE(view, nullptr);
    ASSERT_NE(group, nullptr);
    ASSERT_NE(hist, nullptr);
    // Right-drag from about 3 ms to about 45 ms: the window is what the widget made of it.
    const auto& vp = tl->viewport();
    const int g = tl->gutterWidth(), y = tl->rulerHeight() + 30;
    const QPoint a(g + int(vp.x_of(3 * kMs)), y), b(g + int(vp.x_of(45 * kMs)), y);
    QTest::mousePress(tl, Qt::RightButton, Qt::NoModifier, a);
    QMouseEvent move(QEvent::MouseMove, QPointF(b), QPointF(tl->mapToGlobal(b)), Qt::NoButton, Qt::RightButton,
                     Qt::NoModifier);
    QApplication::sendEvent(tl, &move);
    QTest::mouseRelease(tl, Qt::RightButton, Qt::NoModifier, b);
    std::tie(t0, t1) = tl->selectedWindow();
    ASSERT_GT(t0, 2 * kMs);
    ASSERT_LT(t0, 4 * kMs);
    ASSERT_GT(t1, 44 * kMs);
    ASSERT_LT(t1, 46 * kMs);
  }
  // Clipped duration of a span in the window, by hand; -1 when it does not overlap.
  int64_t clip(const Span& s) const {
    if (!(s.start < t1 && s.end > t0)) return -1;
    return std::min(s.end, t1) - std::max(s.start, t0);
  }
  QString cell(int row, const QString& header) const {
    const QAbstractItemModel* vm = view->model();
    for (int c = 0; c < vm->columnCount(); ++c)
      if (vm->headerData(c, Qt::Horizontal).toString() == header) return vm->index(row, c).data().toString();
    ADD_FAILURE() << "no column " << header.toStdString();
    return {};
  }
  double sortValue(int row, const QString& header) const {
    const QAbstractItemModel* vm = view->model();
    for (int c = 0; c < vm->columnCount(); ++c)
      if (vm->headerData(c, Qt::Horizontal).toString() == header)
        return vm->index(row, c).data(TableModel::SortRole).toDouble();
    return -1;
  }
  std::shared_ptr<prof::TraceModel> m;
  std::unique_ptr<TraceView> tv;
  TimelineWidget* tl = nullptr;
  QTableView* view = nullptr;
  QComboBox* group = nullptr;
  HistogramChart* hist = nullptr;
  int64_t t0 = 0, t1 = 0;
};

TEST_F(RangeStats, PivotByNamePhaseAndRankEqualsHandSums) {
  // (name, phase, rank) -> (count, total ns), by hand.
  std::map<std::tuple<std::string, std::string, int>, std::pair<int64_t, int64_t>> want;
  for (const Span& s : kSpans)
    if (const int64_t d = clip(s); d >= 0) {
      auto& w = want[{kNames[s.name], prof::phase_name(s.phase), s.rank}];
      ++w.first;
      w.second += d;
    }
  ASSERT_EQ(want.size(), 5u);  // attention x2 ranks, mlp x2, mlp_act rank 0 (rank 1's is outside)
  group->setCurrentIndex(group->findText(QStringLiteral("pivot: name, phase, rank")));
  ASSERT_GE(group->currentIndex(), 2);
  const QAbstractItemModel* vm = view->model();
  ASSERT_EQ(vm->rowCount(), int(want.size()));
  QStringList headers;
  for (int c = 0; c < vm->columnCount(); ++c) headers << vm->headerData(c, Qt::Horizontal).toString();
  EXPECT_EQ(headers, (QStringList{"name", "phase", "rank", "count", "total ms", "mean ms"}));
  double last = 1e300;
  for (int row = 0; row < vm->rowCount(); ++row) {
    const auto key =
        std::make_tuple(cell(row, "name").toStdString(), cell(row, "phase").toStdString(), cell(row, "rank").toInt());
    ASSERT_TRUE(want.count(key)) << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key);
    const auto [count, total] = want[key];
    EXPECT_EQ(cell(row, "count").toLongLong(), count);
    EXPECT_EQ(qint64(sortValue(row, "total ms")), total);
    EXPECT_NEAR(cell(row, "total ms").toDouble(), double(total) / 1e6, 0.0005);
    EXPECT_NEAR(sortValue(row, "mean ms"), double(total) / double(count), 1e-6);
    EXPECT_LE(sortValue(row, "total ms"), last) << "longest total first";
    last = sortValue(row, "total ms");
  }
  // Phase and rank only: mlp and mlp_act add up under "mlp" of rank 0.
  group->setCurrentIndex(group->findText(QStringLiteral("pivot: phase, rank")));
  int64_t mlp0 = 0, n0 = 0;
  for (const Span& s : kSpans)
    if (s.rank == 0 && s.phase == prof::Phase::Mlp && clip(s) >= 0) {
      mlp0 += clip(s);
      ++n0;
    }
  bool seen = false;
  for (int row = 0; row < vm->rowCount(); ++row)
    if (cell(row, "phase") == "mlp" && cell(row, "rank") == "0") {
      seen = true;
      EXPECT_EQ(cell(row, "count").toLongLong(), n0);
      EXPECT_EQ(qint64(sortValue(row, "total ms")), mlp0);
    }
  EXPECT_TRUE(seen);
  EXPECT_EQ(n0, 2);
}

TEST_F(RangeStats, HistogramHasAxesWithUnitsAndOneTwoFiveTicksInMs) {
  group->setCurrentIndex(0);  // per name; the first row (longest total) is attention
  ASSERT_GT(view->model()->rowCount(), 0);
  EXPECT_TRUE(hist->title().startsWith(view->model()->index(0, 0).data().toString())) << hist->title().toStdString();
  EXPECT_TRUE(hist->title().startsWith("attention")) << hist->title().toStdString();
  EXPECT_TRUE(hist->xTitle().contains("ms"));
  // attention's clipped durations in the window, by hand: its histogram spans min .. max.
  int64_t lo = INT64_MAX, hi = 0;
  for (const Span& s : kSpans)
    if (s.name == 0 && clip(s) >= 0) {
      lo = std::min(lo, clip(s));
      hi = std::max(hi, clip(s));
    }
  // The axis runs from the 1-2-5 value at or below the shortest to the one at or above the longest.
  const auto [alo, ahi] = hist->axisSpanMs();
  EXPECT_EQ(alo, round_125(double(lo) / 1e6, false));
  EXPECT_EQ(ahi, round_125(double(hi) / 1e6, true));
  EXPECT_LE(alo, double(lo) / 1e6);
  EXPECT_GE(ahi, double(hi) / 1e6);
  const auto xt = hist->xTicks();
  ASSERT_GE(xt.size(), 2);
  EXPECT_EQ(xt.front().value, alo);
  EXPECT_EQ(xt.back().value, ahi);
  for (int i = 0; i < xt.size(); ++i) {
    const double v = xt[i].value, mant = v / std::pow(10.0, std::floor(std::log10(v) + 1e-9));
    EXPECT_TRUE(std::fabs(mant - 1) < 1e-6 || std::fabs(mant - 2) < 1e-6 || std::fabs(mant - 5) < 1e-6) << v;
    EXPECT_GE(v, alo - 1e-9);
    EXPECT_LE(v, ahi + 1e-9);
    EXPECT_EQ(xt[i].label, tick_label(v));
    if (i > 0) {
      EXPECT_GT(xt[i].pos, xt[i - 1].pos);
    }
  }
  // A log axis: a tick's position is its log between the axis ends.
  const QRectF plot = hist->plotRect();
  for (const auto& t : xt) {
    const double want = plot.left() + plot.width() * std::log(t.value / alo) / std::log(ahi / alo);
    EXPECT_NEAR(t.pos, want, 0.5) << t.value;
  }
  const auto yt = hist->yTicks();
  ASSERT_GE(yt.size(), 2);
  EXPECT_EQ(yt.front().value, 0);
  // attention's three durations (4 ms, 5 ms and about 7 ms) fall in three different buckets of
  // 16 over [4, 7] ms: the count axis is 0 .. 1.
  EXPECT_EQ(yt.back().value, 1);
  EXPECT_EQ(yt.size(), 2);
  EXPECT_NEAR(yt.front().pos, plot.bottom(), 0.5);
  // The bars are drawn: the last bucket (the longest range) is blue on screen.
  const QImage img = hist->grab().toImage();
  const QRectF bar = hist->barRect(kStatsHistogramBuckets - 1);
  ASSERT_GT(bar.height(), 2);
  EXPECT_LE(bar.right(), hist->plotRect().left() +
                             hist->plotRect().width() * std::log(double(hi) / 1e6 / alo) / std::log(ahi / alo) + 1);
  const QColor c = img.pixelColor(bar.center().toPoint());
  EXPECT_EQ(c, QColor(0x1E, 0x88, 0xE5));
  // Clicking another row of the table shows its histogram.
  const QModelIndex second = view->model()->index(1, 0);
  view->scrollTo(second);
  QTest::mouseClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, view->visualRect(second).center());
  EXPECT_TRUE(hist->title().startsWith(second.data().toString())) << hist->title().toStdString();
}

TEST(RangeStatsTicks, OneTwoFiveTicks) {
  EXPECT_EQ(log_ticks_125(0.013, 4.2), (std::vector<double>{0.02, 0.05, 0.1, 0.2, 0.5, 1, 2}));
  EXPECT_EQ(log_ticks_125(3, 4), (std::vector<double>{}));
  EXPECT_EQ(count_ticks_125(7), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(count_ticks_125(100), (std::vector<int64_t>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(count_ticks_125(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(round_125(4.2, false), 2);
  EXPECT_EQ(round_125(4.2, true), 5);
  EXPECT_EQ(round_125(7, true), 10);
  EXPECT_NEAR(round_125(0.013, false), 0.01, 1e-12);
  EXPECT_EQ(round_125(5, false), 5);
  EXPECT_EQ(tick_label(0.05), "0.05");
  EXPECT_EQ(tick_label(0.2), "0.2");
  EXPECT_EQ(tick_label(20), "20");
}

}  // namespace
