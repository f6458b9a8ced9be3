// Studio item models and run-directory readers, without any window: every model runs under
// QAbstractItemModelTester, and the readers are fed run folders written here.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QAbstractItemModelTester>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include "axis_ticks.hpp"
#include "compare_model.hpp"
#include "cost_model.hpp"
#include "device_info.hpp"
#include "estimate_model.hpp"
#include "rank_status_model.hpp"
#include "run_data.hpp"
#include "runs_model.hpp"
#include "ui/run_fixture.hpp"

using namespace ulysses::ui;

namespace {

// Counts QAbstractItemModelTester complaints (category qt.modeltest).
int g_modelTestWarnings = 0;
QtMessageHandler g_previous = nullptr;
void handler(QtMsgType t, const QMessageLogContext& ctx, const QString& msg) {
  if (ctx.category && QByteArray(ctx.category).startsWith("qt.modeltest") && t >= QtWarningMsg) ++g_modelTestWarnings;
  if (g_previous) g_previous(t, ctx, msg);
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_modelTestWarnings = 0;
    g_previous = qInstallMessageHandler(handler);
  }
  void TearDown() override {
    qInstallMessageHandler(g_previous);
    EXPECT_EQ(g_modelTestWarnings, 0) << "QAbstractItemModelTester reported problems (see the log)";
  }
  static QAbstractItemModelTester* tester(QAbstractItemModel* m) {
    return new QAbstractItemModelTester(m, QAbstractItemModelTester::FailureReportingMode::Warning, m);
  }
};

void writeFile(const QString& path, const QByteArray& data) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate)) << path.toStdString();
  f.write(data);
}

QByteArray metricJson(int step, int steps, double loss, double stepMs, qint64 mem, double elapsed) {
  return QStringLiteral(
             "{\"step\":%1,\"steps\":%2,\"loss\":%3,\"lr\":0.001,\"grad_norm\":1.5,\"tokens\":512,\"tokens_per_s\":%4,"
             "\"step_ms\":%5,\"max_mem_bytes\":%6,\"elapsed_s\":%7}")
      .arg(step)
      .arg(steps)
      .arg(loss, 0, 'g', 17)
      .arg(512.0 / (stepMs / 1e3), 0, 'g', 17)
      .arg(stepMs, 0, 'g', 17)
      .arg(mem)
      .arg(elapsed, 0, 'g', 17)
      .toUtf8();
}

// A run folder as ulysses-run leaves it.
void makeRun(const QString& dir, const QString& status, int steps, int done, double finalLoss, int failedRank = -1,
             int sp = 2, bool withRunJson = true) {
  writeFile(dir + "/config.json",
            QStringLiteral("{\"model\":{\"hidden_size\":64,\"num_attention_heads\":4},"
                           "\"parallel\":{\"sp_size\":%1,\"dp_size\":1},\"train\":{\"steps\":%2,\"lr\":0.003}}")
                .arg(sp)
                .arg(steps)
                .toUtf8());
  QByteArray metrics;
  for (int s = 0; s < done; ++s)
    metrics += metricJson(s, steps, s + 1 == done ? finalLoss : 5.0 - s * 0.1, s == 0 ? 900.0 : 100.0 + s, 1000 + s,
                          0.1 * (s + 1)) +
               "\n";
  writeFile(dir + "/metrics.jsonl", metrics);
  if (withRunJson) {
    QString run =
        QStringLiteral(
            "{\"status\":\"%1\",\"started_at\":\"2026-01-02T03:04:05Z\",\"ended_at\":\"2026-01-02T03:05:05Z\","
            "\"duration_s\":60.5,\"world_size\":%2,\"exit_code\":%3,\"final_loss\":%4,\"steps_done\":%5")
            .arg(status)
            .arg(sp)
            .arg(status == "failed" ? 1 : 0)
            .arg(finalLoss, 0, 'g', 17)
            .arg(done);
    if (failedRank >= 0)
      run += QStringLiteral(",\"failed_rank\":%1,\"message\":\"rank %1 exited with code 1\"").arg(failedRank);
    else
      run += QStringLiteral(",\"failed_rank\":null,\"message\":\"\"");
    writeFile(dir + "/run.json", (run + "}").toUtf8());
  }
}

