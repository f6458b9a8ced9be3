// The studio's trace page and the caches beside a trace (docs/PERFORMANCE.md): the report of a
// trace whose summary is cached beside it is shown before the ranges are read, it is the same
// summary the loader computes, and the first open writes the cache that `ulysses-trace
// summary` reads; likewise the overview (level-of-detail lanes) is drawn on the loading page
// before the ranges are read, and at full view it covers the pixels the whole trace covers.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <QSignalSpy>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "testdata/rank_files.hpp"
#include "testdata/synthetic_trace.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_index.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/report_view.hpp"
#include "trace/trace_models.hpp"
#include "trace/trace_loader.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"

using namespace ulysses;
using namespace ulysses::ui;
namespace fs = std::filesystem;

namespace {

// 4 rank files with the engine's structure, modified an hour ago: outside the cache's racy
// window, so the first open may write the cache.
struct CachedRun {
  QTemporaryDir dir;
  std::string run = dir.path().toStdString() + "/run";
  CachedRun() {
    unsetenv("ULYSSES_TRACE_NO_CACHE");
    fs::create_directories(run + "/trace");
    for (int r = 0; r < 4; ++r) {
      const std::string f = run + "/trace/rank" + std::to_string(r) + ".sqlite";
      testdata::generate_rank(f, r, 4, 2000, 3);
      const struct timespec ts[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
      EXPECT_EQ(utimensat(AT_FDCWD, f.c_str(), ts, 0), 0);
    }
  }
  std::string cache() const { return prof::summary_cache_path(run); }
};

std::string json_of(const LoadedTrace& t) { return prof::summary_to_json(*t.model, *t.summary).dump(); }

}  // namespace

TEST(StudioSummaryCache, FirstOpenComputesAndWritesTheSecondShowsTheCachedSummaryFirst) {
  CachedRun r;
  const QString run = QString::fromStdString(r.run);
  ASSERT_FALSE(fs::exists(r.cache()));

  // First open: no cache, so no early summary; computed, and written for the next open.
  int early_calls = 0;
  const LoadedTrace first = load_and_prepare(run, {}, [&](const LoadedTrace&) { ++early_calls; });
  ASSERT_TRUE(first.error.isEmpty()) << first.error.toStdString();
  EXPECT_EQ(early_calls, 0);
  EXPECT_FALSE(first.summary_from_cache);
  ASSERT_TRUE(fs::exists(r.cache()));
  ASSERT_GT(first.model->ranges.size(), 1000u);

  // Second open: the summary arrives first, with the cache's shell model (no ranges), then
  // the full model; the summary is the one the first open computed, field for field.
  std::vector<std::string> order;
  LoadedTrace early;
  const LoadedTrace second = load_and_prepare(
      run, [&](int, const QString&) { order.push_back(early.summary ? "progress-after-early" : "progress"); },
      [&](const LoadedTrace& e) {
        order.push_back("early");
        early = e;
      });
  ASSERT_TRUE(second.error.isEmpty()) << second.error.toStdString();
  ASSERT_TRUE(early.summary);
  EXPECT_TRUE(early.summary_from_cache);
  EXPECT_TRUE(early.model->ranges.empty());  // nothing of the ranges was read for it
  EXPECT_FALSE(early.index);
  EXPECT_TRUE(second.summary_from_cache);
  EXPECT_EQ(second.analyze_s, 0.0);
  EXPECT_EQ(second.model->ranges.size(), first.model->ranges.size());
  EXPECT_EQ(json_of(early), json_of(first));
  EXPECT_EQ(json_of(second), json_of(first));
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order[1], "early");  // after "reading", before the ranges and the index

  // ULYSSES_TRACE_NO_CACHE=1: not read (computed again, no early summary).
  setenv("ULYSSES_TRACE_NO_CACHE", "1", 1);
  early_calls = 0;
  const LoadedTrace off = load_and_prepare(run, {}, [&](const LoadedTrace&) { ++early_calls; });
  unsetenv("ULYSSES_TRACE_NO_CACHE");
  EXPECT_EQ(early_calls, 0);
  EXPECT_FALSE(off.summary_from_cache);
  EXPECT_EQ(json_of(off), json_of(first));
}

