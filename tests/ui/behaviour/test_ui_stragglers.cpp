// Straggler evidence you can walk (docs/TRACES.md), on a hand-built 3-rank trace whose
// arrivals are chosen by hand, driven with QTest mouse and key events on the real trace page:
//  - a selected collective's details list every rank's arrival, the skew and each rank's wait;
//  - "]" / "[" go to the next / previous instance of the same collective on the rank;
//  - clicking a Stragglers row or an arrow jumps to that instance (selected, zoomed to it).
#include <gtest/gtest.h>

#include <QAbstractItemModel>
#include <QApplication>
#include <QTableView>
#include <QTest>
#include <QToolButton>
#include <map>
#include <memory>
#include <string>

#include "trace/qt_text.hpp"
#include "trace/report_view.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_models.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {

// Arrivals (range starts, ns) per collective instance (seq) and rank; process group 1.
//   seq 0  a2a_seq_to_head layer 0  step 0: 100000, 130000, 250000   end 300000
//   seq 1  a2a_head_to_seq layer 0  step 0: 400000, 460000, 410000   end 500000
//   seq 2  a2a_seq_to_head layer 0  step 1: 1100000, 1100000, 1170000  end 1200000
//   seq 3  a2a_head_to_seq layer 0  step 1: 1500000, 1520000, 1500000  end 1600000
// plus an attention range (no collective) on every rank at [310000, 390000).
constexpr int64_t kArrive[4][3] = {
    {100000, 130000, 250000}, {400000, 460000, 410000}, {1100000, 1100000, 1170000}, {1500000, 1520000, 1500000}};
constexpr int64_t kEnd[4] = {300000, 500000, 1200000, 1600000};

struct Built {
  std::shared_ptr<prof::TraceModel> m;
  std::map<std::pair<int, int>, int64_t> at;  // (rank, seq) -> range index
};

Built handTrace() {
  Built b;
  b.m = std::make_shared<prof::TraceModel>();
  prof::TraceModel& m = *b.m;
  m.strings = {"a2a_seq_to_head", "a2a_head_to_seq", "attention"};
  for (int32_t rank = 0; rank < 3; ++rank) {
    prof::RankInfo ri;
    ri.rank = rank;
    ri.sp_rank = rank;
    m.ranks.push_back(ri);
    prof::Lane lane;
    lane.rank = rank;
    lane.name = "main";
    lane.first = int64_t(m.ranges.size());
    auto add = [&](int64_t s, int64_t e, int32_t name, prof::Phase ph, int32_t step, int seq) {
      prof::TraceRange r;
      r.start_ns = s;
      r.end_ns = e;
      r.rank = rank;
      r.lane = int32_t(m.lanes.size());
      r.name_id = name;
      r.phase = ph;
      r.step = step;
      r.layer = 0;
      r.extra = -1;
      if (seq >= 0) {
        prof::RangeExtra& x = m.extra_for(r);
        x.pg = 1;
        x.seq = seq;
        b.at[{rank, seq}] = int64_t(m.ranges.size());
      }
      m.ranges.push_back(r);
    };
    add(kArrive[0][rank], kEnd[0], 0, prof::Phase::A2ASeqToHead, 0, 0);
    add(310000, 390000, 2, prof::Phase::Attention, 0, -1);
    add(kArrive[1][rank], kEnd[1], 1, prof::Phase::A2AHeadToSeq, 0, 1);
    add(kArrive[2][rank], kEnd[2], 0, prof::Phase::A2ASeqToHead, 1, 2);
    add(kArrive[3][rank], kEnd[3], 1, prof::Phase::A2AHeadToSeq, 1, 3);
    lane.count = int64_t(m.ranges.size()) - lane.first;
    m.lanes.push_back(lane);
  }
  m.t_min = 100000;
  m.t_max = 1600000;
  return b;
}

