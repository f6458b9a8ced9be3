// Replay (docs/STUDIO.md): a recorded run plays back in the monitor at 10× and step by step with
// no training; the charts' final values equal the run's metrics and the cursor reaches the
// last step. ReplayModel's clock is checked with synthetic wall time.
#include <gtest/gtest.h>

#include <algorithm>

#include <QDir>
#include <QFile>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "monitor_page.hpp"
#include "replay_model.hpp"
#include "run_controller.hpp"
#include "ui/run_fixture.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {
std::vector<MetricPoint> points(std::initializer_list<double> elapsed) {
  std::vector<MetricPoint> v;
  int s = 0;
  for (double t : elapsed) {
    MetricPoint p;
    p.step = s++;
    p.elapsed_s = t;
    p.loss = 10 - s;
    v.push_back(p);
  }
  return v;
}
}  // namespace

TEST(ReplayModel, TimedAndStepByStep) {
  ReplayModel m(points({1.0, 2.0, 3.0, 4.0}));
  EXPECT_TRUE(m.advance(0.5, 1.0).empty());   // 0.5 s of run time: nothing finished yet
  EXPECT_EQ(m.advance(0.6, 1.0).size(), 1u);  // 1.1 s: step 0
  EXPECT_EQ(m.cursorStep(), 0);
  EXPECT_EQ(m.advance(0.2, 10.0).size(), 2u);  // +2 s at 10x: 3.1 s, steps 1 and 2
  EXPECT_FALSE(m.finished());
  MetricPoint p;
  ASSERT_TRUE(m.step(&p));  // step mode takes the next one
  EXPECT_EQ(p.step, 3);
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.step(&p));
  EXPECT_EQ(m.cursorStep(), 3);
  EXPECT_DOUBLE_EQ(m.clockS(), 4.0);
  m.restart();
  EXPECT_EQ(m.shown(), 0);
  EXPECT_EQ(m.cursorStep(), -1);
  // Times that go backwards (a worker appended after a restart) never stall the replay.
  ReplayModel back(points({1.0, 3.0, 2.0}));
  EXPECT_EQ(back.advance(3.0, 1.0).size(), 3u);
}

// The replay cursor on the trace clock: inside the step in progress by the fraction of its run
// time covered, at a shown step's end in step mode, at the last step's end when finished.
TEST(ReplayModel, CursorSweepsToTheLastStepsEnd) {
  auto pts = points({1.0, 2.0, 3.0, 4.0});
  for (auto& p : pts) p.step_ms = 500;  // each step ran for the last 0.5 s of its second
  const std::vector<TraceStepSpan> spans = {{0, 1000, 2000}, {1, 3000, 5000}, {2, 6000, 7000}, {3, 8000, 9000}};
  ReplayModel m(pts);
  EXPECT_EQ(m.cursorNs(spans), 1000);  // before any time: step 0's start
  m.advance(0.75, 1.0);                // 0.75 s: step 0 half done (it runs 0.5 -> 1.0 s)
  EXPECT_EQ(m.cursorNs(spans), 1500);
  m.advance(0.25, 1.0);  // 1.0 s: step 0 shown, cursor at its end
  EXPECT_EQ(m.cursorStep(), 0);
  EXPECT_EQ(m.cursorNs(spans), 2000);
  m.advance(0.25, 1.0);  // 1.25 s: between steps (step 1 starts at 1.5 s)
  EXPECT_EQ(m.cursorNs(spans), 3000);
  m.advance(0.5, 1.0);  // 1.75 s: half of step 1
  EXPECT_EQ(m.cursorNs(spans), 4000);
  int64_t last = m.cursorNs(spans);
  while (!m.finished()) {  // 10x: never goes back, ends at the last step's end
    m.advance(0.01, 10.0);
    EXPECT_GE(m.cursorNs(spans), last);
    last = m.cursorNs(spans);
  }
  EXPECT_EQ(m.cursorNs(spans), 9000);
  m.advance(5.0, 1.0);  // past the end: stays there
  EXPECT_EQ(m.cursorNs(spans), 9000);
  // Step by step: each step's end.
  ReplayModel st(pts);
  MetricPoint p;
  for (size_t i = 0; i < spans.size(); ++i) {
    ASSERT_TRUE(st.step(&p));
    EXPECT_EQ(st.cursorNs(spans), spans[i].end_ns);
  }
  // A step the trace does not have: no cursor.
  EXPECT_EQ(st.cursorNs({{0, 1, 2}}), -1);
  EXPECT_EQ(ReplayModel().cursorNs(spans), -1);
}

