// Teaching and demos in the studio (docs/STUDIO.md), on the demo-like fixture run
// (run_fixture.hpp: 2 ranks, 5 steps, 3 traced layers with projections):
//  - the explainer's measured stage times equal the figures computed from the same trace by
//    `ulysses-trace summary --json` (its `layers` table, reduced naively here) and a hand
//    reference from how the fixture placed its ranges;
//  - selecting a range in the timeline highlights its stage in the explainer.
#include <gtest/gtest.h>

#include <QDir>
#include <QProcess>
#include <QTemporaryDir>

#include <algorithm>
#include <set>
#include <nlohmann/json.hpp>

#include "explain_times.hpp"
#include "explain_view.hpp"
#include "main_window.hpp"
#include "ui/run_fixture.hpp"
#include "trace/phase_style.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {
const std::vector<test::FixtureStep> kSteps = {
    {400, 5.0, 100 << 20}, {150, 4.0, 300 << 20}, {150, 3.5, 200 << 20}, {160, 3.2, 250 << 20}, {150, 3.0, 220 << 20}};
constexpr int kLayers = 3;

nlohmann::json trace_summary_json(const QString& run) {
  QProcess p;
  p.start(QStringLiteral(ULYSSES_TRACE_PATH), {QStringLiteral("summary"), run, QStringLiteral("--json")});
  EXPECT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  return nlohmann::json::parse(p.readAllStandardOutput().toStdString());
}

// Naive: per forward layer key_ns / samples, sorted, middle value (mean of the two middle ones).
double naive_median(const nlohmann::json& summary, const char* key, int* count) {
  std::vector<double> v;
  for (const auto& row : summary.at("layers"))
    if (row.at("direction") == "fwd" && row.at("samples").get<int64_t>() > 0 && row.at(key).get<int64_t>() > 0)
      v.push_back(double(row.at(key).get<int64_t>()) / double(row.at("samples").get<int64_t>()));
  *count = int(v.size());
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

class TeachRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.isValid());
    run_ = tmp_.filePath(QStringLiteral("run"));
    test::write_fixture_run(run_.toStdString(), 2, kSteps, {kLayers, true});
  }
  QTemporaryDir tmp_;
  QString run_;
};
}  // namespace

TEST_F(TeachRun, ExplainerStageTimesEqualTraceSummary) {
  const nlohmann::json sum = trace_summary_json(run_);
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  auto* ex = w.findChild<ExplainView*>();
  ASSERT_NE(ex, nullptr);
  const auto& shown = ex->stageTimes();
  ASSERT_EQ(shown.size(), size_t(kExplainStageCount));
  EXPECT_FALSE(shown[0].measured);
  const char* keys[] = {nullptr,        "qkv_proj_ns",        "a2a_seq_to_head_ns",
                        "attention_ns", "a2a_head_to_seq_ns", "out_proj_ns"};
  // Where the fixture put each stage, as a fraction of the one-layer forward slice [0, 0.70).
  const double frac[] = {0, 0.05, 0.15, 0.40, 0.10, 0.05};
  // The median layer of 3 is layer 1, whose slice is 4/14 of the forward part (slices 1:4:9,
  // so the mean over layers, 14/3, would be another figure).
  double mean_step_ns = 0;
  for (int r = 0; r < 2; ++r)
    for (const auto& s : kSteps) mean_step_ns += (s.step_ms * 1e6 + r * 1000) / double(2 * kSteps.size());
  for (int s = 1; s < kExplainStageCount; ++s) {
    int layers = 0;
    const double ref = naive_median(sum, keys[s], &layers);
    ASSERT_EQ(layers, kLayers) << keys[s];
    EXPECT_TRUE(shown[size_t(s)].measured) << keys[s];
    EXPECT_EQ(shown[size_t(s)].layers, kLayers);
    EXPECT_NEAR(shown[size_t(s)].median_ns, ref, 1e-9 * ref) << keys[s];
    // Hand reference: (fraction / 0.70) x (4/14 of 0.70) x mean step time, within 2 ns of
    // the integer truncation of each range's ends.
    EXPECT_NEAR(shown[size_t(s)].median_ns, frac[s] * 4.0 / 14.0 * mean_step_ns, 2.0) << keys[s];
    // ... and the caption shows it.
    EXPECT_TRUE(ex->captionText().contains(QString::fromStdString(format_duration_ns(ref)))) << keys[s];
  }
}