class Stragglers : public ::testing::Test {
 protected:
  void SetUp() override {
    built = handTrace();
    tv = std::make_unique<TraceView>();
    tv->resize(1400, 900);
    tv->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(tv.get()));
    tv->setModel(built.m);
    tv->setView(QStringLiteral("timeline"));
    QApplication::processEvents();
    tl = tv->timeline();
    ASSERT_NE(tl->index(), nullptr);
  }
  // A real click on the middle of range k as drawn now (the view fitted to it first).
  void clickRange(int64_t k) {
    const auto& r = built.m->ranges[size_t(k)];
    TimelineViewport v = tl->viewport();
    v.fit(r.start_ns, r.end_ns, 0.25);
    tl->setViewport(v);
    tl->setYScroll(0);
    const DrawItem* item = nullptr;
    for (const auto& it : tl->drawList().items)
      if (it.range == k && it.count == 1) item = &it;
    ASSERT_NE(item, nullptr) << "range " << k << " is not drawn";
    QTest::mouseClick(
        tl, Qt::LeftButton, Qt::NoModifier,
        QPoint(tl->gutterWidth() + int(item->x + item->w / 2), tl->rulerHeight() + int(item->y + item->h / 2)));
  }
  // The view shows the whole instance [first arrival, end] and not much more (zoomed to it).
  void expectZoomedTo(int seq) {
    const auto& v = tl->viewport();
    int64_t first = kArrive[seq][0];
    for (int r = 1; r < 3; ++r) first = std::min(first, kArrive[seq][r]);
    EXPECT_LE(v.t0_ns, first) << "seq " << seq;
    EXPECT_GE(v.t1_ns(), kEnd[seq]) << "seq " << seq;
    EXPECT_LT(v.duration_ns(), 3 * (kEnd[seq] - first)) << "seq " << seq;
  }
  // The details table's value (display text) and sort value (ns) of a field.
  std::pair<QString, qint64> detail(const QString& field) {
    auto* view = tv->findChild<QTableView*>(QStringLiteral("rangeDetails"));
    EXPECT_NE(view, nullptr);
    if (!view) return {};
    QAbstractItemModel* dm = view->model();
    for (int row = 0; row < dm->rowCount(); ++row)
      if (dm->data(dm->index(row, 0)).toString() == field)
        return {dm->data(dm->index(row, 1)).toString(), dm->data(dm->index(row, 1), TableModel::SortRole).toLongLong()};
    ADD_FAILURE() << "no details row " << field.toStdString();
    return {};
  }
  Built built;
  std::unique_ptr<TraceView> tv;
  TimelineWidget* tl = nullptr;
};

}  // namespace

TEST_F(Stragglers, SelectedCollectiveListsEveryRanksArrivalSkewAndWait) {
  for (int seq = 0; seq < 4; ++seq) {
    SCOPED_TRACE("seq " + std::to_string(seq));
    const int64_t k = built.at[{1, seq}];
    clickRange(k);
    ASSERT_EQ(tl->selectedRange(), k);
    // Hand-computed: first and last arrival (ties: the lowest rank is the last arriver).
    int64_t first = kArrive[seq][0], last = kArrive[seq][0];
    int last_rank = 0;
    for (int r = 1; r < 3; ++r) {
      first = std::min(first, kArrive[seq][r]);
      if (kArrive[seq][r] > last) {
        last = kArrive[seq][r];
        last_rank = r;
      }
    }
    EXPECT_EQ(detail(QStringLiteral("skew")).second, last - first);
    EXPECT_EQ(detail(QStringLiteral("skew")).first, duration_qs(double(last - first)));
    EXPECT_EQ(detail(QStringLiteral("last arrival")).first, QStringLiteral("rank %1").arg(last_rank));
    EXPECT_TRUE(detail(QStringLiteral("collective")).first.contains(QStringLiteral("3 of 3 ranks")));
    for (int r = 0; r < 3; ++r) {
      const auto arrival = detail(QStringLiteral("rank %1 arrival").arg(r));
      EXPECT_EQ(arrival.second, kArrive[seq][r] - first) << "rank " << r;
      EXPECT_TRUE(arrival.first.startsWith(QLatin1Char('+') + duration_qs(double(kArrive[seq][r] - first))))
          << arrival.first.toStdString();
      const auto wait = detail(QStringLiteral("rank %1 wait").arg(r));
      EXPECT_EQ(wait.second, last - kArrive[seq][r]) << "rank " << r;
      EXPECT_EQ(wait.first, duration_qs(double(last - kArrive[seq][r])));
    }
  }
  // The numbers by hand for seq 0, spelled out: rank 2 last, skew 150 us, waits 150/120/0 us.
  clickRange(built.at[{0, 0}]);
  EXPECT_EQ(detail(QStringLiteral("skew")).second, 150000);
  EXPECT_EQ(detail(QStringLiteral("last arrival")).first, QStringLiteral("rank 2"));
  EXPECT_EQ(detail(QStringLiteral("rank 0 wait")).second, 150000);
  EXPECT_EQ(detail(QStringLiteral("rank 1 wait")).second, 120000);
  EXPECT_EQ(detail(QStringLiteral("rank 2 wait")).second, 0);
  // A range of no collective lists none of it.
  clickRange(built.m->lanes[0].first + 1);  // attention on rank 0
  auto* view = tv->findChild<QTableView*>(QStringLiteral("rangeDetails"));
  ASSERT_NE(view, nullptr);
  for (int row = 0; row < view->model()->rowCount(); ++row)
    EXPECT_NE(view->model()->data(view->model()->index(row, 0)).toString(), QStringLiteral("skew"));
}

