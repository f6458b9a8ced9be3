// One run, one set of figures (docs/CONTRACTS.md, Median step time): `ulysses-trace summary --json` and the
// studio's model of a run (ui/models/run_data: measure(), the estimate panel's "measured"
// column, the compare view) quote the same median step time and tokens/s for the same run,
// because both use step_stats.hpp's steady-state definition. The fixture's step times are
// chosen so the two old definitions (upper median over every step; true median without
// step 0) disagree: 900 (warm-up), 40, 10, 30, 20 ms -> steady-state median 25 ms, the old
// upper median over all steps 30 ms.
#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "run_data.hpp"
#include "run_dir_reader.hpp"
#include "ui/run_fixture.hpp"
#include "ulysses/common/run_record.hpp"
#include "ulysses/common/step_stats.hpp"

using namespace ulysses;

namespace {
nlohmann::json trace_summary_json(const QString& run) {
  QProcess p;
  p.start(QStringLiteral(ULYSSES_TRACE_PATH), {QStringLiteral("summary"), run, QStringLiteral("--json")});
  EXPECT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  return nlohmann::json::parse(p.readAllStandardOutput().toStdString());
}
// data-key -> data-value of every figure in an HTML text (the report's own markup or a
// browser's DOM dump).
std::map<std::string, double> html_figures(const QString& html) {
  std::map<std::string, double> out;
  static const QRegularExpression re(QStringLiteral("data-key=\"([^\"]+)\" data-value=\"([^\"]+)\""));
  for (auto it = re.globalMatch(html); it.hasNext();) {
    const auto m = it.next();
    out[m.captured(1).toStdString()] = m.captured(2).toDouble();
  }
  return out;
}

// The value at a dotted path of summary --json ("headline.step_ms", "ranks.1.overlap_ratio":
// a number in a path picks the entry of that rank).
double json_at(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json* cur = &j;
  size_t b = 0;
  while (b <= key.size()) {
    const size_t e = std::min(key.find('.', b), key.size());
    const std::string part = key.substr(b, e - b);
    if (cur->is_array()) {
      const nlohmann::json* hit = nullptr;
      for (const auto& row : *cur)
        if (row.value("rank", -1) == std::stoi(part)) hit = &row;
      if (!hit) throw std::runtime_error("no rank " + part + " in " + key);
      cur = hit;
    } else {
      cur = &cur->at(part);
    }
    b = e + 1;
  }
  return cur->get<double>();
}

QString write_run(const QTemporaryDir& tmp) {
  const QString run = tmp.filePath(QStringLiteral("run"));
  test::write_fixture_run(
      run.toStdString(), 2,
      {{900, 5.0, 100 << 20}, {40, 4.0, 120 << 20}, {10, 3.5, 130 << 20}, {30, 3.2, 110 << 20}, {20, 3.0, 125 << 20}});
  return run;
}

QString write_report(const QString& run, const QString& out) {
  QProcess p;
  p.start(QStringLiteral(ULYSSES_TRACE_PATH), {QStringLiteral("report"), run, QStringLiteral("--html"), out});
  EXPECT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  QFile f(out);
  EXPECT_TRUE(f.open(QIODevice::ReadOnly));
  return QString::fromUtf8(f.readAll());
}

// Headless chromium: the page's DOM after rendering, and every request the PAGE started
// (netlog URL_REQUEST_START_JOB with an initiator; the browser's own background requests
// carry "not an origin" and are not the page's). Empty dom when chromium failed.
struct BrowserRun {
  QString dom;
  std::vector<std::string> page_requests;
};
BrowserRun render_in_chromium(const QString& chromium, const QString& html_path, const QString& workdir) {
  BrowserRun r;
  const QString netlog = QDir(workdir).filePath(QStringLiteral("netlog.json"));
  QProcess p;
  p.start(chromium, {QStringLiteral("--headless"), QStringLiteral("--no-sandbox"), QStringLiteral("--disable-gpu"),
                     QStringLiteral("--user-data-dir=") + QDir(workdir).filePath(QStringLiteral("profile")),
                     QStringLiteral("--log-net-log=") + netlog, QStringLiteral("--dump-dom"),
                     QStringLiteral("file://") + QFileInfo(html_path).absoluteFilePath()});
  if (!p.waitForFinished(90000)) {
    p.kill();
    p.waitForFinished();
    return r;
  }
  r.dom = QString::fromUtf8(p.readAllStandardOutput());
  std::ifstream in(netlog.toStdString());
  const auto log = nlohmann::json::parse(in, nullptr, false);
  if (log.is_discarded()) {
    r.page_requests.push_back("unreadable netlog " + netlog.toStdString());
    return r;
  }
  const int start_job = log.at("constants").at("logEventTypes").value("URL_REQUEST_START_JOB", -1);
  for (const auto& e : log.at("events")) {
    if (e.value("type", -2) != start_job || !e.contains("params")) continue;
    const auto& prm = e.at("params");
    const std::string initiator = prm.value("initiator", std::string("not an origin"));
    const std::string url = prm.value("url", std::string());
    if (initiator != "not an origin" && url.rfind("file:", 0) != 0)
      r.page_requests.push_back(url + " (initiator " + initiator + ")");
  }
  return r;
}
}  // namespace