class ReplayMonitor : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.isValid());
    run_ = tmp_.filePath(QStringLiteral("run"));
    // 5 steps, 1.0 s of run time in all: 10x replays it in ~0.1 s.
    test::write_fixture_run(run_.toStdString(), 2,
                            {{400, 5.0, 100 << 20},
                             {150, 4.0, 300 << 20},
                             {150, 3.5, 200 << 20},
                             {150, 3.2, 250 << 20},
                             {150, 3.0, 220 << 20}});
    pts_ = readMetricsFile(QDir(run_).filePath(QStringLiteral("metrics.jsonl")));
    ASSERT_EQ(pts_.size(), 5);
  }
  void expectFinalValuesEqualMetrics(const MonitorPage& page) {
    const auto loss = page.chartValues(0), tps = page.chartValues(1), mem = page.chartValues(2);
    ASSERT_EQ(loss.size(), pts_.size());
    ASSERT_EQ(tps.size(), pts_.size());
    for (int i = 0; i < pts_.size(); ++i) {
      EXPECT_DOUBLE_EQ(loss[i].x(), pts_[i].step);
      EXPECT_DOUBLE_EQ(loss[i].y(), pts_[i].loss);
    }
    EXPECT_DOUBLE_EQ(loss.back().y(), 3.0);
    EXPECT_DOUBLE_EQ(tps.back().y(), pts_.back().tokens_per_s);
    EXPECT_DOUBLE_EQ(mem.back().y(), double(220 << 20) / (1024.0 * 1024.0 * 1024.0));
    EXPECT_EQ(page.progressValue(), 5);
    EXPECT_EQ(page.replayCursorStep(), 4);
  }
  QTemporaryDir tmp_;
  QString run_;
  QVector<MetricPoint> pts_;
};

TEST_F(ReplayMonitor, StepByStepReachesTheLastStep) {
  RunController ctl;
  MonitorPage page(&ctl);
  QSignalSpy cursor(&page, &MonitorPage::replayCursor);
  ASSERT_TRUE(page.replayRun(run_, 0.0));
  EXPECT_EQ(page.chartPoints(), 0);  // charts start empty
  for (int i = 0; i < 5; ++i) {
    page.replayStep();
    EXPECT_EQ(page.chartPoints(), i + 1);
    EXPECT_EQ(page.replayCursorStep(), i);
  }
  page.replayStep();  // past the end: nothing more
  EXPECT_EQ(page.chartPoints(), 5);
  EXPECT_EQ(cursor.count(), 5);
  EXPECT_FALSE(page.replaying());
  EXPECT_FALSE(ctl.isRunning());  // no training ran
  expectFinalValuesEqualMetrics(page);
}

TEST_F(ReplayMonitor, TenTimesSpeedPlaysTheWholeRun) {
  RunController ctl;
  MonitorPage page(&ctl);
  QSignalSpy done(&page, &MonitorPage::replayFinished);
  ASSERT_TRUE(page.replayRun(run_, 10.0));
  EXPECT_LT(page.chartPoints(), 5);  // not all at once
  ASSERT_TRUE(done.wait(5000)) << "replay at 10x of a 1 s run did not finish in 5 s";
  expectFinalValuesEqualMetrics(page);
  EXPECT_GE(page.replayModel()->clockS(), 1.0 - 1e-9);
}

TEST_F(ReplayMonitor, RefusesARunWithoutMetrics) {
  RunController ctl;
  MonitorPage page(&ctl);
  QString err;
  EXPECT_FALSE(page.replayRun(tmp_.filePath(QStringLiteral("empty")), 1.0, &err));
  EXPECT_TRUE(err.contains(QLatin1String("no recorded steps"))) << err.toStdString();
}