TEST(StudioSummaryCache, TraceViewShowsTheCachedReportWhileTheRangesLoad) {
  CachedRun r;
  const QString run = QString::fromStdString(r.run);
  QString error;
  {
    TraceView v;
    QSignalSpy shown(&v, &TraceView::summaryShown);
    ASSERT_TRUE(v.openTraceAndWait(run, &error)) << error.toStdString();
    EXPECT_EQ(shown.count(), 0);  // no cache yet
    EXPECT_FALSE(v.summaryFromCache());
    EXPECT_TRUE(v.loadingReport()->isHidden());
  }
  ASSERT_TRUE(fs::exists(r.cache()));
  TraceView v;
  std::vector<std::string> order;
  int report_rows_when_shown = -1;
  bool loading_when_shown = false, visible_when_shown = false;
  QObject::connect(&v, &TraceView::summaryShown, &v, [&](const QString& p) {
    order.push_back("summary");
    EXPECT_EQ(p, run);
    loading_when_shown = v.isLoading();
    visible_when_shown = !v.loadingReport()->isHidden();
    report_rows_when_shown = v.loadingReport()->ranksModel()->rowCount();
  });
  QObject::connect(&v, &TraceView::loaded, &v, [&](const QString&) { order.push_back("loaded"); });
  ASSERT_TRUE(v.openTraceAndWait(run, &error)) << error.toStdString();
  ASSERT_EQ(order, (std::vector<std::string>{"summary", "loaded"}));
  EXPECT_TRUE(loading_when_shown);
  EXPECT_TRUE(visible_when_shown);
  EXPECT_EQ(report_rows_when_shown, 4);  // one row per rank, from the cached summary
  EXPECT_TRUE(v.summaryFromCache());
  EXPECT_TRUE(v.loadingReport()->isHidden());  // the loaded page replaces it
  EXPECT_EQ(v.model()->ranks.size(), 4u);
}

// The trace overview (first paint, docs/PERFORMANCE.md): written beside the trace by the first
// open, drawn by the second before its ranges are read; at full view it covers the same
// pixels as the whole trace.
TEST(StudioOverview, FirstOpenWritesItTheSecondGetsItBeforeTheRanges) {
  CachedRun r;
  const QString run = QString::fromStdString(r.run);
  const std::string cpath = prof::overview_cache_path(r.run);
  ASSERT_FALSE(fs::exists(cpath));
  const LoadedTrace first = load_and_prepare(run);
  ASSERT_TRUE(first.error.isEmpty()) << first.error.toStdString();
  EXPECT_TRUE(first.overview_written);
  ASSERT_TRUE(fs::exists(cpath));

  std::vector<std::string> order;
  LoadedTrace early;
  const LoadedTrace second = load_and_prepare(
      run, [&](int pct, const QString&) { order.push_back(pct >= 40 ? "index" : "read"); },
      [&](const LoadedTrace& e) {
        order.push_back(e.overview ? "overview" : "summary");
        if (e.overview) early = e;
      });
  ASSERT_TRUE(second.error.isEmpty()) << second.error.toStdString();
  EXPECT_FALSE(second.overview_written);  // it was there already
  ASSERT_TRUE(early.overview);
  EXPECT_EQ(early.overview_full_ranges, int64_t(first.model->ranges.size()));
  const auto& om = early.overview->model();
  EXPECT_EQ(om.lanes.size(), first.model->lanes.size());
  EXPECT_LE(om.ranges.size(), first.model->ranges.size());
  EXPECT_GT(om.ranges.size(), 0u);
  EXPECT_EQ(om.t_min, first.model->t_min);
  EXPECT_EQ(om.t_max, first.model->t_max);
  // After "reading": the overview (small), then the summary, before any range was read or indexed.
  ASSERT_GE(order.size(), 4u);
  EXPECT_EQ(order[1], "overview");
  EXPECT_EQ(order[2], "summary");
  EXPECT_EQ(std::count(order.begin(), order.end(), "index") > 0, true);
  EXPECT_LT(std::find(order.begin(), order.end(), "summary"), std::find(order.begin(), order.end(), "index"));
}

