// Resume lineage (docs/STUDIO.md), on run folders written by this test: a resumed run links to
// the run it resumed on the Runs page (a "Resumed from" column; a double-click on it goes to that
// run), and its monitor charts show the whole history, the earlier runs' steps before each
// resume, marked where it resumed.
//
//   A  save_to CK, steps 0..9 (loss 100 + step), started 12:00
//   B  resume_from CK/step-00000006, save_to CK, steps 6..11 (loss 200 + step), started 13:00
//   C  resume_from CK (the folder), save_to CK, steps 10..13 (loss 300 + step), started 14:00
//   Z  save_to CK, steps 0..3, started 15:00 (after all: resumed by none of them)
//   D  save_to another folder, started 11:00
// So C's history is A 0..5, B 6..9, C 10..13, resumed at 6 and 10.
#include <gtest/gtest.h>

#include <QAbstractItemModel>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <memory>

#include "metric_chart.hpp"
#include "monitor_page.hpp"
#include "run_controller.hpp"
#include "run_lineage.hpp"
#include "runs_model.hpp"
#include "runs_page.hpp"

using namespace ulysses::ui;

namespace {

double tokensPerS(int run, int step) { return 1000.0 * run + step; }

void writeRun(const QString& dir, const QJsonObject& train, int first, int last, int lossBase, const QString& started) {
  ASSERT_TRUE(QDir().mkpath(dir));
  QJsonObject cfg{{"name", QFileInfo(dir).fileName()}, {"train", train}};
  QFile c(dir + "/config.json");
  ASSERT_TRUE(c.open(QIODevice::WriteOnly));
  c.write(QJsonDocument(cfg).toJson());
  QFile m(dir + "/metrics.jsonl");
  ASSERT_TRUE(m.open(QIODevice::WriteOnly));
  for (int s = first; s <= last; ++s) {
    const QJsonObject p{{"step", s},
                        {"steps", 14},
                        {"loss", lossBase + s},
                        {"tokens_per_s", tokensPerS(lossBase / 100, s)},
                        {"step_ms", 10.0},
                        {"max_mem_bytes", 1 << 20},
                        {"tokens", 1024},
                        {"elapsed_s", 0.01 * (s - first + 1)}};
    m.write(QJsonDocument(p).toJson(QJsonDocument::Compact) + "\n");
  }
  const QJsonObject run{{"status", "stopped"}, {"started_at", started}, {"ended_at", started},   {"duration_s", 1.0},
                        {"world_size", 1},     {"exit_code", 0},        {"steps_done", last + 1}};
  QFile r(dir + "/run.json");
  ASSERT_TRUE(r.open(QIODevice::WriteOnly));
  r.write(QJsonDocument(run).toJson());
}

class Lineage : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp.isValid());
    runs = tmp.filePath("runs");
    const QString ck = tmp.filePath("ckpt"), other = tmp.filePath("other");
    writeRun(runs + "/A", {{"save_to", ck}}, 0, 9, 100, "2026-11-30T12:00:00.000Z");
    writeRun(runs + "/B", {{"save_to", ck}, {"resume_from", ck + "/step-00000006"}}, 6, 11, 200,
             "2026-11-30T13:00:00.000Z");
    writeRun(runs + "/C", {{"save_to", ck}, {"resume_from", ck}}, 10, 13, 300, "2026-11-30T14:00:00.000Z");
    writeRun(runs + "/Z", {{"save_to", ck}}, 0, 3, 900, "2026-11-30T15:00:00.000Z");
    writeRun(runs + "/D", {{"save_to", other}}, 0, 3, 400, "2026-11-30T11:00:00.000Z");
  }
  QTemporaryDir tmp;
  QString runs;
};

