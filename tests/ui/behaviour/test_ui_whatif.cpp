// "What if" in the studio (docs/STUDIO.md): the model's parsing of ulysses-run's outputs and its
// table, and the real What-if page driving the real ulysses-run (`--simulate list`, `--simulate HW
// --json`, `--calibrate RUN`) as subprocesses: the shipped hardware listed, the launcher's config
// simulated beside its plan, a bad hardware file's error shown without a hang, and a measured run
// calibrated to, changed (head chunks), simulated and compared with. Also the memory view's named
// peak tables of a measured CPU run (ULYSSES_PEAK_TENSORS), measured beside planned. Process tests
// skip when ulysses-run is not built. ULYSSES_WHATIF_SCREENSHOT=FILE.png saves the What-if page,
// ULYSSES_MEMORY_SCREENSHOT=FILE.png the trace view's memory page.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "run_config.hpp"
#include "trace/memory_view.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "whatif_model.hpp"
#include "whatif_page.hpp"

using namespace ulysses;
using namespace ulysses::ui;
using json = nlohmann::json;

namespace {

QString ulyssesRun() {
  const QString env = qEnvironmentVariable("ULYSSES_RUN");
  const QString p = env.isEmpty() ? QStringLiteral(ULYSSES_RUN_PATH) : env;
  const QFileInfo fi(p);
  return fi.isFile() && fi.isExecutable() ? fi.absoluteFilePath() : QString();
}

// The e2e tests' tiny model (tests/common/e2e_util.hpp): 2 layers, hidden 32, 64 tokens.
json tinyConfig(int sp, int steps) {
  return {{"name", "whatif-tiny"},
          {"model",
           {{"vocab_size", 256},
            {"hidden_size", 32},
            {"intermediate_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2}}},
          {"parallel", {{"sp_size", sp}, {"dp_size", 1}, {"timeout_s", 60}}},
          {"train",
           {{"seq_length", 64},
            {"steps", steps},
            {"lr", 0.01},
            {"warmup_steps", 1},
            {"min_lr", 0.001},
            {"threads_per_rank", 1}}},
          {"data", {{"kind", "synthetic"}}},
          {"profile", {{"enabled", true}}}};
}

json readJson(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return json();
  return json::parse(f.readAll().toStdString(), nullptr, false);
}

QString cell(const WhatIfModel& m, int row, int col) { return m.data(m.index(row, col)).toString(); }

// Waits for the page's finished(ok); false on timeout (the test then fails, never hangs).
bool waitFinished(WhatIfPage& p, QSignalSpy& spy, int seconds) {
  for (int i = 0; i < seconds * 10 && spy.isEmpty(); ++i) spy.wait(100);
  return !spy.isEmpty() && !p.busy();
}

class WhatIfProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = ulyssesRun();
    if (run_.isEmpty()) GTEST_SKIP() << "ulysses-run is not built";
    qputenv("ULYSSES_RUN", run_.toLocal8Bit());
    if (QFileInfo(QStringLiteral(ULYSSES_WORKER_PATH)).isExecutable())
      qputenv("ULYSSES_WORKER", QByteArrayLiteral(ULYSSES_WORKER_PATH));
    ASSERT_TRUE(tmp_.isValid());
  }
  // A page with the shipped hardware listed.
  std::unique_ptr<WhatIfPage> page() {
    auto p = std::make_unique<WhatIfPage>();
    p->setOutputFolder(tmp_.filePath(QStringLiteral("runs")));
    QSignalSpy listed(p.get(), &WhatIfPage::hardwareListed);
    for (int i = 0; i < 600 && listed.isEmpty(); ++i) listed.wait(100);
    EXPECT_FALSE(listed.isEmpty()) << "ulysses-run --simulate list did not finish";
    p->resize(1100, 650);
    p->show();
    return p;
  }
  // A measured run of tinyConfig(sp, steps) in the scratch folder.
  QString measuredRun(int sp, int steps) {
    const QString cfgPath = tmp_.filePath(QStringLiteral("measured.json"));
    QFile f(cfgPath);
    EXPECT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(QByteArray::fromStdString(tinyConfig(sp, steps).dump(2)));
    f.close();
    const QString out = tmp_.filePath(QStringLiteral("measured-run"));
    QProcess train;
    train.setProcessChannelMode(QProcess::MergedChannels);
    train.start(run_, {cfgPath, QStringLiteral("--out"), out});
    EXPECT_TRUE(train.waitForFinished(240000));
    EXPECT_EQ(train.exitCode(), 0) << train.readAll().toStdString();
    return out;
  }
  QString run_;
  QTemporaryDir tmp_;
};

}  // namespace

TEST(WhatIfModel, ParsesTheSimulatorsOutputsAndSetsOnlyWhatChanges) {
  const QString list = QStringLiteral(
      "Shipped hardware descriptions (/x/resources/hardware):\n"
      "  a100-sxm-x8  8 x A100 SXM 80 GB, NVLink 3\n"
      "  cpu-ranks  this machine's CPU ranks (nominal)\n"
      "  h200-x8  8 x H200 141 GB\n"
      "Or give the path of a JSON file (e.g. one ulysses-run --calibrate wrote).\n");
  EXPECT_EQ(parseHardwareList(list),
            (QStringList{QStringLiteral("a100-sxm-x8"), QStringLiteral("cpu-ranks"), QStringLiteral("h200-x8")}));
  QString err;
  const auto s = SimFigures::fromJson(
      R"({"hardware":"h200-x8","world_size":8,"step_ms":125,"tokens_per_s":1000,"compute_ms":100,"comm_ms":30,"out":"/r"})",
      &err);
  ASSERT_TRUE(s.has_value()) << err.toStdString();
  EXPECT_DOUBLE_EQ(s->stepMs, 125.0);
  EXPECT_EQ(s->worldSize, 8);
  EXPECT_FALSE(SimFigures::fromJson("simulated on h200-x8: step 3 ms", &err).has_value());
  EXPECT_FALSE(SimFigures::fromJson(R"({"hardware":"x","step_ms":0,"out":"/r"})", &err).has_value());

  const json base = {{"parallel", {{"sp_size", 2}}}, {"train", {{"zero_stage", 0}}}};
  WhatIfChanges ch;
  ch.spSize = 2;  // as the base: not set
  ch.ringSize = 1;
  ch.headChunks = 2;
  ch.zeroStage = 3;
  EXPECT_EQ(ch.setArguments(base), (QStringList{QStringLiteral("--set"), QStringLiteral("parallel.head_chunks=2"),
                                                QStringLiteral("--set"), QStringLiteral("train.zero_stage=3")}));
  ch.spSize = 4;
  EXPECT_TRUE(ch.setArguments(base).contains(QStringLiteral("parallel.sp_size=4")));

  WhatIfModel m;
  QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::Fatal);
  EXPECT_EQ(cell(m, WhatIfModel::StepTime, WhatIfModel::Ratio), QString());
  m.setSimulated(*s);
  MeasuredStats meas;
  meas.steps = 3;
  meas.medianStepMs = 100.0;
  meas.tokensPerS = 800;
  m.setMeasured(meas);
  EXPECT_EQ(cell(m, WhatIfModel::StepTime, WhatIfModel::Ratio), QStringLiteral("1.25x"));
  EXPECT_NEAR(m.stepRatio(), 1.25, 1e-12);
  EXPECT_EQ(cell(m, WhatIfModel::TokensPerS, WhatIfModel::Simulated), QStringLiteral("1000"));
  EXPECT_EQ(cell(m, WhatIfModel::PeakMemory, WhatIfModel::Plan), QString());
  PlanFigures plan;
  plan.peakBytes = 3 * 1024 * 1024;
  m.setPlan(plan);
  EXPECT_FALSE(cell(m, WhatIfModel::PeakMemory, WhatIfModel::Plan).isEmpty());
  EXPECT_EQ(lastErrorLine(QStringLiteral("note: x\nulysses-worker --simulate: bad thing\n\n"), 2),
            QStringLiteral("ulysses-worker --simulate: bad thing"));
}