TEST(RunData, ParsesMetricLines) {
  MetricPoint p;
  ASSERT_TRUE(parseMetricLine("METRIC " + metricJson(2, 10, 4.25, 120.0, 4096, 1.5), &p));
  EXPECT_EQ(p.step, 2);
  EXPECT_EQ(p.steps, 10);
  EXPECT_DOUBLE_EQ(p.loss, 4.25);
  EXPECT_DOUBLE_EQ(p.step_ms, 120.0);
  EXPECT_EQ(p.max_mem_bytes, 4096);
  EXPECT_DOUBLE_EQ(p.elapsed_s, 1.5);
  ASSERT_TRUE(parseMetricLine(metricJson(0, 1, 1.0, 1.0, 1, 1.0) + "\n", &p));
  EXPECT_EQ(p.step, 0);
  MetricPoint untouched;
  untouched.step = 77;
  EXPECT_FALSE(parseMetricLine("step 3/10 loss 4.2", &untouched));
  EXPECT_FALSE(parseMetricLine("METRIC {\"step\":1,", &untouched));
  EXPECT_FALSE(parseMetricLine("{\"step\":\"one\",\"loss\":1}", &untouched));
  EXPECT_FALSE(parseMetricLine("{\"loss\":1}", &untouched));
  EXPECT_EQ(untouched.step, 77);
}

TEST(RunData, ParsesRankLines) {
  int r = -1;
  QString t;
  ASSERT_TRUE(parseRankLine("[rank 12] step 3 loss 4.1", &r, &t));
  EXPECT_EQ(r, 12);
  EXPECT_EQ(t, "step 3 loss 4.1");
  ASSERT_TRUE(parseRankLine("[rank 0]", &r, &t));
  EXPECT_EQ(r, 0);
  EXPECT_TRUE(t.isEmpty());
  EXPECT_FALSE(parseRankLine("ulysses-run: starting 4 workers", &r, &t));
  EXPECT_FALSE(parseRankLine("[rank x] nope", &r, &t));
}

TEST(RunData, MeasureSkipsWarmupStep) {
  QVector<MetricPoint> pts;
  for (int s = 0; s < 4; ++s) {
    MetricPoint p;
    p.step = s;
    p.step_ms = s == 0 ? 5000 : 100 * s;  // 5000 (warm-up), 100, 200, 300
    p.tokens_per_s = 10.0 * (s + 1);
    p.max_mem_bytes = s == 2 ? 999 : 10;
    p.loss = 4 - s;
    p.elapsed_s = s + 1;
    pts << p;
  }
  const auto m = measure(pts);
  EXPECT_EQ(m.steps, 4);
  EXPECT_DOUBLE_EQ(m.medianStepMs, 200);  // median of 100, 200, 300
  EXPECT_DOUBLE_EQ(m.tokensPerS, 30);     // median of 20, 30, 40
  EXPECT_EQ(m.maxMemBytes, 999);
  EXPECT_DOUBLE_EQ(m.finalLoss, 1);
  EXPECT_DOUBLE_EQ(m.elapsedS, 4);
  EXPECT_EQ(measure({}).steps, 0);
}

TEST(RunData, SummaryFallsBackToMetrics) {
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("tiny_20260101-101010");
  makeRun(dir, "running", 10, 4, 3.5, -1, 2, /*withRunJson=*/false);
  ASSERT_TRUE(isRunDir(dir));
  const auto s = loadRunSummary(dir);
  EXPECT_EQ(s.status, "unknown");
  EXPECT_TRUE(s.hasFinalLoss);
  EXPECT_DOUBLE_EQ(s.finalLoss, 3.5);
  EXPECT_EQ(s.stepsDone, 4);
  EXPECT_EQ(s.steps, 10);
  EXPECT_EQ(s.worldSize, 2);
  EXPECT_EQ(s.configName, "tiny");
  EXPECT_FALSE(isRunDir(tmp.path() + "/nowhere"));
  makeRun(tmp.filePath("20260101-101010-bench-1b"), "finished", 1, 1, 1.0);
  EXPECT_EQ(loadRunSummary(tmp.filePath("20260101-101010-bench-1b")).configName, "bench-1b");
  writeFile(tmp.filePath(".studio/20260101-101010-bench-1b.json"), "{\"name\": \"bench 1b (GPU)\"}");
  EXPECT_EQ(loadRunSummary(tmp.filePath("20260101-101010-bench-1b")).configName, "bench 1b (GPU)");
}

TEST(RunData, Slug) {
  EXPECT_EQ(slug("tiny CPU demo"), "tiny-CPU-demo");
  EXPECT_EQ(slug("long sequence (GPU)"), "long-sequence-GPU");
  EXPECT_EQ(slug("  "), "run");
  EXPECT_EQ(slug("../../etc"), "etc");  // no path separators survive, nor a leading dot
}

TEST(Devices, ParsesNvidiaSmi) {
  const auto g =
      parseNvidiaSmiCsv("NVIDIA H200, 143771 MiB\nNVIDIA A100-SXM4-80GB, 81920 MiB\n\nNo devices were found\n");
  ASSERT_EQ(g.size(), 2);
  EXPECT_EQ(g[0].name, "NVIDIA H200");
  EXPECT_EQ(g[0].memoryBytes, 143771LL * 1024 * 1024);
  EXPECT_EQ(g[1].name, "NVIDIA A100-SXM4-80GB");
}

