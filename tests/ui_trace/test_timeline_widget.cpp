// TimelineWidget input: Ctrl+wheel and +/- zoom around the cursor, drag-to-select, panning,
// click selection and the hover tooltip (offscreen, with QTest events).
#include <gtest/gtest.h>

#include <QHelpEvent>
#include <QMenu>
#include <QTest>
#include <QToolTip>
#include <QWheelEvent>

#include "testdata/synthetic_trace.hpp"
#include "trace/timeline_widget.hpp"

using namespace ulysses::ui;
using namespace ulysses::testdata;

namespace {
std::shared_ptr<const TimelineIndex> uniform_index(int64_t n = 100) {
  UniformOptions o;
  o.ranks = 1;
  o.lanes_per_rank = 1;
  o.n = n;
  o.width_ns = 1000;
  o.period_ns = 2000;
  return TimelineIndex::build(make_uniform_trace(o));
}
}  // namespace

TEST(TimelineWidget, WheelAndKeysZoomAroundTheCursor) {
  TimelineWidget w;
  w.resize(1150, 400);
  w.setIndex(uniform_index());
  const auto before = w.viewport();
  const int x = w.gutterWidth() + 300;
  const int64_t t_under = before.t_of(300);
  QWheelEvent we(QPointF(x, 100), w.mapToGlobal(QPointF(x, 100)), QPoint(), QPoint(0, 120), Qt::NoButton,
                 Qt::ControlModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(&w, &we);
  EXPECT_NEAR(w.viewport().ns_per_px, before.ns_per_px / 1.25, 1e-9);
  EXPECT_NEAR(double(w.viewport().t_of(300)), double(t_under), 2.0);
  QTest::keyClick(&w, Qt::Key_Minus);
  EXPECT_NEAR(w.viewport().ns_per_px, before.ns_per_px / 1.25 * 1.5, 1e-6);
  QTest::keyClick(&w, Qt::Key_Plus);
  QTest::keyClick(&w, Qt::Key_Plus);
  EXPECT_LT(w.viewport().ns_per_px, before.ns_per_px / 1.25);
  QTest::keyClick(&w, Qt::Key_Home);
  EXPECT_NEAR(w.viewport().ns_per_px, before.ns_per_px, 1e-9);
}

// A right-drag selects a window without zooming (Perfetto); F then fits it, Esc-like
// clearSelection drops it.
TEST(TimelineWidget, DragWithRightButtonSelectsAWindowAndFFitsIt) {
  TimelineWidget w;
  w.resize(1150, 400);
  w.setIndex(uniform_index());
  const auto before = w.viewport();
  const int g = w.gutterWidth();
  const int64_t a = before.t_of(200), b = before.t_of(400);
  std::pair<qint64, qint64> got{-1, -1};
  QObject::connect(&w, &TimelineWidget::timeRangeSelected, [&](qint64 t0, qint64 t1) { got = {t0, t1}; });
  QTest::mousePress(&w, Qt::RightButton, Qt::NoModifier, QPoint(g + 200, 100));
  QMouseEvent move(QEvent::MouseMove, QPointF(g + 400, 100), w.mapToGlobal(QPointF(g + 400, 100)), Qt::NoButton,
                   Qt::RightButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &move);
  QTest::mouseRelease(&w, Qt::RightButton, Qt::NoModifier, QPoint(g + 400, 100));
  EXPECT_EQ(w.viewport(), before);  // no zoom
  EXPECT_EQ(got.first, a);
  EXPECT_EQ(got.second, b);
  EXPECT_EQ(w.selectedWindow(), std::make_pair(int64_t(a), int64_t(b)));
  QTest::keyClick(&w, Qt::Key_F);
  // fitted with a 2 % margin on each side
  const double span = double(b - a);
  EXPECT_NEAR(double(w.viewport().t0_ns), double(a) - 0.02 * span, before.ns_per_px);
  EXPECT_NEAR(double(w.viewport().t1_ns()), double(b) + 0.02 * span, before.ns_per_px);
  EXPECT_TRUE(w.clearSelection());
  EXPECT_EQ(w.selectedWindow().second, -1);
  EXPECT_FALSE(w.clearSelection());
}

TEST(TimelineWidget, ClickSelectsAndTooltipDescribesTheRange) {
  TimelineWidget w;
  w.resize(1150, 400);
  w.setIndex(uniform_index(10));
  TimelineViewport vp = w.viewport();
  vp.width_px = 1000;
  vp.t0_ns = 0;
  vp.ns_per_px = 20;  // range i at x = 100 i .. 100 i + 50
  w.setViewport(vp);
  const auto& dl = w.drawList();
  ASSERT_EQ(dl.items.size(), 10u);
  const int y = int(dl.items[3].y + 3) + w.rulerHeight();
  qint64 selected = -2;
  QObject::connect(&w, &TimelineWidget::rangeSelected, [&](qint64 r) { selected = r; });
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(w.gutterWidth() + 325, y));
  EXPECT_EQ(selected, 3);
  EXPECT_EQ(w.selectedRange(), 3);
  QHelpEvent he(QEvent::ToolTip, QPoint(w.gutterWidth() + 525, y), w.mapToGlobal(QPoint(w.gutterWidth() + 525, y)));
  QApplication::sendEvent(&w, &he);
  EXPECT_TRUE(QToolTip::text().contains("uniform")) << QToolTip::text().toStdString();
  EXPECT_TRUE(QToolTip::text().contains("1.00 us")) << QToolTip::text().toStdString();
  // clicking empty space clears the selection
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(w.gutterWidth() + 375, y));
  EXPECT_EQ(selected, -1);
}