TEST(StepStats, TrueMedianWithoutWarmupStep) {
  using ulysses::steady_state;
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
  const QString run = write_run(tmp);
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
  const auto st = launch::metric_stats(
      launch::read_metrics_file(QDir(run).filePath(QStringLiteral("metrics.jsonl")).toStdString()));
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

// read_last_metric reads only the file's end; its answer is the whole-file reader's last
// point, for files built to catch a backward scan out: a torn last line, lines that are no
// METRIC after the last one, CRLF, blank lines, lines longer than the 64 KiB limit and longer
// than the 128 KiB read window (before and after the last METRIC, one holding a METRIC-looking
// tail), METRIC prefixes, a file of one line without a newline, and none at all.
TEST(RunDirReader, LastMetricFromTheEndEqualsTheWholeFilesLast) {
  QTemporaryDir tmp;
  const std::string path = tmp.filePath(QStringLiteral("metrics.jsonl")).toStdString();
  auto metric = [](int step, double loss) {
    return R"({"step": )" + std::to_string(step) + R"(, "steps": 9, "loss": )" + std::to_string(loss) +
           R"(, "elapsed_s": )" + std::to_string(step * 0.5) + "}";
  };
  const std::string big(200 * 1024, 'x'), mid(70 * 1024, 'y');
  const std::vector<std::string> files = {
      "",
      "\n\n",
      metric(0, 5),
      metric(0, 5) + "\n",
      metric(0, 5) + "\n" + metric(1, 4) + "\n",
      metric(0, 5) + "\n" + metric(1, 4) + "\n{\"step\": 2, \"lo",
      metric(0, 5) + "\r\n" + metric(1, 4) + "\r\n",
      "METRIC " + metric(3, 2) + "\nnot json\n\n",
      metric(0, 5) + "\n" + big + "\n",
      metric(0, 5) + "\n" + big + metric(7, 1),
      metric(0, 5) + "\n" + mid + metric(7, 1) + "\n",
      metric(0, 5) + "\n" + big + "\n" + metric(1, 4) + "\n" + big + "\n" + mid + "\n",
      big + metric(9, 0.5) + "\n" + big,
      big,
  };
  for (size_t i = 0; i < files.size(); ++i) {
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << files[i]; }
    const auto all = launch::read_metrics_file(path);
    const auto last = launch::read_last_metric(path);
    ASSERT_EQ(last.has_value(), !all.empty()) << i;
    if (last) {
      EXPECT_EQ(last->step, all.back().step) << i;
      EXPECT_EQ(last->loss, all.back().loss) << i;
      EXPECT_EQ(last->elapsed_s, all.back().elapsed_s) << i;
    }
  }
  // Cases that must have found a point (the reference above could agree on none).
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << files[11]; }
  ASSERT_TRUE(launch::read_last_metric(path).has_value());
  EXPECT_EQ(launch::read_last_metric(path)->step, 1);
  EXPECT_FALSE(launch::read_last_metric(tmp.filePath(QStringLiteral("none")).toStdString()).has_value());
}