TEST(Devices, MissingOrHangingNvidiaSmi) {
  QTemporaryDir tmp;
  auto s = discoverDevices(500, tmp.filePath("no-such-nvidia-smi"));
  EXPECT_TRUE(s.gpus.isEmpty());
  EXPECT_FALSE(s.note.isEmpty());
  EXPECT_GE(s.cpuThreads, 1);
  EXPECT_EQ(s.ranksFor("auto"), s.cpuThreads);
  EXPECT_EQ(s.ranksFor("cuda"), 0);

  const QString fake = tmp.filePath("nvidia-smi");
  writeFile(fake, "#!/bin/sh\necho 'NVIDIA H200, 143771 MiB'\necho 'NVIDIA H200, 143771 MiB'\n");
  QFile::setPermissions(fake, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  s = discoverDevices(5000, fake);
  ASSERT_EQ(s.gpus.size(), 2);
  EXPECT_EQ(s.ranksFor("auto"), 2);
  EXPECT_EQ(s.ranksFor("cpu"), s.cpuThreads);

  const QString hang = tmp.filePath("hang-smi");
  writeFile(hang, "#!/bin/sh\nsleep 30\n");
  QFile::setPermissions(hang, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  QElapsedTimer t;
  t.start();
  s = discoverDevices(300, hang);
  EXPECT_LT(t.elapsed(), 5000);
  EXPECT_TRUE(s.gpus.isEmpty());
  EXPECT_TRUE(s.note.contains("did not answer"));
}

TEST_F(ModelTest, RunsModelListsRunFolders) {
  QTemporaryDir tmp;
  makeRun(tmp.filePath("tiny_20260101-101010"), "finished", 3, 3, 4.123456);
  makeRun(tmp.filePath("big_20260101-111111"), "failed", 100, 7, 5.5, 2, 4);
  makeRun(tmp.filePath("loose"), "running", 10, 2, 6.25, -1, 2, false);
  QDir(tmp.path()).mkpath("not-a-run/inner");
  QDir(tmp.path()).mkpath(".studio");
  RunsModel m;
  tester(&m);
  m.setRunsDir(tmp.path());
  ASSERT_EQ(m.rowCount(), 3);
  EXPECT_EQ(m.columnCount(), RunsModel::ColumnCount);
  const int tiny = m.rowOfDir(tmp.filePath("tiny_20260101-101010"));
  const int big = m.rowOfDir(tmp.filePath("big_20260101-111111"));
  const int loose = m.rowOfDir(tmp.filePath("loose"));
  ASSERT_GE(tiny, 0);
  ASSERT_GE(big, 0);
  ASSERT_GE(loose, 0);
  EXPECT_EQ(m.index(tiny, RunsModel::Config).data().toString(), "tiny");
  EXPECT_EQ(m.index(tiny, RunsModel::Status).data().toString(), "finished");
  EXPECT_EQ(m.index(tiny, RunsModel::FinalLoss).data().toString(), "4.1235");
  EXPECT_EQ(m.index(tiny, RunsModel::Steps).data().toString(), "3 / 3");
  EXPECT_EQ(m.index(tiny, RunsModel::Duration).data().toString(), "1 min 00 s");
  EXPECT_EQ(m.index(big, RunsModel::Status).data().toString(), "failed (rank 2)");
  EXPECT_EQ(m.index(big, RunsModel::World).data().toString(), "4");
  EXPECT_TRUE(m.index(big, 0).data(Qt::ToolTipRole).toString().contains("rank 2 exited"));
  EXPECT_EQ(m.index(loose, RunsModel::FinalLoss).data().toString(), "6.2500");  // from metrics.jsonl
  EXPECT_DOUBLE_EQ(m.run(tiny).finalLoss, 4.123456);

  // New run appears, deleted run disappears, on refresh.
  makeRun(tmp.filePath("new_20260102-000000"), "finished", 1, 1, 2.0);
  m.refresh();
  EXPECT_EQ(m.rowCount(), 4);
  ASSERT_TRUE(QDir(tmp.filePath("big_20260101-111111")).removeRecursively());
  m.refresh();
  EXPECT_EQ(m.rowCount(), 3);
  EXPECT_EQ(m.rowOfDir(tmp.filePath("big_20260101-111111")), -1);
  m.setRunsDir(tmp.filePath("missing"));
  EXPECT_EQ(m.rowCount(), 0);
}

TEST_F(ModelTest, CompareModelMarksDifferences) {
  QTemporaryDir tmp;
  makeRun(tmp.filePath("a"), "finished", 3, 3, 4.0, -1, 2);
  makeRun(tmp.filePath("b"), "finished", 5, 5, 3.0, -1, 4);
  CompareModel m;
  tester(&m);
  m.setRuns(loadRunSummary(tmp.filePath("a")), loadRunSummary(tmp.filePath("b")));
  EXPECT_EQ(m.columnCount(), 5);  // field, A, B, B - A, B / A
  EXPECT_EQ(m.headerData(CompareModel::RunA, Qt::Horizontal).toString(), "a");
  EXPECT_EQ(m.traceRows(), 0);
  const int steps = m.rowOfField("train.steps");
  const int hidden = m.rowOfField("model.hidden_size");
  const int loss = m.rowOfField("final loss");
  ASSERT_GE(steps, 0);
  ASSERT_GE(hidden, 0);
  ASSERT_GE(loss, 0);
  EXPECT_TRUE(m.index(steps, 0).data(CompareModel::DiffersRole).toBool());
  EXPECT_EQ(m.index(steps, CompareModel::RunA).data().toString(), "3");
  EXPECT_EQ(m.index(steps, CompareModel::RunB).data().toString(), "5");
  EXPECT_FALSE(m.index(hidden, 0).data(CompareModel::DiffersRole).toBool());
  EXPECT_EQ(m.index(loss, CompareModel::RunA).data().toString(), "4.0000");
  EXPECT_EQ(m.index(loss, CompareModel::RunB).data().toString(), "3.0000");
  EXPECT_GE(m.differingRows(), 3);  // steps, sp_size, loss, ...
  m.clear();
  EXPECT_EQ(m.rowCount(), 0);
}

// Two runs with traces (run_fixture.hpp, 2 ranks, rank 1's steps 1 us longer): A's steps take
// 10 ms, B's 10 ms (warm-up step 0) then 20 ms. Forward attention of layer 0 lies at
// 15-55 % of each step: per rank 0.4 x 10 ms / 0.4 x 10.001 ms in A (mean 4.0002 ms), twice
// that in B (8.0002 ms); the step row is the mean over ranks, 10.0005 ms vs 20.0005 ms.
// Times come from integer ns cut at fractions of the step: within 2 ns.
TEST_F(ModelTest, CompareModelShowsPhaseAndLayerRowsOfTwoTracedRuns) {
  QTemporaryDir tmp;
  const QString a = tmp.filePath("a"), b = tmp.filePath("b");
  ulysses::test::write_fixture_run(a.toStdString(), 2, {{10, 3.0, 1000}, {10, 2.9, 1000}, {10, 2.8, 1000}});
  ulysses::test::write_fixture_run(b.toStdString(), 2, {{10, 3.0, 1000}, {20, 2.9, 1000}, {20, 2.8, 1000}});
  const auto sa = loadRunSummary(a), sb = loadRunSummary(b);
  ASSERT_TRUE(sa.hasTrace && sb.hasTrace);
  CompareModel m;
  tester(&m);
  m.setRuns(sa, sb);
  const int configRows = m.rowCount();
  QString err;
  const auto c = CompareModel::compareTraces(a, b, &err);
  ASSERT_TRUE(c) << err.toStdString();
  m.setTraceComparison(*c);
  EXPECT_EQ(m.traceRows(), static_cast<int>(c->rows.size()));
  EXPECT_EQ(m.rowCount(), configRows + m.traceRows());

  const int layer = m.rowOfField("layer 0 attention fwd ms");
  const int phase = m.rowOfField("phase attention fwd ms");
  const int step = m.rowOfField("trace step ms");
  const int a2a = m.rowOfField("phase a2a_seq_to_head fwd ms");
  ASSERT_GE(layer, configRows);
  ASSERT_GE(phase, configRows);
  ASSERT_GE(step, configRows);
  ASSERT_GE(a2a, configRows);
  auto value = [&](int row, int col) { return m.index(row, col).data(CompareModel::ValueRole).toDouble(); };
  EXPECT_NEAR(value(layer, CompareModel::RunA), 4'000'200, 2);
  EXPECT_NEAR(value(layer, CompareModel::RunB), 8'000'200, 2);
  EXPECT_EQ(m.index(layer, CompareModel::RunA).data().toString(), "4.000");
  EXPECT_EQ(m.index(layer, CompareModel::RunB).data().toString(), "8.000");
  EXPECT_EQ(m.index(layer, CompareModel::Diff).data().toString(), "4.000");
  EXPECT_EQ(m.index(layer, CompareModel::Ratio).data().toString(), "2.000");
  EXPECT_TRUE(m.index(layer, 0).data(CompareModel::DiffersRole).toBool());
  EXPECT_EQ(m.index(layer, 0).data(CompareModel::SectionRole).toString(), "layer");
  EXPECT_EQ(m.index(phase, 0).data(CompareModel::SectionRole).toString(), "phase");
  // One traced layer: the phase row equals the layer row.
  EXPECT_DOUBLE_EQ(value(phase, CompareModel::RunB), value(layer, CompareModel::RunB));
  EXPECT_NEAR(value(step, CompareModel::RunA), 10'000'500, 2);
  EXPECT_NEAR(value(step, CompareModel::RunB), 20'000'500, 2);
  EXPECT_TRUE(m.index(step, 0).data(CompareModel::DiffersRole).toBool());
  // Same run against itself: every trace row equal, none marked.
  const auto same = CompareModel::compareTraces(a, a, &err);
  ASSERT_TRUE(same) << err.toStdString();
  m.setTraceComparison(*same);
  for (int r = configRows; r < m.rowCount(); ++r)
    EXPECT_FALSE(m.index(r, 0).data(CompareModel::DiffersRole).toBool())
        << m.index(r, 0).data().toString().toStdString();
  // Setting the runs again drops the trace rows; an unreadable trace is an error naming the run.
  m.setRuns(sa, sb);
  EXPECT_EQ(m.traceRows(), 0);
  EXPECT_FALSE(CompareModel::compareTraces(a, tmp.filePath("missing"), &err));
  EXPECT_TRUE(err.startsWith("trace of run B")) << err.toStdString();
  EXPECT_EQ(g_modelTestWarnings, 0);
}

// Liveness from ulysses-run's heartbeat lines: a rank that logs nothing leaves "starting"
// as soon as its phase is reported, and shows "unresponsive" when its heartbeat stops.
TEST_F(ModelTest, RankStatusModelFollowsTheLaunchersLivenessLines) {
  RankStatusModel m;
  tester(&m);
  m.reset(2);
  auto state = [&](int r) { return m.index(r, RankStatusModel::StateColumn).data().toString(); };
  EXPECT_FALSE(m.applyLauncherLine("ulysses-run: started 2 worker(s) (sp_size 2 x dp_size 1), run directory x"));
  EXPECT_FALSE(m.applyLauncherLine("ulysses-run: rank 1 exited with code 1 in step 2; the other workers were stopped"));
  EXPECT_EQ(state(1), "starting");
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: rendezvous"));
  EXPECT_EQ(state(1), "running: rendezvous");
  EXPECT_EQ(m.index(1, RankStatusModel::Lines).data().toInt(), 0) << "not counted as a log line of the rank";
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: training (step 0)"));
  EXPECT_EQ(state(1), "running: training (step 0)");
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: no heartbeat for 5.0 s (in step 3)"));
  EXPECT_EQ(m.state(1), RankStatusModel::State::Unresponsive);
  EXPECT_EQ(state(1), "no heartbeat for 5.0 s (in step 3)");
  EXPECT_EQ(state(0), "starting");
  m.setState(1, RankStatusModel::State::Failed);
  m.setAllRunning(RankStatusModel::State::Stopped);
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: training (step 4)"));  // late line: a failed rank stays failed
  EXPECT_EQ(m.state(1), RankStatusModel::State::Failed);
  EXPECT_EQ(m.state(0), RankStatusModel::State::Stopped);
  EXPECT_FALSE(m.applyLauncherLine("ulysses-run: rank 99999: rendezvous"));
  EXPECT_EQ(m.rowCount(), 2);
}

// Each rank's step time, live: ulysses-run --json says "rank R: step K took X ms" as the rank
// leaves step K; the table shows the latest per rank and the phase line stays as it was.
TEST_F(ModelTest, RankStatusModelShowsEachRanksStepTime) {
  RankStatusModel m;
  tester(&m);
  m.reset(2);
  EXPECT_EQ(m.stepMs(0), -1);
  EXPECT_EQ(m.index(0, RankStatusModel::StepTime).data().toString(), "");
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 0: training (step 0)"));
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: training (step 0)"));
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 0: step 0 took 812.5 ms"));
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: step 0 took 1640 ms"));
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 0: step 1 took 97.26 ms"));
  EXPECT_DOUBLE_EQ(m.stepMs(0), 97.26);
  EXPECT_EQ(m.timedStep(0), 1);
  EXPECT_DOUBLE_EQ(m.stepMs(1), 1640);
  EXPECT_EQ(m.index(0, RankStatusModel::StepTime).data().toString(), "97.3 (step 1)");
  EXPECT_EQ(m.index(1, RankStatusModel::StepTime).data().toString(), "1640.0 (step 0)");
  EXPECT_EQ(m.phase(0), "training (step 0)") << "a step time is not a phase";
  EXPECT_EQ(m.headerData(RankStatusModel::StepTime, Qt::Horizontal).toString(), "Step ms");
  EXPECT_TRUE(m.applyLauncherLine("ulysses-run: rank 1: step 0 took lots ms"));  // a phase text, as any other
  EXPECT_DOUBLE_EQ(m.stepMs(1), 1640);
}

TEST_F(ModelTest, RankStatusModelKeepsTails) {
  RankStatusModel m;
  tester(&m);
  m.reset(2);
  EXPECT_EQ(m.rowCount(), 2);
  EXPECT_EQ(m.index(0, RankStatusModel::StateColumn).data().toString(), "starting");
  for (int i = 0; i < 30; ++i) m.appendLine(1, QStringLiteral("line %1").arg(i));
  EXPECT_EQ(m.index(1, RankStatusModel::StateColumn).data().toString(), "running");
  EXPECT_EQ(m.index(1, RankStatusModel::Lines).data().toInt(), 30);
  EXPECT_EQ(m.index(1, RankStatusModel::LastLine).data().toString(), "line 29");
  EXPECT_EQ(m.lastLines(1, 3), (QStringList{"line 27", "line 28", "line 29"}));
  EXPECT_EQ(m.lastLines(1, 100).size(), RankStatusModel::kKeepLines);
  m.appendLine(3, "late rank");  // grows the table
  EXPECT_EQ(m.rowCount(), 4);
  m.setState(3, RankStatusModel::State::Failed);
  m.setAllRunning(RankStatusModel::State::Stopped);
  EXPECT_EQ(m.state(3), RankStatusModel::State::Failed);
  EXPECT_EQ(m.state(1), RankStatusModel::State::Stopped);
  m.appendLine(-1, "ignored");
  EXPECT_EQ(m.rowCount(), 4);
}

TEST_F(ModelTest, EstimateModelComparesMeasured) {
  auto cfg = ulysses::load_run_config(ULYSSES_SOURCE_DIR "/resources/configs/bench-1b.json");
  ulysses::cost::CostOptions o;
  o.tflops_per_rank = 400;
  const auto est = ulysses::cost::estimate(cfg, o);
  EstimateModel m;
  tester(&m);
  EXPECT_EQ(m.rowCount(), EstimateModel::RowCount);
  EXPECT_EQ(m.index(EstimateModel::StepTime, EstimateModel::Estimate).data().toString(), "");
  m.setEstimate(est, 10);
  EXPECT_EQ(m.index(EstimateModel::StepTime, EstimateModel::Estimate).data().toString(),
            QString::fromStdString(ulysses::cost::format_seconds(est.step_s)));
  EXPECT_EQ(m.index(EstimateModel::Params, EstimateModel::Estimate).data().toString(), "886.11 M");
  MeasuredStats meas;
  meas.steps = 5;
  meas.medianStepMs = est.step_s * 2e3;  // twice the prediction
  meas.maxMemBytes = est.total_bytes() / 2;
  meas.tokensPerS = est.tokens_per_s;
  m.setMeasured(meas);
  EXPECT_EQ(m.index(EstimateModel::StepTime, EstimateModel::Ratio).data().toString(), "2.00x");
  EXPECT_EQ(m.index(EstimateModel::TotalMem, EstimateModel::Ratio).data().toString(), "0.50x");
  EXPECT_EQ(m.index(EstimateModel::TokensPerS, EstimateModel::Ratio).data().toString(), "1.00x");
  m.clearEstimate("(invalid config)");
  EXPECT_EQ(m.index(0, EstimateModel::Estimate).data().toString(), "(invalid config)");
  EXPECT_EQ(m.index(EstimateModel::StepTime, EstimateModel::Ratio).data().toString(), "");
  m.clearMeasured();
  EXPECT_EQ(m.index(EstimateModel::StepTime, EstimateModel::Measured).data().toString(), "");
}

}  // namespace

// ---- reliability (docs/RELIABILITY.md): the studio bounds what a run folder claims ---------

// A run.json saying "running" whose ulysses-run is gone is not shown as running forever.
TEST(RunDataReliability, DeadRunsAreNotShownAsRunning) {
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("dead");
  makeRun(dir, "running", 10, 3, 4.0);
  // A pid that surely is not a ulysses-run: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);
  QByteArray run = "{\"status\":\"running\",\"started_at\":\"2026-01-02T03:04:05Z\",\"world_size\":2,\"pid\":" +
                   QByteArray::number(child) + "}";
  writeFile(dir + "/run.json", run);
  auto s = loadRunSummary(dir);
  EXPECT_EQ(s.status, "failed");
  EXPECT_TRUE(s.stale);
  EXPECT_TRUE(s.message.contains("no longer running")) << s.message.toStdString();
  // Its steps are metrics.jsonl's, not run.json's start-of-run placeholders (0 steps, 0 s).
  writeFile(dir + "/run.json", run.replace("}", ",\"steps_done\":0,\"duration_s\":0.0}"));
  s = loadRunSummary(dir);
  EXPECT_EQ(s.stepsDone, 3);
  EXPECT_DOUBLE_EQ(s.durationS, 0.3);
  // Our own pid is alive but is not a ulysses-run (a reused pid): also not running.
  writeFile(dir + "/run.json", "{\"status\":\"running\",\"pid\":" + QByteArray::number(::getpid()) + "}");
  EXPECT_EQ(loadRunSummary(dir).status, "failed");
}

// A live run's run.json holds ulysses-run's placeholders (0 steps done, 0 s, no final loss):
// the list read "0 / 400" steps and "0 ms" for a run at step 184, and the monitor's banner a
// "final loss". Its progress is metrics.jsonl's; no final loss while it runs.
TEST(RunDataReliability, ALiveRunsProgressComesFromItsMetrics) {
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("live");
  makeRun(dir, "running", 400, 3, 4.0);
  // A live process whose command line says ulysses-run.
  const pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sleep", "ulysses-run", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 200; ++i) {  // until the exec has happened
    QFile cmd(QStringLiteral("/proc/%1/cmdline").arg(child));
    if (cmd.open(QIODevice::ReadOnly) && cmd.readAll().contains("ulysses-run")) break;
    ::usleep(10000);
  }
  writeFile(dir + "/run.json",
            "{\"status\":\"running\",\"world_size\":2,\"steps_done\":0,\"duration_s\":0.0,"
            "\"final_loss\":null,\"pid\":" +
                QByteArray::number(child) + "}");
  const auto s = loadRunSummary(dir);
  ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  EXPECT_EQ(s.status, "running");
  EXPECT_EQ(s.stepsDone, 3);
  EXPECT_DOUBLE_EQ(s.durationS, 0.3);
  EXPECT_FALSE(s.hasFinalLoss);
  EXPECT_EQ(s.steps, 400);
}