namespace {
// Per row y, per pixel: the colour of the topmost range item there (0: none; shading not drawn).
std::map<int, std::vector<uint32_t>> raster(const DrawList& dl, int width) {
  std::map<int, std::vector<uint32_t>> rows;
  for (const auto& it : dl.items) {
    auto& row = rows[int(std::lround(it.y))];
    row.resize(size_t(width) + 2, 0);
    const int a = std::max(0, int(std::floor(it.x))), b = std::min(width + 1, int(std::ceil(it.x + it.w)));
    for (int x = a; x < std::max(b, a + 1); ++x) row[size_t(x)] = it.argb;
  }
  return rows;
}
// Pixels of `a` with no pixel of `b` within +-1 (same_colour: of the same colour).
int64_t unmatched(const std::map<int, std::vector<uint32_t>>& a, const std::map<int, std::vector<uint32_t>>& b,
                  bool same_colour) {
  int64_t n = 0;
  for (const auto& [y, row] : a) {
    const auto it = b.find(y);
    for (size_t x = 0; x < row.size(); ++x) {
      if (!row[x]) continue;
      bool near = false;
      if (it != b.end())
        for (size_t k = x == 0 ? 0 : x - 1; k <= x + 1 && k < it->second.size(); ++k)
          near = near || (same_colour ? it->second[k] == row[x] : it->second[k] != 0);
      n += near ? 0 : 1;
    }
  }
  return n;
}
int64_t ranges_drawn(const DrawList& dl) {
  int64_t n = 0;
  for (const auto& it : dl.items) n += it.count;
  return n;
}
}  // namespace

TEST(StudioOverview, FullViewCoversTheSamePixelsAsTheWholeTrace) {
  testdata::SyntheticOptions so;  // 8 ranks, kernels on two streams, head lanes
  so.target_ranges = 400000;
  std::shared_ptr<const prof::TraceModel> full = testdata::make_synthetic_trace(so);
  const prof::TraceOverview ov = prof::build_overview(*full);
  ASSERT_LT(ov.model.ranges.size(), full->ranges.size());
  const auto fi = TimelineIndex::build(full);
  const auto oi = TimelineIndex::build(std::make_shared<const prof::TraceModel>(ov.model), {}, ov.counts);
  ASSERT_EQ(oi->rows().size(), fi->rows().size());  // every row (lane, depth) is there
  const TimelineLayout fl = compute_layout(*fi), ol = compute_layout(*oi);
  ASSERT_EQ(ol.total_h, fl.total_h);
  for (int width : {800, 1600, 3000}) {
    DrawParams p;
    p.vp.width_px = width;
    p.vp.fit(fi->t_min(), fi->t_max());
    DrawList fd, od;
    compute_draw_list(*fi, fl, p, &fd);
    compute_draw_list(*oi, ol, p, &od);
    const auto fr = raster(fd, width), orr = raster(od, width);
    int64_t covered = 0;
    for (const auto& [y, row] : fr) covered += int64_t(row.size()) - std::count(row.begin(), row.end(), 0u);
    ASSERT_GT(covered, width);
    EXPECT_EQ(unmatched(fr, orr, false), 0)
        << "width " << width << ": pixels the trace covers and the overview does not";
    EXPECT_EQ(unmatched(orr, fr, false), 0)
        << "width " << width << ": pixels the overview covers and the trace does not";
    // Colours (phase of single ranges, the fold colour of folded runs) agree but for a few
    // pixels at the edges of folds: the overview folds at q, finer than the frame's fold_px.
    const int64_t colour_off = unmatched(fr, orr, true);
    EXPECT_LE(colour_off * 100, covered) << "width " << width << ": " << colour_off << " of " << covered;
    // Every range of the trace is counted once in both (folded items count the trace's ranges).
    EXPECT_EQ(ranges_drawn(od), ranges_drawn(fd)) << "width " << width;
    EXPECT_EQ(ranges_drawn(fd), int64_t(full->ranges.size()));
    std::printf(
        "width %d: %lld pixels covered, %lld of another colour within 1 px; items %zu (trace) / %zu (overview)\n",
        width, (long long)covered, (long long)colour_off, fd.items.size(), od.items.size());
  }
}