// The shipped hardware in the choice; the launcher's config simulated on h200-x8 beside its plan
// and estimate; the change of sp reaches the simulated run's config.
TEST_F(WhatIfProcess, SimulatesTheLaunchersConfigOnChosenHardwareBesideThePlan) {
  auto p = page();
  for (const char* hw : {"h100-sxm-x8", "h200-x8", "a100-sxm-x8", "h100-ib-cluster", "cpu-ranks"})
    EXPECT_TRUE(p->hardwareNames().contains(QString::fromLatin1(hw))) << hw;
  const json cfg = tinyConfig(1, 2);
  PlanFigures plan;
  plan.peakBytes = 5 * 1024 * 1024;
  p->setLauncherConfig(cfg, cost::estimate(RunConfig::from_json(cfg)), plan);
  EXPECT_EQ(p->spBox()->value(), 1);
  ASSERT_TRUE(p->selectHardware(QStringLiteral("h200-x8")));
  QSignalSpy done(p.get(), &WhatIfPage::finished);
  QTest::mouseClick(p->simulateButton(), Qt::LeftButton);
  EXPECT_TRUE(p->busy());
  EXPECT_TRUE(p->progress()->isVisible());
  EXPECT_EQ(p->simulateButton()->text(), QStringLiteral("Cancel"));
  ASSERT_TRUE(waitFinished(*p, done, 120)) << p->statusText().toStdString();
  ASSERT_TRUE(done.takeFirst().at(0).toBool()) << p->statusText().toStdString();
  EXPECT_FALSE(p->progress()->isVisible());
  const WhatIfModel& m = *p->model();
  EXPECT_FALSE(cell(m, WhatIfModel::StepTime, WhatIfModel::Simulated).isEmpty());
  EXPECT_FALSE(cell(m, WhatIfModel::StepTime, WhatIfModel::Estimate).isEmpty());
  EXPECT_FALSE(cell(m, WhatIfModel::PeakMemory, WhatIfModel::Plan).isEmpty());
  EXPECT_TRUE(p->statusText().contains(QStringLiteral("Simulated on h200-x8"))) << p->statusText().toStdString();
  const QString run1 = p->lastSimulatedRun();
  ASSERT_TRUE(run1.startsWith(tmp_.filePath(QStringLiteral("runs")))) << run1.toStdString();
  const json rec = readJson(QDir(run1).filePath(QStringLiteral("run.json")));
  ASSERT_TRUE(rec.contains("simulated")) << rec.dump();
  EXPECT_EQ(rec["simulated"]["hardware"], "h200-x8");
  EXPECT_TRUE(p->openButton()->isEnabled());
  EXPECT_FALSE(p->compareButton()->isEnabled());  // no measured run to compare with

  // sp 2: the change is simulated (the run folder's config says so), one rank file per rank.
  p->spBox()->setValue(2);
  QTest::mouseClick(p->simulateButton(), Qt::LeftButton);
  ASSERT_TRUE(waitFinished(*p, done, 120)) << p->statusText().toStdString();
  ASSERT_TRUE(done.takeFirst().at(0).toBool()) << p->statusText().toStdString();
  const QString run2 = p->lastSimulatedRun();
  EXPECT_NE(run2, run1);
  EXPECT_EQ(readJson(QDir(run2).filePath(QStringLiteral("config.json")))["parallel"]["sp_size"], 2);
  EXPECT_TRUE(QFileInfo::exists(QDir(run2).filePath(QStringLiteral("trace/rank1.sqlite"))));
  EXPECT_EQ(p->model()->simulated().worldSize, 2);
}