TEST(TimelineWidget, DragWithLeftButtonPans) {
  TimelineWidget w;
  w.resize(1150, 400);
  w.setIndex(uniform_index(1000));
  TimelineViewport vp = w.viewport();
  vp.ns_per_px = 100;
  vp.t0_ns = 500'000;
  w.setViewport(vp);
  const int64_t t0 = w.viewport().t0_ns;
  const int g = w.gutterWidth();
  QTest::mousePress(&w, Qt::LeftButton, Qt::NoModifier, QPoint(g + 500, 50));
  QMouseEvent move(QEvent::MouseMove, QPointF(g + 400, 50), w.mapToGlobal(QPointF(g + 400, 50)), Qt::NoButton,
                   Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &move);
  QTest::mouseRelease(&w, Qt::LeftButton, Qt::NoModifier, QPoint(g + 400, 50));
  EXPECT_EQ(w.viewport().t0_ns, t0 + 100 * 100);  // dragged 100 px left = 10 us later
}

namespace {
// 6 ranks x 2 lanes x 10 ranges of 1 us every 2 us, viewed at 20 ns/px (range i at x 100 i).
void six_ranks(TimelineWidget& w) {
  UniformOptions o;
  o.ranks = 6;
  o.lanes_per_rank = 2;
  o.n = 10;
  w.resize(1150, 250);
  w.setIndex(TimelineIndex::build(make_uniform_trace(o)));
  TimelineViewport vp = w.viewport();
  vp.width_px = 1000;
  vp.t0_ns = 0;
  vp.ns_per_px = 20;
  w.setViewport(vp);
}
// Widget y of the middle of rank `rank`'s first lane (as laid out now, scroll applied).
int lane_y(TimelineWidget& w, int32_t rank) {
  const auto& L = w.layout();
  for (const auto& ll : L.lanes)
    if (ll.rank == rank && !ll.hidden) return w.rulerHeight() + int(L.screen_y(ll.y, w.yScroll()) + 9);
  return -1;
}
int32_t rank_of(TimelineWidget& w, qint64 range) {
  return range < 0 ? -1 : w.index()->model().ranges[size_t(range)].rank;
}
void trigger(TimelineWidget& w, int32_t rank, const char* name) {
  std::unique_ptr<QMenu> menu(w.rankMenu(rank, &w));
  auto* a = menu->findChild<QAction*>(QString::fromLatin1(name));
  ASSERT_NE(a, nullptr) << name;
  ASSERT_TRUE(a->isEnabled()) << name;
  a->trigger();
}
}  // namespace