TEST_F(Stragglers, BracketKeysWalkTheInstancesOfTheSameCollective) {
  clickRange(built.at[{1, 0}]);
  tl->setFocus();
  QTest::keyClick(tl, Qt::Key_BracketRight);
  EXPECT_EQ(tl->selectedRange(), (built.at[{1, 2}])) << "] goes to the next a2a_seq_to_head of rank 1";
  expectZoomedTo(2);
  EXPECT_EQ(detail(QStringLiteral("skew")).second, 70000);
  QTest::keyClick(tl, Qt::Key_BracketRight);
  EXPECT_EQ(tl->selectedRange(), (built.at[{1, 2}])) << "no later instance: the selection stays";
  QTest::keyClick(tl, Qt::Key_BracketLeft);
  EXPECT_EQ(tl->selectedRange(), (built.at[{1, 0}])) << "[ goes back";
  expectZoomedTo(0);
  QTest::keyClick(tl, Qt::Key_BracketLeft);
  EXPECT_EQ(tl->selectedRange(), (built.at[{1, 0}]));
  // The other collective (head -> seq) walks its own instances.
  clickRange(built.at[{2, 1}]);
  tl->setFocus();
  QTest::keyClick(tl, Qt::Key_BracketRight);
  EXPECT_EQ(tl->selectedRange(), (built.at[{2, 3}]));
  expectZoomedTo(3);
}

TEST_F(Stragglers, AStragglersRowJumpsToTheInstanceWhereThatRankArrivedLastByTheMost) {
  ReportView* report = tv->reportView();
  QTableView* sv = report->stragglersView();
  ASSERT_NE(sv, nullptr);
  tv->setView(QStringLiteral("report"));
  report->tabs()->setCurrentWidget(sv);
  QApplication::processEvents();
  // Rank 2 arrived last at seq 0 (150 us) and seq 2 (70 us): seq 0. Rank 1 at seq 1 (60 us)
  // and seq 3 (20 us): seq 1. Rank 0 never arrived last; it waited longest at seq 0 (150 us).
  const std::map<int, int> want = {{2, 0}, {1, 1}, {0, 0}};
  for (const auto& [rank, seq] : want) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    tv->setView(QStringLiteral("report"));
    QApplication::processEvents();
    int row = -1;
    for (int i = 0; i < sv->model()->rowCount(); ++i)
      if (sv->model()->data(sv->model()->index(i, 0), TableModel::KeyRole).toLongLong() == rank) row = i;
    ASSERT_GE(row, 0);
    const QRect cell = sv->visualRect(sv->model()->index(row, 0));
    ASSERT_TRUE(cell.isValid());
    QTest::mouseClick(sv->viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
    EXPECT_EQ(tv->currentView(), QStringLiteral("timeline"));
    EXPECT_EQ(tl->selectedRange(), (built.at[{rank, seq}]));
    expectZoomedTo(seq);
  }
}

TEST_F(Stragglers, ClickingAnArrowJumpsToItsInstance) {
  auto* all = tv->findChild<QToolButton*>(QStringLiteral("allFlows"));
  ASSERT_NE(all, nullptr);
  QTest::mouseClick(all, Qt::LeftButton);
  ASSERT_TRUE(tl->allFlowsInView());
  tl->clearSelection();
  tl->fitAll();
  tl->setYScroll(0);
  // The arrows of seq 1 in the whole view: rank 0 (400 us) and rank 2 (410 us) to rank 1 (460 us).
  const auto groups = flows_in_view(*tl->index(), tl->drawList());
  const std::vector<FlowPoint>* g1 = nullptr;
  for (const auto& g : groups)
    if (g.back().range == built.at[{1, 1}]) g1 = &g;
  ASSERT_NE(g1, nullptr);
  ASSERT_EQ(g1->size(), 3u);
  // Rank 0's arrow, a quarter of the way from its start (rank 2's arrow runs close to it at the end).
  const FlowPoint& a = g1->front();
  ASSERT_EQ(a.rank, 0);
  const FlowPoint& b = g1->back();
  const QPointF p(a.x + (b.x - a.x) * 0.25, a.y + (b.y - a.y) * 0.25);
  QTest::mouseClick(tl, Qt::LeftButton, Qt::NoModifier,
                    QPoint(tl->gutterWidth() + int(std::lround(p.x())), tl->rulerHeight() + int(std::lround(p.y()))));
  EXPECT_EQ(tl->selectedRange(), (built.at[{0, 1}]));
  expectZoomedTo(1);
  EXPECT_EQ(detail(QStringLiteral("skew")).second, 60000);
  QTest::mouseClick(all, Qt::LeftButton);
  EXPECT_FALSE(tl->allFlowsInView());
}