// A hardware file the simulator refuses: its message on the page, finished(false), no hang.
TEST_F(WhatIfProcess, ABadHardwareFileShowsTheSimulatorsMessage) {
  auto p = page();
  const QString bad = tmp_.filePath(QStringLiteral("bad-hw.json"));
  {
    QFile f(bad);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("{\"name\": \"broken\"");
  }
  p->addHardwareFile(bad);
  EXPECT_EQ(p->hardwareBox()->currentData().toString(), QFileInfo(bad).absoluteFilePath());
  p->setLauncherConfig(tinyConfig(1, 2), std::nullopt, std::nullopt);
  QSignalSpy done(p.get(), &WhatIfPage::finished);
  QTest::mouseClick(p->simulateButton(), Qt::LeftButton);
  ASSERT_TRUE(waitFinished(*p, done, 60));
  EXPECT_FALSE(done.takeFirst().at(0).toBool());
  EXPECT_TRUE(p->statusText().startsWith(QStringLiteral("simulation failed: "))) << p->statusText().toStdString();
  EXPECT_TRUE(p->statusText().contains(QStringLiteral("bad-hw.json"))) << p->statusText().toStdString();
  EXPECT_EQ(p->simulateButton()->text(), QStringLiteral("Simulate"));
  EXPECT_FALSE(p->model()->hasSimulated());
}

