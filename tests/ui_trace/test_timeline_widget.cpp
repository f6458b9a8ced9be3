// TimelineWidget input: wheel and +/- zoom around the cursor, drag-to-zoom, panning, click
// selection and the hover tooltip (offscreen, with QTest events).
#include <gtest/gtest.h>

#include <QHelpEvent>
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
                 Qt::NoModifier, Qt::NoScrollPhase, false);
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

TEST(TimelineWidget, DragWithRightButtonZoomsToTheRange) {
  TimelineWidget w;
  w.resize(1150, 400);
  w.setIndex(uniform_index());
  const auto before = w.viewport();
  const int g = w.gutterWidth();
  const int64_t a = before.t_of(200), b = before.t_of(400);
  QTest::mousePress(&w, Qt::RightButton, Qt::NoModifier, QPoint(g + 200, 100));
  QMouseEvent move(QEvent::MouseMove, QPointF(g + 400, 100), w.mapToGlobal(QPointF(g + 400, 100)), Qt::NoButton,
                   Qt::RightButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &move);
  QTest::mouseRelease(&w, Qt::RightButton, Qt::NoModifier, QPoint(g + 400, 100));
  EXPECT_NEAR(double(w.viewport().t0_ns), double(a), before.ns_per_px);
  EXPECT_NEAR(double(w.viewport().t1_ns()), double(b), before.ns_per_px);
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
