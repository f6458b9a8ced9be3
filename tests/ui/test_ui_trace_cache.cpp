// The studio's trace page and the summary cache (issue 13 item 6): the report of a trace whose
// summary is cached beside it is shown before the ranges are read, it is the same summary the
// loader computes, and the first open writes the cache that `ulysses-trace summary` reads.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <QSignalSpy>
#include <QTemporaryDir>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "testdata/rank_files.hpp"
#include "trace/report_view.hpp"
#include "trace/trace_models.hpp"
#include "trace/trace_loader.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"

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