// A measured run (2 CPU ranks, sp 2): calibrated to, changed to 2 head chunks, simulated; the
// Measured column holds its median step, the ratio is shown, and Compare hands both folders on.
TEST_F(WhatIfProcess, CalibratesFromAMeasuredRunAndComparesTheSimulatedStepWithIt) {
  const QString measured = measuredRun(2, 4);
  ASSERT_FALSE(HasFailure());

  auto p = page();
  QString err;
  ASSERT_TRUE(p->setMeasuredRun(measured, &err)) << err.toStdString();
  EXPECT_EQ(p->spBox()->value(), 2);  // the run's own config is the base
  EXPECT_EQ(p->hardwareBox()->currentData().toString(), QStringLiteral("cpu-ranks"));
  EXPECT_TRUE(p->calibrateBox()->isEnabled());
  EXPECT_FALSE(cell(*p->model(), WhatIfModel::StepTime, WhatIfModel::Measured).isEmpty());
  p->chunksBox()->setValue(2);
  QSignalSpy done(p.get(), &WhatIfPage::finished);
  QTest::mouseClick(p->simulateButton(), Qt::LeftButton);
  EXPECT_TRUE(p->statusText().contains(QStringLiteral("Calibrating"))) << p->statusText().toStdString();
  ASSERT_TRUE(waitFinished(*p, done, 180)) << p->statusText().toStdString();
  ASSERT_TRUE(done.takeFirst().at(0).toBool()) << p->statusText().toStdString();
  const QString sim = p->lastSimulatedRun();
  const json rec = readJson(QDir(sim).filePath(QStringLiteral("run.json")));
  ASSERT_TRUE(rec.contains("simulated")) << rec.dump();
  // The calibrated description records the run it came from (engine/sim/calibrate.cpp).
  EXPECT_NE(rec["simulated"].dump().find("measured-run"), std::string::npos) << rec.dump();
  EXPECT_EQ(readJson(QDir(sim).filePath(QStringLiteral("config.json")))["parallel"]["head_chunks"], 2);
  const double r = p->model()->stepRatio();
  EXPECT_TRUE(std::isfinite(r) && r > 0) << r;
  EXPECT_FALSE(cell(*p->model(), WhatIfModel::StepTime, WhatIfModel::Ratio).isEmpty());
  EXPECT_TRUE(p->statusText().contains(QStringLiteral("Simulated / measured step"))) << p->statusText().toStdString();
  std::printf("calibrated from %s: simulated %.2f ms (head_chunks 2) vs measured %.2f ms (head_chunks 1)\n",
              qPrintable(measured), p->model()->simulated().stepMs, p->model()->simulated().stepMs / r);

  ASSERT_TRUE(p->compareButton()->isEnabled());
  QSignalSpy cmp(p.get(), &WhatIfPage::compareRequested);
  QTest::mouseClick(p->compareButton(), Qt::LeftButton);
  ASSERT_EQ(cmp.count(), 1);
  EXPECT_EQ(cmp.at(0).at(0).toString(), QDir(measured).absolutePath());
  EXPECT_EQ(cmp.at(0).at(1).toString(), sim);
  // A simulated run is no measured one to calibrate to.
  EXPECT_FALSE(p->setMeasuredRun(sim, &err));
  EXPECT_TRUE(err.contains(QStringLiteral("itself simulated"))) << err.toStdString();
  const QString shot = qEnvironmentVariable("ULYSSES_WHATIF_SCREENSHOT");
  if (!shot.isEmpty()) {
    QApplication::processEvents();  // the status label's new height
    EXPECT_TRUE(p->grab().save(shot));
  }
}