// A finished run opened from disk: its log shows every line from its first column, however
// long the longest line (appending to a no-wrap log scrolled it to that line's end).
TEST_F(ReplayMonitor, LogOfARunFromDiskStartsAtTheFirstColumn) {
  QDir(run_).mkpath(QStringLiteral("logs"));
  QFile f(QDir(run_).filePath(QStringLiteral("logs/rank0.log")));
  ASSERT_TRUE(f.open(QIODevice::WriteOnly));
  f.write("rank 0: first line\nrank 0: last line, a long one " + QByteArray(3000, 'x') + "\n");
  f.close();
  RunController ctl;
  MonitorPage page(&ctl);
  page.resize(800, 600);
  page.showRun(run_);  // loaded first, then shown: as the studio opens a run given to it
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QCoreApplication::processEvents();
  auto* log = page.findChild<QPlainTextEdit*>(QStringLiteral("log"));
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(log->toPlainText().contains(QLatin1String("last line, a long one")));
  EXPECT_GT(log->horizontalScrollBar()->maximum(), 0);  // the long line does not fit
  EXPECT_EQ(log->horizontalScrollBar()->value(), 0);
}

// The explain view follows the launcher's form: a valid config draws 6 stages, an sp_size
// that does not divide the heads shows the engine's reason instead. (Its numbers are
// explain_model's, tested in test_ui_explain.)
#include <QImage>
#include <QLabel>
#include <QSlider>

#include "cost_model.hpp"
#include "explain_view.hpp"
#include "launcher_page.hpp"
#include "main_window.hpp"

// The studio with the tiny demo's config in the launcher, on the Explain page.
class ExplainViewInStudio : public ::testing::Test {
 protected:
  void SetUp() override {
    w.setQuiet(true);
    ASSERT_TRUE(w.launcher()->loadConfigFile(QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs/tiny.json"), &err))
        << err.toStdString();
    ex = w.findChild<ExplainView*>();
    ASSERT_NE(ex, nullptr);
    ASSERT_TRUE(w.setView(QStringLiteral("explain")));
  }
  MainWindow w;
  QString err;
  ExplainView* ex = nullptr;
};

TEST_F(ExplainViewInStudio, FollowsTheLauncherAndShowsRefusals) {
  EXPECT_TRUE(ex->explanation().ok);
  EXPECT_EQ(ex->stageCount(), 8);  // the layer's six, where the weights are, the document mask
  EXPECT_EQ(ex->explanation().P, 2);
  EXPECT_TRUE(ex->setStage(2));
  EXPECT_FALSE(ex->setStage(8));
  EXPECT_EQ(ex->stage(), 2);
  EXPECT_FALSE(ex->grab().isNull());
  ASSERT_TRUE(w.launcher()->setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("3")));
  EXPECT_FALSE(ex->explanation().ok);
  ASSERT_FALSE(ex->explanation().problems.empty());
  EXPECT_NE(ex->explanation().problems.front().find("sp_size (3)"), std::string::npos)
      << ex->explanation().problems.front();
  ASSERT_TRUE(
      w.launcher()->setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("4")));  // 2 kv heads replicated
  EXPECT_TRUE(ex->explanation().ok);
  EXPECT_TRUE(ex->explanation().kv_replicated);
}