TEST_F(TeachRun, SelectingARangeHighlightsItsStage) {
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  auto* ex = w.findChild<ExplainView*>();
  auto* tl = w.traceView()->timeline();
  const auto m = w.traceView()->model();
  ASSERT_TRUE(ex && tl && m);
  EXPECT_EQ(ex->highlightedStage(), -1);
  auto first_of = [&](prof::Phase p) -> qint64 {
    for (size_t i = 0; i < m->ranges.size(); ++i)
      if (m->ranges[i].phase == p) return qint64(i);
    return -1;
  };
  const std::pair<prof::Phase, int> cases[] = {{prof::Phase::QkvProj, 1},
                                               {prof::Phase::A2ASeqToHead, 2},
                                               {prof::Phase::Attention, 3},
                                               {prof::Phase::A2AHeadToSeq, 4},
                                               {prof::Phase::OutProj, 5}};
  for (const auto& [phase, stage] : cases) {
    const qint64 i = first_of(phase);
    ASSERT_GE(i, 0) << prof::phase_name(phase);
    tl->selectRange(i);
    EXPECT_EQ(ex->highlightedStage(), stage) << prof::phase_name(phase);
    EXPECT_EQ(ex->stage(), stage);
  }
  // A range of no attention stage (the gradient all-reduce) clears the mark, keeps the stage.
  tl->selectRange(first_of(prof::Phase::GradAllReduce));
  EXPECT_EQ(ex->highlightedStage(), -1);
  EXPECT_EQ(ex->stage(), 5);
  tl->selectRange(first_of(prof::Phase::Attention));
  tl->selectRange(-1);
  EXPECT_EQ(ex->highlightedStage(), -1);
}

// ---- colour-blind-safe palette in the studio ---------------------------------------------
#include <QAction>
#include <QImage>
#include <QProcessEnvironment>
#include <QXmlStreamReader>

#include "svg_export.hpp"

namespace {
// Pixels of exactly this colour in the image.
int count_pixels(const QImage& img, uint32_t argb) {
  const QImage im = img.convertToFormat(QImage::Format_ARGB32);
  int n = 0;
  for (int y = 0; y < im.height(); ++y) {
    const auto* row = reinterpret_cast<const QRgb*>(im.constScanLine(y));
    for (int x = 0; x < im.width(); ++x) n += (row[x] | 0xFF000000u) == argb;
  }
  return n;
}
}  // namespace

TEST_F(TeachRun, ColourBlindPaletteFromTheViewMenu) {
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  ASSERT_TRUE(w.setView(QStringLiteral("timeline")));
  auto* tl = w.traceView()->timeline();
  auto* action = w.findChild<QAction*>(QStringLiteral("colorBlindPalette"));
  ASSERT_NE(action, nullptr);
  ASSERT_FALSE(action->isChecked());
  const uint32_t def = phase_argb(prof::Phase::Attention, prof::Direction::Forward, PhasePalette::Default);
  const uint32_t cb = phase_argb(prof::Phase::Attention, prof::Direction::Forward, PhasePalette::ColorBlind);
  auto attention_colours = [&] {
    std::set<uint32_t> seen;
    const auto m = w.traceView()->model();
    for (const auto& it : tl->drawList().items)
      if (!(it.flags & kFolded) && it.range >= 0 && m->ranges[size_t(it.range)].phase == prof::Phase::Attention)
        seen.insert(it.argb);
    return seen;
  };
  EXPECT_EQ(attention_colours(), std::set<uint32_t>{def});
  EXPECT_GT(count_pixels(tl->grab().toImage(), def), 0);
  action->setChecked(true);
  EXPECT_EQ(phase_palette(), PhasePalette::ColorBlind);
  EXPECT_EQ(attention_colours(), std::set<uint32_t>{cb});
  const QImage img = tl->grab().toImage();
  EXPECT_GT(count_pixels(img, cb), 0);
  EXPECT_EQ(count_pixels(img, def), 0);
  action->setChecked(false);
  EXPECT_EQ(attention_colours(), std::set<uint32_t>{def});
  EXPECT_EQ(phase_palette(), PhasePalette::Default);
}