// The memory view of a measured 2-rank CPU run: rank 0's named groups at its measured peak beside
// the plan's (rank 0 writes the plan), each table largest first.
TEST_F(WhatIfProcess, MemoryViewShowsTheNamedPeakTableBesideThePlannedOne) {
  const QString measured = measuredRun(2, 3);
  ASSERT_FALSE(HasFailure());
  TraceView tv;
  tv.resize(1280, 800);
  QString err;
  ASSERT_TRUE(tv.openTraceAndWait(measured, &err)) << err.toStdString();
  ASSERT_TRUE(tv.setView(QStringLiteral("memory")));
  tv.show();
  QApplication::processEvents();
  auto* mv = tv.findChild<MemoryView*>();
  ASSERT_NE(mv, nullptr);
  ASSERT_EQ(mv->categoryRank(), 0);
  TableModel* named = mv->namedPeakTable();
  TableModel* planned = mv->plannedPeakTable();
  ASSERT_GT(named->rowCount(), 0);
  ASSERT_GT(planned->rowCount(), 0);
  EXPECT_EQ(named->headerData(0, Qt::Horizontal).toString(), QStringLiteral("name"));
  EXPECT_EQ(named->headerData(3, Qt::Horizontal).toString(), QStringLiteral("shape"));
  qint64 sums[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    TableModel* t = k == 0 ? named : planned;
    qint64 prev = INT64_MAX;
    for (int r = 0; r < t->rowCount(); ++r) {
      const qint64 b = t->data(t->index(r, 4), TableModel::SortRole).toLongLong();
      EXPECT_LE(b, prev);
      prev = b;
      sums[k] += b;
    }
  }
  // The measured rows add up to rank 0's measured peak (the analysis core's figure).
  int64_t peak = -1;
  for (const auto& r : prof::memory_by_category(*tv.model()))
    if (r.rank == 0) peak = r.peak_bytes;
  EXPECT_EQ(sums[0], peak);
  // The planned table is the plan's: its first row is `ulysses-run CONFIG --plan --json`'s first peak tensor.
  QProcess plan;
  plan.start(run_, {QDir(measured).filePath(QStringLiteral("config.json")), QStringLiteral("--plan"),
                    QStringLiteral("--json")});
  ASSERT_TRUE(plan.waitForFinished(120000));
  const json pj = json::parse(plan.readAllStandardOutput().toStdString(), nullptr, false);
  ASSERT_TRUE(pj.contains("peak_tensors")) << pj.dump();
  EXPECT_EQ(planned->data(planned->index(0, 0)).toString().toStdString(),
            pj["peak_tensors"][0]["name"].get<std::string>());
  EXPECT_EQ(planned->rowCount(), std::min<int>(static_cast<int>(pj["peak_tensors"].size()), 64));
  auto* view = tv.findChild<QTableView*>(QStringLiteral("namedPeakTable"));
  ASSERT_NE(view, nullptr);
  EXPECT_TRUE(view->isVisibleTo(&tv));
  const QString shot = qEnvironmentVariable("ULYSSES_MEMORY_SCREENSHOT");
  if (!shot.isEmpty()) {
    EXPECT_TRUE(tv.grab().save(shot));
  }
}