// Ring attention's stage hop by hop: the hop bar shows only there, each hop redraws the
// picture and names the hop, Play steps through the hops on a timer.
TEST_F(ExplainViewInStudio, RingStageStepsThroughTheHops) {
  ASSERT_TRUE(w.launcher()->setFieldText(QStringLiteral("parallel.ring_size"), QStringLiteral("4")));
  ex->resize(1000, 600);
  ASSERT_TRUE(ex->explanation().ok) << (ex->explanation().problems.empty() ? "" : ex->explanation().problems[0]);
  auto* hopBar = ex->findChild<QSlider*>(QStringLiteral("explainHop"));
  ASSERT_NE(hopBar, nullptr);
  ASSERT_TRUE(ex->setStage(2));
  EXPECT_FALSE(hopBar->isVisibleTo(ex));
  ASSERT_TRUE(ex->setStage(3));
  EXPECT_TRUE(ex->isRingStage(3));
  EXPECT_TRUE(hopBar->isVisibleTo(ex));
  EXPECT_EQ(ex->ringHops().R, 4);
  EXPECT_EQ(hopBar->maximum(), 3);
  const QImage hop0 = ex->grab().toImage();
  EXPECT_TRUE(ex->captionText().contains(QStringLiteral("hop 0")));
  ASSERT_TRUE(ex->setHop(2));
  EXPECT_TRUE(ex->captionText().contains(QStringLiteral("hop 2 of 3"))) << ex->captionText().toStdString();
  EXPECT_NE(ex->grab().toImage(), hop0);
  EXPECT_FALSE(ex->setHop(4));
  ex->setPlaying(true);
  EXPECT_TRUE(ex->playing());
  for (int i = 0; i < 200 && ex->hop() == 2; ++i) QTest::qWait(50);  // a tick every 900 ms
  EXPECT_EQ(ex->hop(), 3);
  for (int i = 0; i < 200 && ex->hop() == 3; ++i) QTest::qWait(50);
  EXPECT_EQ(ex->hop(), 0);       // wraps round
  ASSERT_TRUE(ex->setStage(4));  // leaving the ring stage stops the play
  EXPECT_FALSE(ex->playing());
}

// The last stage follows the launcher's ZeRO fields: the caption names the stage and the
// figures of weights_model (tested by hand in test_ui_explain), and the picture changes.
TEST_F(ExplainViewInStudio, WhereTheWeightsAreFollowsTheZeroStage) {
  ex->resize(900, 500);
  ASSERT_TRUE(ex->setStage(6));
  EXPECT_TRUE(ex->isWeightsStage(6));
  EXPECT_FALSE(ex->isWeightsStage(5));
  EXPECT_TRUE(ex->captionText().contains(QStringLiteral("every rank holds all of the training state")));
  EXPECT_EQ(ex->weights().zero_stage, 0);
  const QImage replicated = ex->grab().toImage();
  ASSERT_TRUE(w.launcher()->setFieldText(QStringLiteral("train.zero_stage"), QStringLiteral("3")));
  EXPECT_EQ(ex->weights().zero_stage, 3);
  EXPECT_EQ(ex->stage(), 6);
  EXPECT_GT(ex->weights().gather_bytes_per_layer, 0);
  const QString cap = ex->captionText();
  EXPECT_TRUE(cap.contains(QStringLiteral("ZeRO stage 3"))) << cap.toStdString();
  EXPECT_TRUE(cap.contains(
      QString::fromStdString(cost::format_bytes(double(ex->weights().gather_bytes_per_layer))).toHtmlEscaped()))
      << cap.toStdString();
  EXPECT_NE(ex->grab().toImage(), replicated);  // the bars now show pieces
  // The explainer SVG export has no vector form of this stage: the image export takes it.
  QTemporaryDir tmp;
  ASSERT_TRUE(w.exportCurrentView(tmp.filePath(QStringLiteral("weights.svg")), &err)) << err.toStdString();
}

// With a run open, the weights stage links to the run's measured memory by category (docs/STUDIO.md):
// the link asks for the memory view; without a run there is no link.
TEST_F(ExplainViewInStudio, WeightsStageLinksToTheRunsMemory) {
  ExplainView view;  // a view of its own: no run is open in the fixture's window
  RunConfig cfg;
  cfg.train.zero_stage = 1;
  view.setConfig(cfg);
  ASSERT_TRUE(view.setStage(6));
  EXPECT_FALSE(view.captionText().contains(QStringLiteral("href=\"memory\"")));
  view.setStageTimes(std::vector<StageTime>(kExplainStageCount), QStringLiteral("run-7"));
  EXPECT_TRUE(view.captionText().contains(QStringLiteral("href=\"memory\""))) << view.captionText().toStdString();
  QSignalSpy asked(&view, &ExplainView::memoryRequested);
  auto* title = view.findChild<QLabel*>(QStringLiteral("explainTitle"));  // the caption (it scrolls)
  ASSERT_NE(title, nullptr);
  emit title->linkActivated(QStringLiteral("memory"));
  EXPECT_EQ(asked.count(), 1);
}