#ifdef ULYSSES_STUDIO_PATH
TEST_F(TeachRun, ScreenshotWithPaletteCb) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
  env.insert(QStringLiteral("XDG_CONFIG_HOME"), tmp_.filePath(QStringLiteral("config")));  // no user settings touched
  p.setProcessEnvironment(env);
  const QString png = tmp_.filePath(QStringLiteral("cb.png"));
  p.start(
      QStringLiteral(ULYSSES_STUDIO_PATH),
      {run_, QStringLiteral("--view"), QStringLiteral("timeline"), QStringLiteral("--palette"), QStringLiteral("cb"),
       QStringLiteral("--size"), QStringLiteral("1200x800"), QStringLiteral("--screenshot"), png});
  ASSERT_TRUE(p.waitForFinished(60000));
  ASSERT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  const QImage img(png);
  ASSERT_FALSE(img.isNull());
  EXPECT_GT(count_pixels(img, phase_argb(prof::Phase::Attention, prof::Direction::Forward, PhasePalette::ColorBlind)),
            0);
  EXPECT_EQ(count_pixels(img, phase_argb(prof::Phase::Attention, prof::Direction::Forward, PhasePalette::Default)), 0);
  // An unknown palette: exit 2 and a message naming the choices.
  p.start(QStringLiteral(ULYSSES_STUDIO_PATH),
          {QStringLiteral("--palette"), QStringLiteral("rainbow"), QStringLiteral("--screenshot"), png});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 2);
  EXPECT_TRUE(p.readAllStandardError().contains("default or cb"));
}
#endif

// ---- SVG export of every view --------------------------------------------------------------
namespace {
struct SvgStats {
  QString error, root;
  int shapes = 0, texts = 0, images = 0;
};
SvgStats parse_svg(const QString& path) {
  SvgStats s;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    s.error = QStringLiteral("cannot read");
    return s;
  }
  QXmlStreamReader x(&f);
  while (!x.atEnd()) {
    if (x.readNext() != QXmlStreamReader::StartElement) continue;
    const auto n = x.name();
    if (s.root.isEmpty()) s.root = n.toString();
    if (n == u"path" || n == u"rect" || n == u"polygon" || n == u"polyline")
      ++s.shapes;
    else if (n == u"text")
      ++s.texts;
    else if (n == u"image")
      ++s.images;
  }
  if (x.hasError()) s.error = x.errorString() + QStringLiteral(" at line %1").arg(x.lineNumber());
  return s;
}
}  // namespace

TEST_F(TeachRun, SvgExportOfEveryView) {
  MainWindow w;
  w.setQuiet(true);
  w.resize(1200, 800);
  QString err;
  ASSERT_TRUE(w.openPath(run_, &err)) << err.toStdString();
  ASSERT_TRUE(w.openTraceAndWait(run_, &err)) << err.toStdString();
  for (const char* view : {"launch", "monitor", "runs", "explain", "timeline", "headmap", "memory", "report"}) {
    ASSERT_TRUE(w.setView(QString::fromLatin1(view))) << view;
    const QString svg = tmp_.filePath(QStringLiteral("%1.svg").arg(QLatin1String(view)));
    ASSERT_TRUE(w.exportCurrentView(svg, &err)) << view << ": " << err.toStdString();
    const SvgStats s = parse_svg(svg);
    EXPECT_TRUE(s.error.isEmpty()) << view << ": " << s.error.toStdString();
    EXPECT_EQ(s.root, QStringLiteral("svg")) << view;
    EXPECT_GE(s.shapes, 5) << view;
    EXPECT_GE(s.texts, 3) << view;  // labels stay text
    // PNG still works for the same view.
    const QString png = tmp_.filePath(QStringLiteral("%1.png").arg(QLatin1String(view)));
    ASSERT_TRUE(w.exportCurrentView(png, &err)) << view << ": " << err.toStdString();
    EXPECT_FALSE(QImage(png).isNull()) << view;
  }
  // The timeline's ranges are vector shapes in their phase colour.
  ASSERT_TRUE(w.setView(QStringLiteral("timeline")));
  const QString tl = widgetSvg(w.traceView()->timeline());
  EXPECT_TRUE(tl.contains(QColor::fromRgba(phase_argb(prof::Phase::Attention)).name(QColor::HexRgb)))
      << "no attention-coloured shape";
  // Nothing written where nothing can be.
  EXPECT_FALSE(w.exportCurrentView(tmp_.filePath(QStringLiteral("no/such/dir/x.svg")), &err));
  EXPECT_TRUE(err.contains(QLatin1String("cannot write")));
}