// Run folder names: never hidden (a leading '.' keeps the run out of the runs list), never
// longer than 80 characters (300 can fail at launch: "File name too long").
TEST(RunDataReliability, SlugsAreNeitherHiddenNorTooLong) {
  EXPECT_EQ(slug(".hidden run"), "hidden-run");
  EXPECT_EQ(slug("..x"), "x");
  EXPECT_EQ(slug("..."), "run");
  EXPECT_EQ(slug("tiny CPU demo"), "tiny-CPU-demo");
  EXPECT_EQ(slug(QString(300, QChar('n'))).size(), 80);
}

// A run.json may claim 2e9 ranks: a row per rank would exhaust memory and abort the studio.
TEST(RunDataReliability, ImpossibleRankCountsAreRefused) {
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("huge");
  makeRun(dir, "finished", 10, 3, 4.0);
  for (const char* w : {"2e9", "2147483647", "-5", "1e300"}) {
    writeFile(dir + "/run.json", QByteArray("{\"status\":\"finished\",\"world_size\":") + w + "}");
    const auto s = loadRunSummary(dir);
    EXPECT_LE(s.worldSize, kMaxRanks) << w;
    EXPECT_GE(s.worldSize, 0) << w;
    EXPECT_FALSE(s.problems.isEmpty()) << w;
  }
  RankStatusModel ranks;
  ranks.reset(loadRunSummary(dir).worldSize);  // must not try to allocate billions of rows
  EXPECT_LE(ranks.rowCount(), kMaxRanks);
}