TEST_F(Lineage, RunsPageLinksAResumedRunToTheRunItResumed) {
  RunsPage page;
  page.resize(1200, 600);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  page.setRunsDir(runs);
  RunsModel* m = page.model();
  ASSERT_EQ(m->rowCount(), 5);
  EXPECT_EQ(m->headerData(RunsModel::ResumedFrom, Qt::Horizontal).toString(), "Resumed from");
  auto from = [&](const QString& name) {
    const int row = m->rowOfDir(runs + "/" + name);
    EXPECT_GE(row, 0) << name.toStdString();
    return m->index(row, RunsModel::ResumedFrom).data().toString();
  };
  EXPECT_EQ(from("A"), "");
  EXPECT_EQ(from("B"), "A");
  EXPECT_EQ(from("C"), "B");  // B saved to CK last before C started (Z started after it)
  EXPECT_EQ(from("Z"), "");
  EXPECT_EQ(from("D"), "");
  EXPECT_EQ(resumedFromRun(runs + "/C"), QFileInfo(runs + "/B").absoluteFilePath());
  QString why;
  EXPECT_TRUE(resumedFromRun(runs + "/A", &why).isEmpty());
  EXPECT_TRUE(why.contains("not resumed")) << why.toStdString();

  // A double-click on C's "Resumed from" cell goes to B (selected), then on B's to A.
  auto* view = page.findChild<QTableView*>(QStringLiteral("runs"));
  ASSERT_NE(view, nullptr);
  for (const auto& [name, want] : {std::pair{"C", "B"}, std::pair{"B", "A"}}) {
    QModelIndex cell;
    for (int r = 0; r < view->model()->rowCount(); ++r) {
      const QModelIndex i = view->model()->index(r, RunsModel::ResumedFrom);
      if (QFileInfo(i.data(RunsModel::DirRole).toString()).fileName() == name) cell = i;
    }
    ASSERT_TRUE(cell.isValid()) << name;
    view->scrollTo(cell);
    const QPoint at = view->visualRect(cell).center();
    QTest::mouseClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, at);
    QTest::mouseDClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, at);
    ASSERT_EQ(page.selectedDirs().size(), 1);
    EXPECT_EQ(QFileInfo(page.selectedDirs().front()).fileName().toStdString(), want) << "from " << name;
  }
}

TEST_F(Lineage, MonitorChartsShowTheWholeHistoryMarkedWhereItResumed) {
  RunController ctl;
  MonitorPage page(&ctl);
  page.resize(1200, 800);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  page.showRun(runs + "/C");
  const QList<QPointF> loss = page.chartValues(0), tps = page.chartValues(1);
  ASSERT_EQ(loss.size(), 14);
  ASSERT_EQ(tps.size(), 14);
  for (int s = 0; s < 14; ++s) {
    const int base = s < 6 ? 100 : s < 10 ? 200 : 300;
    EXPECT_EQ(loss[s].x(), s);
    EXPECT_EQ(loss[s].y(), base + s) << "step " << s;
    EXPECT_EQ(tps[s].y(), tokensPerS(base / 100, s)) << "step " << s;
  }
  const auto charts = page.findChildren<MetricChart*>();
  ASSERT_EQ(charts.size(), 3);
  for (MetricChart* c : charts) {
    EXPECT_EQ(c->markers(), (QList<double>{6, 10}));
    // Drawn: the dashed orange mark at step 6 crosses the plot.
    const QImage img = c->grab().toImage();
    const int x = c->markerPixelX(6);
    int orange = 0;
    for (int y = 0; y < img.height(); ++y)
      for (int dx = -1; dx <= 1; ++dx) {
        const QColor p = img.pixelColor(std::clamp(x + dx, 0, img.width() - 1), y);
        orange += p.red() > 200 && p.green() > 100 && p.green() < 180 && p.blue() < 60;
      }
    EXPECT_GT(orange, 20) << "no resume mark drawn at x " << x;
  }
  // A run that was not resumed: its own steps, no marks.
  page.showRun(runs + "/A");
  EXPECT_EQ(page.chartValues(0).size(), 10);
  for (MetricChart* c : charts) EXPECT_TRUE(c->markers().isEmpty());
  // B: A's 0..5 then its own 6..11.
  const RunLineage b = runLineage(runs + "/B");
  ASSERT_EQ(b.points.size(), 12);
  EXPECT_EQ(b.resumeSteps, QVector<int>{6});
  EXPECT_EQ(b.runs.size(), 2);
  EXPECT_EQ(b.points[5].loss, 105);
  EXPECT_EQ(b.points[6].loss, 206);
}

}  // namespace
