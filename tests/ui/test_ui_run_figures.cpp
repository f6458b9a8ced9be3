// One run, one set of figures (issue 16 item 1): `ulysses-trace summary --json` and the
// studio's model of a run (ui/models/run_data: measure(), the estimate panel's "measured"
// column, the compare view) quote the same median step time and tokens/s for the same run,
// because both use step_stats.hpp's steady-state definition. The fixture's step times are
// chosen so the two old definitions (upper median over every step; true median without
// step 0) disagree: 900 (warm-up), 40, 10, 30, 20 ms -> steady-state median 25 ms, the old
// upper median over all steps 30 ms.
#include <gtest/gtest.h>

#include <QDir>
#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "run_data.hpp"
#include "run_dir_reader.hpp"
#include "run_fixture.hpp"
#include "ulysses/profiler/step_stats.hpp"

using namespace ulysses;

namespace {
nlohmann::json trace_summary_json(const QString& run) {
  QProcess p;
  p.start(QStringLiteral(ULYSSES_TRACE_PATH), {QStringLiteral("summary"), run, QStringLiteral("--json")});
  EXPECT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  return nlohmann::json::parse(p.readAllStandardOutput().toStdString());
}
}  // namespace

TEST(StepStats, TrueMedianWithoutWarmupStep) {
  using prof::steady_state;
  // Odd count after dropping step 0: middle value.
  EXPECT_DOUBLE_EQ(steady_state({{0, 900, 1}, {1, 30, 3}, {2, 10, 9}, {3, 20, 5}}).median_step_ms, 20);
  // Even count: mean of the two middle values.
  const auto s = steady_state({{0, 900, 1}, {1, 40, 2}, {2, 10, 8}, {3, 30, 4}, {4, 20, 6}});
  EXPECT_EQ(s.counted, 4);
  EXPECT_DOUBLE_EQ(s.median_step_ms, 25);
  EXPECT_DOUBLE_EQ(s.median_tokens_per_s, 5);
  // Step 0 alone counts; a window without step 0 drops nothing.
  EXPECT_DOUBLE_EQ(steady_state({{0, 900, 1}}).median_step_ms, 900);
  EXPECT_DOUBLE_EQ(steady_state({{5, 7, 1}, {6, 9, 1}}).median_step_ms, 8);
  EXPECT_EQ(steady_state({}).counted, 0);
}

TEST(RunFigures, TraceSummaryAndStudioQuoteTheSameFigures) {
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const QString run = tmp.filePath(QStringLiteral("run"));
  test::write_fixture_run(run.toStdString(), 2,
                          {{900, 5.0, 100 << 20}, {40, 4.0, 120 << 20}, {10, 3.5, 130 << 20}, {30, 3.2, 110 << 20}, {20, 3.0, 125 << 20}});
  const auto js = trace_summary_json(run);
  const auto& h = js.at("headline");

  const auto measured = ui::measure(ui::readMetricsFile(QDir(run).filePath(QStringLiteral("metrics.jsonl"))));
  // Hand-computed: median of 40, 10, 30, 20 = 25 ms; tokens/s = 1024 / (ms / 1000).
  EXPECT_DOUBLE_EQ(measured.medianStepMs, 25);
  EXPECT_DOUBLE_EQ(measured.tokensPerS, 0.5 * (1024 / 0.030 + 1024 / 0.020));
  EXPECT_DOUBLE_EQ(h.at("step_ms").get<double>(), measured.medianStepMs);
  EXPECT_DOUBLE_EQ(h.at("tokens_per_s").get<double>(), measured.tokensPerS);
  EXPECT_EQ(h.at("steps").get<int64_t>(), measured.steps);
  EXPECT_EQ(h.at("peak_memory_bytes").get<int64_t>(), measured.maxMemBytes);

  // The Qt-free reader (what ulysses-run and the studio share) gives the same figures.
  const auto st = launch::metric_stats(launch::read_metrics_file(QDir(run).filePath(QStringLiteral("metrics.jsonl")).toStdString()));
  EXPECT_DOUBLE_EQ(st.median_step_ms, 25);
  EXPECT_EQ(st.steps, 5);

  // The studio's run summary agrees with run.json.
  const auto sum = ui::loadRunSummary(run);
  EXPECT_EQ(sum.status, QStringLiteral("finished"));
  EXPECT_EQ(sum.worldSize, 2);
  EXPECT_EQ(sum.stepsDone, 5);
  EXPECT_DOUBLE_EQ(sum.finalLoss, 3.0);
  EXPECT_TRUE(sum.hasTrace);
}

TEST(RunDirReader, LenientRunJsonAndBoundedClaims) {
  QTemporaryDir tmp;
  const std::string path = tmp.filePath(QStringLiteral("run.json")).toStdString();
  EXPECT_FALSE(launch::read_run_json(path).present);
  EXPECT_EQ(launch::read_run_json(path).status, "unknown");
  {
    std::ofstream(path) << R"({"status": "failed", "world_size": 2e9, "failed_rank": 1, "steps_done": "x"})";
  }
  const auto r = launch::read_run_json(path);
  EXPECT_TRUE(r.present);
  EXPECT_EQ(r.status, "failed");
  EXPECT_EQ(r.world_size, 0);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("claims 2e+09 ranks"), std::string::npos) << r.problems[0];
  EXPECT_EQ(r.failed_rank.value_or(-1), 1);
  EXPECT_FALSE(r.steps_done.has_value());
  // METRIC text: with or without the prefix; step and loss must be numbers.
  EXPECT_TRUE(launch::parse_metric_text("METRIC {\"step\": 3, \"loss\": 2.5}").has_value());
  EXPECT_EQ(launch::parse_metric_text("  {\"step\": 3, \"loss\": 2.5, \"step_ms\": 7}\n")->step_ms, 7);
  EXPECT_FALSE(launch::parse_metric_text("{\"step\": \"3\", \"loss\": 2.5}").has_value());
  EXPECT_FALSE(launch::parse_metric_text("METRIC {\"step\": 1,").has_value());
  EXPECT_FALSE(launch::parse_metric_text("step 3/10 loss 4.2").has_value());
}
