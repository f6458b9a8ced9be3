// The staged open (profiler/trace_open.hpp) on a run folder of three rank files: the first open
// finds no cache, computes the summary (equal to analyze of load_trace) and writes the summary,
// overview and rank-file caches; the second answers stages 1 and 2 from them (the overview equal
// to build_overview of the full model, the summary equal to the computed one) and reads the
// ranges from the rank-file caches without analysing again; prepare_trace_caches then has
// nothing left to do. A run still being written (racy window) gets no cache.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "testdata/rank_files.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_open.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

std::string three_rank_run(const std::string& root, bool settled) {
  const std::string run = root + "/run";
  fs::create_directories(run + "/trace");
  for (int r = 0; r < 3; ++r) {
    const std::string f = run + "/trace/rank" + std::to_string(r) + ".sqlite";
    ulysses::testdata::generate_rank(f, r, 3, 400, 2);
    if (settled) {
      const struct timespec ts[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
      EXPECT_EQ(utimensat(AT_FDCWD, f.c_str(), ts, 0), 0) << f;
    }
  }
  return run;
}

// The summary as `ulysses-trace summary --json` prints it (the model gives names and ranks).
std::string json_of(const prof::TraceModel& m, const prof::Summary& s) { return prof::summary_to_json(m, s).dump(); }

}  // namespace

TEST(TraceOpen, FirstOpenWritesTheCachesTheSecondAnswersFromThem) {
  ut::TempDir tmp;
  const std::string run = three_rank_run(tmp.path, true);
  const prof::TraceModel truth = prof::load_trace(run);
  const std::string truth_summary = json_of(truth, prof::analyze(truth));
  {
    prof::TraceOpen open(run);
    EXPECT_FALSE(open.overview());
    EXPECT_FALSE(open.summary());
    prof::TraceOpen::Ranges r = open.ranges();
    ASSERT_TRUE(r.summary);
    EXPECT_EQ(json_of(truth, *r.summary), truth_summary);
    EXPECT_EQ(r.model.ranges.size(), truth.ranges.size());
    EXPECT_TRUE(open.summary_cached());  // written by the load
    EXPECT_EQ(open.file_stats().file_caches_written, 3);
    int64_t n = 0;
    EXPECT_TRUE(open.write_overview(r.model, &n));
    EXPECT_GT(n, 0);
    EXPECT_FALSE(open.write_overview(r.model));  // once
  }
  prof::TraceOpen open(run);
  std::optional<prof::TraceOverview> ov = open.overview();
  ASSERT_TRUE(ov);
  EXPECT_EQ(prof::encode_overview(*ov), prof::encode_overview(prof::build_overview(truth)));
  std::optional<prof::CachedSummary> s = open.summary();
  ASSERT_TRUE(s);
  EXPECT_EQ(json_of(truth, s->summary), truth_summary);
  EXPECT_TRUE(s->model.ranges.empty());  // the shell: the ranges come in stage 3
  prof::TraceOpen::Ranges r = open.ranges();
  EXPECT_FALSE(r.summary);  // not analysed again
  EXPECT_EQ(r.model.ranges.size(), truth.ranges.size());
  EXPECT_EQ(open.file_stats().from_file_cache, 3);
  EXPECT_FALSE(open.write_overview(r.model));  // it was cached
  const prof::PreparedCaches p = prof::prepare_trace_caches(run);
  EXPECT_FALSE(p.loaded);
  EXPECT_TRUE(p.summary_cached && p.overview_cached);
  EXPECT_EQ(p.rank_files_cached, 3);
}

TEST(TraceOpen, ARunStillBeingWrittenGetsNoCache) {
  ut::TempDir tmp;
  const std::string run = three_rank_run(tmp.path, false);  // modified just now
  prof::TraceOpen open(run);
  EXPECT_FALSE(open.overview());
  EXPECT_FALSE(open.summary());
  prof::TraceOpen::Ranges r = open.ranges();
  ASSERT_TRUE(r.summary);
  EXPECT_FALSE(open.summary_cached());
  EXPECT_EQ(open.file_stats().file_caches_written, 0);
  EXPECT_FALSE(open.write_overview(r.model));
  EXPECT_FALSE(fs::exists(prof::overview_cache_path(run)));
  // With no racy window (every writer has closed) the same inputs are cached.
  prof::TraceOpen now(run, 0);
  prof::TraceOpen::Ranges r0 = now.ranges();
  EXPECT_TRUE(now.summary_cached());
  EXPECT_TRUE(now.write_overview(r0.model));
}

// The summary cache written by another process between stages 2 and 3 (another studio, a
// `ulysses-trace summary`): stage 3 takes that summary and still reads the ranges (the cache's
// model is a shell without them); the studio showed an empty trace there before.
TEST(TraceOpen, ASummaryCachedMeanwhileStillGivesTheRanges) {
  ut::TempDir tmp;
  const std::string run = three_rank_run(tmp.path, true);
  const prof::TraceModel truth = prof::load_trace(run);
  prof::TraceOpen open(run);
  EXPECT_FALSE(open.summary());
  prof::LoadOptions other = open.load_options();
  other.stats = nullptr;
  const prof::CachedSummary elsewhere = prof::load_summary(run, other, prof::AnalysisOptions{});
  ASSERT_TRUE(elsewhere.written);
  prof::TraceOpen::Ranges r = open.ranges();
  ASSERT_TRUE(r.summary);
  EXPECT_EQ(json_of(truth, *r.summary), json_of(truth, elsewhere.summary));
  EXPECT_EQ(r.model.ranges.size(), truth.ranges.size());
  EXPECT_GT(r.model.ranges.size(), 0u);
  EXPECT_TRUE(open.summary_cached());
}