// The one writer and reader of run.json (common/): a record reads back field for field, a
// simulated run's section included; a run that trained writes no such section.
TEST(RunDirReader, OneRunJsonWriterAndReaderRoundTrip) {
  QTemporaryDir tmp;
  const std::string path = tmp.filePath(QStringLiteral("run.json")).toStdString();
  RunRecord r;
  r.status = RunStatus::Stopped;
  r.started_at = "2026-01-02T03:04:05.678Z";
  r.duration_s = 12.5;
  r.world_size = 8;
  r.exit_code = 2;
  r.final_loss = 3.25;
  r.steps_done = 41;
  r.message = "stopped";
  r.pid = 4242;
  write_run_record_file(path, r);
  EXPECT_GE(std::filesystem::file_size(path), kRunJsonReserve);
  const RunRecordFile plain = read_run_record_file(path);
  ASSERT_TRUE(plain.present && plain.status_known && plain.problems.empty());
  EXPECT_EQ(plain.record.to_json(), r.to_json());
  EXPECT_FALSE(plain.has("simulated"));
  EXPECT_TRUE(plain.record.simulated.is_null());
  r.simulated = {{"hardware", "h200-x8"}, {"step_ms", 12.0}};
  write_run_record_file(path, r);
  const RunRecordFile sim = read_run_record_file(path);
  EXPECT_EQ(sim.record.simulated, r.simulated);
  EXPECT_EQ(sim.record.to_json(), r.to_json());
}

TEST(RunDirReader, LenientRunJsonAndBoundedClaims) {
  QTemporaryDir tmp;
  const std::string path = tmp.filePath(QStringLiteral("run.json")).toStdString();
  EXPECT_FALSE(read_run_record_file(path).present);
  EXPECT_FALSE(read_run_record_file(path).status_known);
  EXPECT_TRUE(read_run_record_file(path).problems.empty());  // no run.json: nothing to say
  { std::ofstream(path) << R"({"status": "failed", "world_size": 2e9, "failed_rank": 1, "steps_done": "x"})"; }
  const auto r = read_run_record_file(path);
  EXPECT_TRUE(r.present);
  EXPECT_EQ(r.record.status, RunStatus::Failed);
  EXPECT_EQ(r.record.world_size, 0);
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_NE(r.problems[0].find("steps_done is not a number"), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[1].find("claims 2e+09 ranks"), std::string::npos) << r.problems[1];
  EXPECT_EQ(r.record.failed_rank.value_or(-1), 1);
  EXPECT_FALSE(r.has("steps_done"));
  EXPECT_TRUE(r.has("failed_rank"));
  // A status ulysses-run never writes is unknown, said in problems, not passed on raw.
  { std::ofstream(path) << "{\"status\": \"\\u001b]0;pwned\\u0007done\", \"world_size\": 2}"; }
  const auto odd = read_run_record_file(path);
  EXPECT_FALSE(odd.status_known);
  EXPECT_EQ(odd.record.world_size, 2);
  ASSERT_EQ(odd.problems.size(), 1u);
  EXPECT_NE(odd.problems[0].find("not running, finished, failed or stopped"), std::string::npos) << odd.problems[0];
  EXPECT_EQ(ui::loadRunSummary(tmp.path()).status, QStringLiteral("unknown"));
  // A run.json that is there but no JSON object: said, not taken for an absent one.
  { std::ofstream(path) << "{\"status\": \"finished\", "; }
  const auto torn = read_run_record_file(path);
  EXPECT_FALSE(torn.present);
  EXPECT_FALSE(torn.status_known);
  ASSERT_EQ(torn.problems.size(), 1u);
  EXPECT_NE(torn.problems[0].find("cannot be read as a run record"), std::string::npos) << torn.problems[0];
  // Nested deeper than any run record: refused before parsing.
  {
    std::ofstream(path) << "{\"status\": \"finished\", \"x\": " << std::string(100, '[') << std::string(100, ']')
                        << "}";
  }
  EXPECT_FALSE(read_run_record_file(path).present);
  // METRIC text: with or without the prefix; step and loss must be numbers.
  EXPECT_TRUE(launch::parse_metric_text("METRIC {\"step\": 3, \"loss\": 2.5}").has_value());
  EXPECT_EQ(launch::parse_metric_text("  {\"step\": 3, \"loss\": 2.5, \"step_ms\": 7}\n")->step_ms, 7);
  EXPECT_FALSE(launch::parse_metric_text("{\"step\": \"3\", \"loss\": 2.5}").has_value());
  EXPECT_FALSE(launch::parse_metric_text("METRIC {\"step\": 1,").has_value());
  EXPECT_FALSE(launch::parse_metric_text("step 3/10 loss 4.2").has_value());
}