TEST(StudioOverview, TraceViewDrawsTheOverviewWhileTheRangesLoad) {
  CachedRun r;
  const QString run = QString::fromStdString(r.run);
  QString error;
  {
    TraceView v;
    QSignalSpy shown(&v, &TraceView::overviewShown);
    ASSERT_TRUE(v.openTraceAndWait(run, &error)) << error.toStdString();
    EXPECT_EQ(shown.count(), 0);  // nothing cached yet
    EXPECT_TRUE(v.loadingTimeline()->isHidden());
  }
  ASSERT_TRUE(fs::exists(prof::overview_cache_path(r.run)));
  TraceView v;
  v.resize(1200, 800);
  std::vector<std::string> order;
  bool visible_when_shown = false, loading_when_shown = false;
  size_t lanes_when_shown = 0;
  int64_t zoom_a = 0, zoom_b = 0;
  QObject::connect(&v, &TraceView::overviewShown, &v, [&](const QString& p) {
    order.push_back("overview");
    EXPECT_EQ(p, run);
    loading_when_shown = v.isLoading();
    visible_when_shown = !v.loadingTimeline()->isHidden();
    lanes_when_shown = v.loadingTimeline()->index() ? v.loadingTimeline()->index()->lanes().size() : 0;
    // It draws: the first frame's draw list has items.
    EXPECT_GT(v.loadingTimeline()->drawList().items.size(), 0u);
    // The user zooms into the middle fifth while the ranges load.
    const auto& ix = *v.loadingTimeline()->index();
    zoom_a = ix.t_min() + (ix.t_max() - ix.t_min()) * 2 / 5;
    zoom_b = ix.t_min() + (ix.t_max() - ix.t_min()) * 3 / 5;
    TimelineViewport z = v.loadingTimeline()->viewport();
    z.fit(zoom_a, zoom_b);
    v.loadingTimeline()->setViewport(z);
  });
  QObject::connect(&v, &TraceView::summaryShown, &v, [&](const QString&) { order.push_back("summary"); });
  QObject::connect(&v, &TraceView::loaded, &v, [&](const QString&) { order.push_back("loaded"); });
  ASSERT_TRUE(v.openTraceAndWait(run, &error)) << error.toStdString();
  ASSERT_EQ(order, (std::vector<std::string>{"overview", "summary", "loaded"}));
  EXPECT_TRUE(loading_when_shown);
  EXPECT_TRUE(visible_when_shown);
  EXPECT_EQ(lanes_when_shown, v.model()->lanes.size());
  EXPECT_TRUE(v.loadingTimeline()->isHidden());  // the loaded page replaces it
  EXPECT_FALSE(v.loadingTimeline()->index());    // and the overview is freed
  // The loaded timeline opens where the overview was zoomed to (to a pixel or so).
  const auto& vp = v.timeline()->viewport();
  ASSERT_LT(zoom_a, zoom_b);
  EXPECT_NEAR(double(vp.t0_ns), double(zoom_a), 2 * vp.ns_per_px);
  EXPECT_NEAR(double(vp.t1_ns()), double(zoom_b), 2 * vp.ns_per_px);
  // Not moved: the loaded timeline shows the whole run as usual.
  TraceView w;
  w.resize(1200, 800);
  ASSERT_TRUE(w.openTraceAndWait(run, &error)) << error.toStdString();
  const auto& ix = *w.timeline()->index();
  EXPECT_LE(w.timeline()->viewport().t0_ns, ix.t_min());
  EXPECT_GE(w.timeline()->viewport().t1_ns(), ix.t_max());
}