// A FIFO named run.json or metrics.jsonl must not block the studio forever.
TEST(RunDataReliability, FifosInARunFolderDoNotBlock) {
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("fifo");
  QDir().mkpath(dir);
  ASSERT_EQ(::mkfifo(QFile::encodeName(dir + "/run.json").constData(), 0600), 0);
  ASSERT_EQ(::mkfifo(QFile::encodeName(dir + "/metrics.jsonl").constData(), 0600), 0);
  QElapsedTimer t;
  t.start();
  const auto s = loadRunSummary(dir);
  EXPECT_EQ(s.status, "unknown");
  EXPECT_TRUE(readMetricsFile(dir + "/metrics.jsonl").isEmpty());
  EXPECT_LT(t.elapsed(), 2000);
}

// Hand-computed ticks: the smallest 1, 2 or 5 x 10^k interval with at most 6 ticks, and the
// decimals it needs.
TEST(AxisTicks, NiceIntervalsAndDecimals) {
  using ulysses::ui::nice_axis_ticks;
  auto t = nice_axis_ticks(0, 10, 6, true);  // 10 / 5 = 2
  EXPECT_DOUBLE_EQ(t.interval, 2);
  EXPECT_EQ(t.decimals, 0);
  EXPECT_EQ(ulysses::ui::axis_tick_labels(t, 0, 10), QStringList({"0", "2", "4", "6", "8", "10"}));
  t = nice_axis_ticks(0, 1, 6, true);  // whole steps only
  EXPECT_DOUBLE_EQ(t.interval, 1);
  t = nice_axis_ticks(5.5266, 5.5355, 6, false);  // span 0.0089 / 5 = 0.00178 -> 0.002
  EXPECT_DOUBLE_EQ(t.interval, 0.002);
  EXPECT_EQ(t.decimals, 3);
  EXPECT_EQ(t.format, "%.3f");
  EXPECT_EQ(ulysses::ui::axis_tick_labels(t, 5.5266, 5.5355), QStringList({"5.528", "5.530", "5.532", "5.534"}));
  t = nice_axis_ticks(0, 7000, 6, false);  // 1400 -> 2000
  EXPECT_DOUBLE_EQ(t.interval, 2000);
  EXPECT_EQ(ulysses::ui::axis_tick_labels(t, 0, 7000), QStringList({"0", "2000", "4000", "6000"}));
  t = nice_axis_ticks(-0.3, 0.3, 6, false);  // 0.12 -> 0.2, and zero is "0.0", not "-0.0"
  EXPECT_DOUBLE_EQ(t.interval, 0.2);
  EXPECT_EQ(ulysses::ui::axis_tick_labels(t, -0.3, 0.3), QStringList({"-0.2", "0.0", "0.2"}));
  // Huge values (a loss of 1e308 in a monitor chart) in the shortest form, not 309 digits.
  t = nice_axis_ticks(0, 1e308, 6, false);
  for (const auto& label : ulysses::ui::axis_tick_labels(t, 0, 1e308))
    EXPECT_LE(label.size(), 10) << label.toStdString();
  EXPECT_EQ(ulysses::ui::axis_tick_labels(t, 0, 1e308).back(), "1e+308");
  // Empty, reversed and non-finite ranges get interval 1 and no decimals.
  for (auto [lo, hi] : {std::pair{1.0, 1.0}, {2.0, 1.0}, {0.0, INFINITY}, {std::nan(""), 1.0}}) {
    t = nice_axis_ticks(lo, hi, 6, false);
    EXPECT_DOUBLE_EQ(t.interval, 1);
    EXPECT_EQ(t.decimals, 0);
  }
}