TEST(TimelineWidget, HidingARankFromItsMenuAndShowingAllAgain) {
  TimelineWidget w;
  six_ranks(w);
  const int y1 = lane_y(w, 1);
  EXPECT_EQ(w.rankAt(QPoint(10, y1)), 1);
  const int x = w.gutterWidth() + 25;
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(x, y1));
  EXPECT_EQ(rank_of(w, w.selectedRange()), 1);
  trigger(w, 1, "hide");
  EXPECT_EQ(w.hiddenRankCount(), 1);
  EXPECT_EQ(w.rankFlags(1), kRankHidden);
  EXPECT_EQ(w.selectedRange(), -1);  // the selection was on the hidden rank
  // The same spot now hits rank 2, which moved up into rank 1's place.
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(x, y1));
  EXPECT_EQ(rank_of(w, w.selectedRange()), 2);
  EXPECT_EQ(w.rankAt(QPoint(10, y1)), 2);
  for (const auto& it : w.drawList().items) EXPECT_NE(rank_of(w, it.range), 1);
  EXPECT_FALSE(w.grab().isNull());  // paints the "1 rank hidden" strip
  // The strip at the bottom of the gutter brings it back.
  const QRect strip = w.hiddenStripRect();
  ASSERT_FALSE(strip.isEmpty());
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, strip.center());
  EXPECT_EQ(w.hiddenRankCount(), 0);
  EXPECT_TRUE(w.hiddenStripRect().isEmpty());
  EXPECT_EQ(w.rankAt(QPoint(10, y1)), 1);
}

TEST(TimelineWidget, PinnedRankStaysOnTopWhenScrolled) {
  TimelineWidget w;
  six_ranks(w);
  trigger(w, 4, "pin");
  EXPECT_EQ(w.rankFlags(4), kRankPinned);
  w.setYScroll(100);
  EXPECT_FLOAT_EQ(w.yScroll(), 100);
  const auto& L = w.layout();
  ASSERT_EQ(L.ranks.front().rank, 4);
  // rank 4's first lane sits right under its header at the top, whatever the scroll
  const int y4 = lane_y(w, 4);
  EXPECT_EQ(y4, w.rulerHeight() + int(L.opt.rank_header_h) + 9);
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(w.gutterWidth() + 125, y4));
  EXPECT_EQ(rank_of(w, w.selectedRange()), 4);
  EXPECT_EQ(w.rankAt(QPoint(10, y4)), 4);
  // The plain wheel scrolls the rest; rank 4 stays.
  QWheelEvent we(QPointF(600, 150), w.mapToGlobal(QPointF(600, 150)), QPoint(), QPoint(0, -120), Qt::NoButton,
                 Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(&w, &we);
  EXPECT_FLOAT_EQ(w.yScroll(), 160);
  EXPECT_EQ(lane_y(w, 4), y4);
  for (const auto& it : w.drawList().items) {
    if (rank_of(w, it.range) == 4) {
      EXPECT_LT(it.y, L.pinned_h);
    } else {
      EXPECT_GE(it.y, L.pinned_h);
    }
  }
  EXPECT_FALSE(w.grab().isNull());
  trigger(w, 4, "pin");  // toggles off
  EXPECT_EQ(w.rankFlags(4), 0);
  EXPECT_FLOAT_EQ(w.layout().pinned_h, 0);
}

TEST(TimelineWidget, CollapsedRankDrawsOneSummaryRow) {
  TimelineWidget w;
  six_ranks(w);
  const float h_before = w.layout().find_rank(0)->h;
  trigger(w, 0, "collapse");
  EXPECT_EQ(w.rankFlags(0), kRankCollapsed);
  const RankLayout* r0 = w.layout().find_rank(0);
  ASSERT_NE(r0, nullptr);
  EXPECT_LT(r0->h, h_before);
  const int y = w.rulerHeight() + int(r0->lanes_y + 9);
  int summary_items = 0;
  for (const auto& it : w.drawList().items)
    if (rank_of(w, it.range) == 0) {
      EXPECT_TRUE(it.flags & kSummary);
      EXPECT_FLOAT_EQ(it.y, r0->lanes_y + 1);
      ++summary_items;
    }
  EXPECT_EQ(summary_items, 20);
  QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(w.gutterWidth() + 325, y));
  EXPECT_EQ(rank_of(w, w.selectedRange()), 0);
  EXPECT_EQ(w.index()->model().ranges[size_t(w.selectedRange())].start_ns, 6000);
  EXPECT_FALSE(w.grab().isNull());
  trigger(w, 0, "collapse");
  EXPECT_FLOAT_EQ(w.layout().find_rank(0)->h, h_before);
}