TEST(HtmlReport, FiguresEqualSummaryJsonAndNothingExternal) {
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const QString run = write_run(tmp);
  const auto js = trace_summary_json(run);
  const QString html = write_report(run, tmp.filePath(QStringLiteral("report.html")));
  const auto figs = html_figures(html);
  for (const char* key : {"headline.steps", "headline.step_ms", "headline.tokens_per_s", "headline.a2a_bytes_per_step",
                          "headline.allreduce_bytes_per_step", "headline.peak_memory_bytes", "overall.overlap_ratio",
                          "ranks.0.overlap_ratio", "ranks.1.overlap_ratio"}) {
    ASSERT_TRUE(figs.count(key)) << "figure " << key << " missing from the report";
    EXPECT_DOUBLE_EQ(figs.at(key), json_at(js, key)) << key;
  }
  EXPECT_DOUBLE_EQ(figs.at("headline.step_ms"), 25);  // hand-computed (see the top of the file)
  // Sections present: charts, breakdown, straggler table (2 ranks), memory.
  for (const char* id : {"id=\"step-chart\"", "id=\"loss-chart\"", "id=\"breakdown-chart\"", "id=\"stragglers\"",
                         "id=\"memory-chart\"", "id=\"memory\"", "id=\"layers\""})
    EXPECT_TRUE(html.contains(QLatin1String(id))) << id;
  // Self-contained: no script, no external reference, and a policy that forbids requests.
  for (const char* bad : {"http:", "https:", "<script", " src=", "href=", "url(", "@import", "<link"})
    EXPECT_FALSE(html.contains(QLatin1String(bad), Qt::CaseInsensitive)) << bad;
  EXPECT_TRUE(html.contains(QLatin1String("default-src 'none'")));
}

TEST(HtmlReport, RendersInHeadlessChromiumWithoutRequests) {
  QString chromium = qEnvironmentVariable("ULYSSES_CHROMIUM");
  if (chromium.isEmpty()) chromium = QStandardPaths::findExecutable(QStringLiteral("chromium"));
  if (chromium.isEmpty())
    GTEST_SKIP() << "chromium is not installed (apt-get install chromium, or set ULYSSES_CHROMIUM): "
                    "the HTML report was NOT checked in a browser";
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const QString run = write_run(tmp);
  const auto js = trace_summary_json(run);
  const QString report = tmp.filePath(QStringLiteral("report.html"));
  write_report(run, report);

  // The detector can fail: a page that loads an image over HTTP is caught.
  const QString canary = tmp.filePath(QStringLiteral("canary.html"));
  {
    std::ofstream(canary.toStdString()) << "<!DOCTYPE html><html><body><p id=\"x\">canary</p>"
                                           "<img src=\"http://127.0.0.1:9/canary.png\"></body></html>\n";
  }
  const auto c = render_in_chromium(chromium, canary, tmp.filePath(QStringLiteral("c")));
  ASSERT_TRUE(c.dom.contains(QLatin1String("canary"))) << "chromium did not render the canary page";
  ASSERT_FALSE(c.page_requests.empty()) << "the request detector missed the canary's http image";

  const auto b = render_in_chromium(chromium, report, tmp.filePath(QStringLiteral("r")));
  ASSERT_FALSE(b.dom.isEmpty()) << "chromium rendered nothing";
  EXPECT_TRUE(b.page_requests.empty()) << "the report made a request: " << b.page_requests.front();
  // The rendered DOM holds the charts and the figures of summary --json.
  for (const char* id : {"step-chart", "breakdown-chart", "memory-chart", "stragglers"})
    EXPECT_TRUE(b.dom.contains(QLatin1String(id))) << id;
  const auto figs = html_figures(b.dom);
  for (const char* key : {"headline.steps", "headline.step_ms", "headline.tokens_per_s", "headline.a2a_bytes_per_step",
                          "headline.allreduce_bytes_per_step", "headline.peak_memory_bytes", "overall.overlap_ratio"}) {
    ASSERT_TRUE(figs.count(key)) << key << " missing from the rendered page";
    EXPECT_DOUBLE_EQ(figs.at(key), json_at(js, key)) << key;
  }
}