#include <QImage>
#include "export_image.hpp"

TEST(ExportImage, PngOfAnyViewAndSvgOfTheExplainer) {
  MainWindow w;
  w.setQuiet(true);
  QString err;
  ASSERT_TRUE(w.launcher()->loadConfigFile(QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs/tiny.json"), &err));
  auto* ex = w.findChild<ExplainView*>();
  ex->resize(900, 500);
  QTemporaryDir tmp;
  const QString png = tmp.filePath(QStringLiteral("explain.png"));
  ASSERT_TRUE(exportWidgetImage(ex, png, &err)) << err.toStdString();
  const QImage img(png);
  EXPECT_EQ(img.size(), ex->grab().size());
  EXPECT_FALSE(exportWidgetImage(ex, tmp.filePath(QStringLiteral("no/such/dir/x.png")), &err));
  EXPECT_TRUE(err.contains(QLatin1String("cannot write")));
  // SVG of the seq->head stage: one block per (rank, tensor) the model lists, sizes in the text.
  const QString svg = explainStageSvg(ex->explanation(), 2);
  EXPECT_TRUE(svg.startsWith(QLatin1String("<svg")));
  EXPECT_EQ(svg.count(QLatin1String("class=\"block\"")), 4);  // 2 ranks x (q, kv)
  EXPECT_TRUE(svg.contains(QLatin1String("sends 64.0 KiB"))) << svg.toStdString();
  EXPECT_TRUE(explainStageSvg(ex->explanation(), 9).isEmpty());
}

#include <QAction>
#include <QApplication>

TEST(PresentationMode, LargerFontsAndBackAgain) {
  MainWindow w;
  auto* a = w.findChild<QAction*>(QStringLiteral("presentationMode"));
  ASSERT_NE(a, nullptr);
  const double normal = QApplication::font().pointSizeF();
  a->setChecked(true);
  EXPECT_DOUBLE_EQ(QApplication::font().pointSizeF(), normal * 1.5);
  EXPECT_EQ(QApplication::palette().color(QPalette::WindowText), QColor(Qt::black));
  a->setChecked(false);
  EXPECT_DOUBLE_EQ(QApplication::font().pointSizeF(), normal);
}

#include "trace/timeline_index.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_view.hpp"

TEST_F(ReplayMonitor, TimelineFollowsTheReplayToTheLastStep) {
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  auto* tl = w.traceView()->timeline();
  ASSERT_NE(tl, nullptr);
  ASSERT_TRUE(w.monitor()->replayRun(run_, 0.0, &err)) << err.toStdString();
  for (int i = 0; i < 5; ++i) {
    w.monitor()->replayStep();
    EXPECT_EQ(tl->index()->steps()[size_t(tl->currentStep())].step, i) << "timeline not on replayed step " << i;
  }
  EXPECT_EQ(tl->currentStep(), 4);
  // The cursor drawn on the timeline reached the last step's end.
  EXPECT_EQ(tl->cursorTime(), tl->index()->steps().back().end_ns);
}

// At 2x the cursor sweeps the timeline forward, step after step, and stops at the last
// step's end.
TEST_F(ReplayMonitor, TimelineCursorSweepsDuringTimedReplay) {
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  auto* tl = w.traceView()->timeline();
  std::vector<qint64> seen;
  QObject::connect(w.monitor(), &MonitorPage::replayCursor, tl, [&] { seen.push_back(tl->cursorTime()); });
  QSignalSpy done(w.monitor(), &MonitorPage::replayFinished);
  ASSERT_TRUE(w.monitor()->replayRun(run_, 2.0, &err)) << err.toStdString();  // 1 s of run time in 0.5 s
  ASSERT_TRUE(done.wait(10000));
  ASSERT_GE(seen.size(), 3u) << "the cursor moved only " << seen.size() << " times";
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  const auto& steps = tl->index()->steps();
  EXPECT_GE(seen.front(), steps.front().start_ns);
  EXPECT_EQ(tl->cursorTime(), steps.back().end_ns);
  EXPECT_EQ(tl->currentStep(), int64_t(steps.size()) - 1);
}
