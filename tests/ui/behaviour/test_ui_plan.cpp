// The memory plan in the studio: PlanFigures parsing, the estimates table's Plan column,
// and the launcher running `ulysses-run CONFIG --plan --json` in a QProcess (never linking
// libtorch), showing the plan beside the formula estimate and an inline warning when the
// planned peak does not fit the GPU (bench-1b at 512K tokens without the long-sequence
// techniques on a fake H200). Launcher tests skip when ulysses-run is not built.
#include <gtest/gtest.h>

#include <QDir>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTest>

#include "estimate_model.hpp"
#include "launcher_page.hpp"

using namespace ulysses::ui;

namespace {

QString ulyssesRun() {
  const QString env = qEnvironmentVariable("ULYSSES_RUN");
  const QString p = env.isEmpty() ? QStringLiteral(ULYSSES_RUN_PATH) : env;
  const QFileInfo fi(p);
  return fi.isFile() && fi.isExecutable() ? fi.absoluteFilePath() : QString();
}

DeviceScan fakeH200() {
  DeviceScan s;
  s.gpus.push_back({QStringLiteral("NVIDIA H200"), qint64(143771) * 1024 * 1024});
  s.cpuThreads = 2;
  return s;
}

// Waits for the launcher's plan of the current form; false on timeout.
bool waitForPlan(LauncherPage& L) {
  QSignalSpy spy(&L, &LauncherPage::planUpdated);
  for (int i = 0; i < 600 && (L.planPending() || spy.isEmpty()); ++i) spy.wait(100);
  return !L.planPending() && !spy.isEmpty();
}

}  // namespace

TEST(PlanFigures, ParsesPlannerJsonAndRejectsOtherOutput) {
  QString err;
  auto p =
      PlanFigures::fromJson(R"({"device":"cuda","attention":"flash","peak_bytes":123456789012,"activation_bytes":5000,
                                     "static_bytes":7000,"transient_bytes":11,"loss_peak_bytes":12,"seq_length":524288})",
                            &err);
  ASSERT_TRUE(p.has_value()) << err.toStdString();
  EXPECT_EQ(p->peakBytes, 123456789012LL);
  EXPECT_EQ(p->activationBytes, 5000);
  EXPECT_EQ(p->staticBytes, 7000);
  EXPECT_EQ(p->device, "cuda");
  EXPECT_EQ(p->seqLength, 524288);
  EXPECT_FALSE(PlanFigures::fromJson("not json", &err).has_value());
  EXPECT_FALSE(PlanFigures::fromJson(R"({"peak_bytes": 1})", &err).has_value());
  EXPECT_TRUE(err.contains("activation_bytes"));
}

TEST(EstimateModelPlan, PlanColumnBesideTheEstimate) {
  EstimateModel m;
  EXPECT_EQ(m.headerData(EstimateModel::Plan, Qt::Horizontal).toString(), "Plan (dry run)");
  m.clearPlan(QStringLiteral("planning…"));
  EXPECT_EQ(m.index(0, EstimateModel::Plan).data().toString(), "planning…");
  PlanFigures p;
  p.staticBytes = 16LL << 30;
  p.activationBytes = 3LL << 30;
  p.peakBytes = 21LL << 30;
  m.setPlan(p);
  EXPECT_EQ(m.index(EstimateModel::StateMem, EstimateModel::Plan).data().toString(), "16.0 GiB");
  EXPECT_EQ(m.index(EstimateModel::ActMem, EstimateModel::Plan).data().toString(), "3.00 GiB");
  EXPECT_EQ(m.index(EstimateModel::TotalMem, EstimateModel::Plan).data().toString(), "21.0 GiB peak");
  EXPECT_TRUE(m.index(EstimateModel::StepTime, EstimateModel::Plan).data().toString().isEmpty());
}

// bench-1b at 512K tokens with every technique off does not fit an H200: the launcher says
// so before launch; at 16K it fits and the warning goes away.
TEST(LauncherPlan, WarnsInlineWhenThePlannedPeakExceedsTheGpu) {
  const QString run = ulyssesRun();
  if (run.isEmpty()) GTEST_SKIP() << "ulysses-run is not built";
  qputenv("ULYSSES_RUN", run.toLocal8Bit());
  LauncherPage L;
  L.setDevices(fakeH200());
  QString err;
  ASSERT_TRUE(L.loadPreset(QStringLiteral("bench-1b"), &err)) << err.toStdString();
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.activation_checkpointing"), QStringLiteral("none")));
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.offload_activations"), QStringLiteral("false")));
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.loss_chunk_tokens"), QStringLiteral("0")));
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.mlp_chunk_tokens"), QStringLiteral("0")));
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.proj_chunk_tokens"), QStringLiteral("0")));
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.seq_length"), QStringLiteral("524288")));
  ASSERT_TRUE(L.isValid()) << L.generalIssues().toStdString();
  ASSERT_TRUE(waitForPlan(L));
  ASSERT_TRUE(L.estimateModel()->hasPlan())
      << L.estimateModel()->index(0, EstimateModel::Plan).data().toString().toStdString();
  EXPECT_EQ(L.estimateModel()->plan().seqLength, 524288);
  EXPECT_GT(L.estimateModel()->plan().peakBytes, 143771LL * 1024 * 1024);
  EXPECT_TRUE(L.planWarning().contains("Will not fit")) << L.planWarning().toStdString();
  EXPECT_FALSE(L.estimateModel()->index(EstimateModel::TotalMem, EstimateModel::Plan).data().toString().isEmpty());

  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.seq_length"), QStringLiteral("16384")));
  ASSERT_TRUE(waitForPlan(L));
  ASSERT_TRUE(L.estimateModel()->hasPlan());
  EXPECT_EQ(L.estimateModel()->plan().seqLength, 16384);
  EXPECT_LT(L.estimateModel()->plan().peakBytes, 143771LL * 1024 * 1024);
  EXPECT_TRUE(L.planWarning().isEmpty()) << L.planWarning().toStdString();

  // An invalid config: no plan figures are left standing beside "(invalid config)" (the last
  // valid config's stayed, with any "Will not fit" warning).
  ASSERT_TRUE(L.setFieldText(QStringLiteral("train.seq_length"), QStringLiteral("524288")));
  ASSERT_TRUE(waitForPlan(L));
  ASSERT_FALSE(L.planWarning().isEmpty());
  L.setFieldText(QStringLiteral("train.steps"), QStringLiteral("-1"));
  ASSERT_FALSE(L.isValid());
  EXPECT_FALSE(L.estimateModel()->hasPlan());
  EXPECT_TRUE(L.planWarning().isEmpty()) << L.planWarning().toStdString();
}