// A long line is drawn as each bucket's lowest and highest point, in order, first and last
// kept; a short one as it is.
TEST(AxisTicks, DecimateLineKeepsPeaksAndDips) {
  QList<QPointF> pts;
  for (int i = 0; i < 12; ++i) pts.append(QPointF(i, i % 2 ? 10 + i : -i));  // 0 11 -2 13 -4 ...
  EXPECT_EQ(ulysses::ui::decimate_line(pts, 6), pts);                        // 12 <= 2 x 6
  // 3 buckets over 12 points: indices [1,4) [4,8) [8,11) (first and last apart); lowest and
  // highest of each: 2 (-2) and 3 (13), 6 (-6) and 7 (17), 10 (-10) and 9 (19).
  const QList<QPointF> d = ulysses::ui::decimate_line(pts, 3);
  const QList<QPointF> want = {pts[0], pts[2], pts[3], pts[6], pts[7], pts[9], pts[10], pts[11]};
  EXPECT_EQ(d, want);
  QList<QPointF> big;
  for (int i = 0; i < 100000; ++i) big.append(QPointF(i, i == 77777 ? 1e9 : (i == 123 ? -1e9 : 0.5)));
  const QList<QPointF> bd = ulysses::ui::decimate_line(big, 1000);
  EXPECT_LE(bd.size(), 2002);
  EXPECT_TRUE(bd.contains(big[77777]));
  EXPECT_TRUE(bd.contains(big[123]));
  for (int i = 1; i < bd.size(); ++i) EXPECT_LT(bd[i - 1].x(), bd[i].x());
}

// A 100 000-character message is cut to 600 with the rest counted (no hidden characters: a
// path copied from the banner must stay the path); a loss of -1e308 is "-1e+308", not 309 digits.
TEST(AxisTicks, LabelSafeTextAndMetrics) {
  const QString m = ulysses::ui::label_safe(QString(100000, QLatin1Char('M')));
  EXPECT_EQ(m, QString(600, QLatin1Char('M')) + QStringLiteral("... (99400 more characters)"));
  EXPECT_EQ(ulysses::ui::label_safe(QStringLiteral("loss is nan at step 3")), QStringLiteral("loss is nan at step 3"));
  EXPECT_EQ(ulysses::ui::format_metric(5.202368), QStringLiteral("5.2024"));
  EXPECT_EQ(ulysses::ui::format_metric(-1e308), QStringLiteral("-1e+308"));
  EXPECT_EQ(ulysses::ui::format_metric(std::nan("")), QStringLiteral("nan"));
}
