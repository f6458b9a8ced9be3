// The summary cache (profiler/summary_cache.hpp): the encoding round-trips every field bit for
// bit; text, JSON and HTML from the cache are byte-identical to the uncached ones on a 4-rank
// run; touching, appending to or rewriting a rank file (same size, new mtime), other options,
// a corrupt cache, an unwritable folder and a run still being written all fall back to the
// trace; --no-cache and ULYSSES_TRACE_NO_CACHE neither read nor write it.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "testdata/rank_files.hpp"
#include "testdata/synthetic_trace.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/cache_io.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

struct Rendered {
  std::string text, json, html;
  bool operator==(const Rendered& o) const { return text == o.text && json == o.json && html == o.html; }
};
Rendered render(const prof::TraceModel& m, const prof::Summary& s) {
  return {prof::summary_to_text(m, s), prof::summary_to_json(m, s).dump(2), prof::summary_to_html(m, s, "t")};
}

prof::LoadOptions summary_load() {
  prof::LoadOptions lo;
  lo.head_lanes = false;  // as ulysses-trace summary
  return lo;
}

// The uncached answer, straight from the trace.
Rendered fresh(const std::string& run, const prof::AnalysisOptions& ao = {}) {
  prof::SummaryCacheOptions off;
  off.enabled = false;
  const auto c = prof::load_summary(run, summary_load(), ao, off);
  EXPECT_FALSE(c.from_cache);
  EXPECT_FALSE(c.written);
  return render(c.model, c.summary);
}

void set_mtime(const std::string& f, int64_t sec, int64_t nsec) {
  const struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
  ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), ts, 0), 0) << f;
}
struct timespec mtime_of(const std::string& f) {
  struct stat st {};
  EXPECT_EQ(::stat(f.c_str(), &st), 0);
  return st.st_mtim;
}

// 4 rank files (engine structure, collectives with (pg, seq)), modified an hour ago so the
// cache's racy window does not apply.
struct CacheRun {
  ut::TempDir dir;
  std::string run = dir.path + "/run";
  std::vector<std::string> files;
  CacheRun() {
    fs::create_directories(run + "/trace");
    for (int r = 0; r < 4; ++r) {
      files.push_back(run + "/trace/rank" + std::to_string(r) + ".sqlite");
      ulysses::testdata::generate_rank(files.back(), r, 4, 600, 3);
    }
    for (const auto& f : files) set_mtime(f, ::time(nullptr) - 3600, 0);
  }
  std::string cache() const { return run + "/trace/.ulysses-summary-cache"; }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every range ends 7 ns later: the file keeps its size and inode, its summary changes.
void rewrite_in_place(const std::string& f) {
  const auto before = fs::file_size(f);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE NVTX_EVENTS SET end = end + 7", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);  // last connection: checkpoints and removes the -wal file
  ASSERT_FALSE(fs::exists(f + "-wal"));
  ASSERT_EQ(fs::file_size(f), before) << "the test needs a same-size rewrite";
}

}  // namespace

TEST(SummaryCache, EncodingRoundTripsEveryFieldBitForBit) {
  ulysses::testdata::SyntheticOptions so;  // kernels, memory samples, head lanes, 8 ranks
  so.steps = 3;
  auto m = ulysses::testdata::make_synthetic_trace(so);
  m->notes = {"a note", "another"};
  m->config_json = R"({"x":1})";
  m->clocks.push_back({1, true, true, 5, 6, 7, 8, 9, 10, true});
  prof::DocumentShard doc;  // every field distinct (ULYSSES_DOCUMENTS, data.kind = documents)
  doc.rank = 3, doc.piece = 1, doc.step = 1LL << 40, doc.sequence = 5, doc.packed = 6, doc.shard_begin = 48;
  doc.shard_end = 64, doc.document = -1, doc.doc_tokens = 38, doc.doc_offset = 9, doc.begin = 26, doc.end = 64;
  m->documents = {doc, doc};
  m->documents[0].document = 123456789012;
  prof::Summary s = prof::analyze(*m);
  // Values no analysis of this trace produces, to see that nothing is rounded or dropped.
  s.headline.tokens_per_s = std::numeric_limits<double>::quiet_NaN();
  s.headline.step_ms = 0.1 + 0.2;
  s.overall.ratio = -std::numeric_limits<double>::infinity();
  s.num_ranges = std::numeric_limits<int64_t>::min();
  s.waiting.instances.push_back({3,
                                 1LL << 40,
                                 2,
                                 prof::Phase::A2AHeadToSeq,
                                 prof::Direction::Backward,
                                 5,
                                 {{0, -5, 9}, {7, 1LL << 62, std::numeric_limits<int64_t>::max()}},
                                 1,
                                 2,
                                 3,
                                 7});
  s.waiting.median_skew_ns = 1e-300;
  ASSERT_FALSE(s.steps.empty());
  ASSERT_FALSE(s.names.empty());
  ASSERT_FALSE(m->memory.empty());

  const std::string bytes = prof::encode_summary(*m, s);
  prof::TraceModel d;
  prof::Summary t;
  prof::decode_summary(bytes, &d, &t);
  EXPECT_EQ(d.source, "");  // not stored
  d.source = m->source;
  EXPECT_TRUE(render(*m, s) == render(d, t));
  // Fields no renderer prints.
  auto bits = [](double x) {
    uint64_t u;
    std::memcpy(&u, &x, 8);
    return u;
  };
  EXPECT_EQ(bits(t.headline.tokens_per_s), bits(s.headline.tokens_per_s));
  EXPECT_EQ(bits(t.headline.step_ms), bits(0.1 + 0.2));
  EXPECT_EQ(t.num_ranges, std::numeric_limits<int64_t>::min());
  ASSERT_EQ(t.waiting.instances.size(), s.waiting.instances.size());
  const auto& ci = t.waiting.instances.back();
  EXPECT_EQ(ci.seq, 1LL << 40);
  EXPECT_EQ(ci.phase, prof::Phase::A2AHeadToSeq);
  EXPECT_EQ(ci.dir, prof::Direction::Backward);
  ASSERT_EQ(ci.arrivals.size(), 2u);
  EXPECT_EQ(ci.arrivals[0].arrive_ns, -5);
  EXPECT_EQ(ci.arrivals[1].end_ns, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ci.last_arriver, 7);
  EXPECT_EQ(bits(t.waiting.median_skew_ns), bits(1e-300));
  EXPECT_EQ(d.strings, m->strings);
  EXPECT_EQ(d.config_json, m->config_json);
  EXPECT_EQ(d.notes, m->notes);
  ASSERT_EQ(d.documents.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto &a = d.documents[i], &b = m->documents[i];
    EXPECT_EQ(std::tie(a.rank, a.piece, a.step, a.sequence, a.packed, a.shard_begin, a.shard_end, a.document,
                       a.doc_tokens, a.doc_offset, a.begin, a.end),
              std::tie(b.rank, b.piece, b.step, b.sequence, b.packed, b.shard_begin, b.shard_end, b.document,
                       b.doc_tokens, b.doc_offset, b.begin, b.end));
  }
  ASSERT_EQ(d.clocks.size(), m->clocks.size());
  EXPECT_EQ(d.clocks.back().close_at_ns, 10);
  EXPECT_TRUE(d.clocks.back().applied);
  ASSERT_EQ(d.memory.size(), m->memory.size());
  EXPECT_EQ(d.memory.back().label_id, m->memory.back().label_id);
  EXPECT_EQ(d.memory.back().step, m->memory.back().step);
  EXPECT_EQ(d.t_max, m->t_max);
  EXPECT_TRUE(d.ranges.empty());  // the shell: no ranges, lanes or runtime calls
  EXPECT_TRUE(d.lanes.empty());
  // Same bytes again, and every truncation is refused (never read past the end).
  EXPECT_EQ(prof::encode_summary(d, t), bytes);
  for (size_t n = 0; n < bytes.size(); n += 1 + bytes.size() / 97) {
    prof::TraceModel x;
    prof::Summary y;
    EXPECT_THROW(prof::decode_summary(bytes.substr(0, n), &x, &y), std::runtime_error) << n;
  }
}

TEST(SummaryCache, CachedOutputIsByteIdenticalToUncached) {
  CacheRun r;
  const Rendered want = fresh(r.run);
  EXPECT_FALSE(fs::exists(r.cache()));  // disabled: nothing written
  const auto first = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(first.written);
  ASSERT_TRUE(fs::exists(r.cache()));
  EXPECT_EQ(prof::summary_cache_path(r.run), r.cache());
  const auto second = prof::load_summary(r.run, summary_load(), {});
  ASSERT_TRUE(second.from_cache);
  EXPECT_FALSE(second.written);
  EXPECT_TRUE(second.model.ranges.empty());  // answered without loading ranges
  EXPECT_FALSE(second.summary.waiting.instances.empty());
  EXPECT_EQ(second.model.source, r.run);
  const Rendered got = render(second.model, second.summary);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.json, want.json);
  EXPECT_EQ(got.html, want.html);
  // No temp file left behind.
  for (const auto& e : fs::directory_iterator(r.run + "/trace"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(SummaryCache, OtherOptionsAreAnotherKey) {
  CacheRun r;
  ASSERT_TRUE(prof::load_summary(r.run, summary_load(), {}).written);
  prof::AnalysisOptions ao;
  ao.step_begin = 2;
  const auto c = prof::load_summary(r.run, summary_load(), ao);
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(render(c.model, c.summary) == fresh(r.run, ao));
  EXPECT_FALSE(render(c.model, c.summary) == fresh(r.run));
  prof::LoadOptions no_align = summary_load();
  no_align.align_clocks = false;
  EXPECT_FALSE(prof::load_summary(r.run, no_align, ao).from_cache);
  EXPECT_TRUE(prof::load_summary(r.run, no_align, ao).from_cache);
}

// The studio loads with head-range lanes (display copies), ulysses-trace without: the summary
// is the same, so both read one record instead of rewriting it in turn.
TEST(SummaryCache, StudioAndCliLoadOptionsShareOneRecord) {
  CacheRun r;
  prof::LoadOptions studio;  // defaults: head lanes on
  ASSERT_TRUE(studio.head_lanes);
  const auto first = prof::load_summary(r.run, studio, {});
  ASSERT_TRUE(first.written);
  const auto cli = prof::load_summary(r.run, summary_load(), {});
  EXPECT_TRUE(cli.from_cache);
  EXPECT_FALSE(cli.written);
  EXPECT_TRUE(render(cli.model, cli.summary) == fresh(r.run));  // the CLI's own uncached answer
  EXPECT_TRUE(render(first.model, first.summary) == fresh(r.run));
  EXPECT_TRUE(prof::load_summary(r.run, studio, {}).from_cache);
}

TEST(SummaryCache, TouchingOrAppendingToARankFileInvalidates) {
  CacheRun r;
  ASSERT_TRUE(prof::load_summary(r.run, summary_load(), {}).written);
  set_mtime(r.files[2], ::time(nullptr) - 1800, 5);  // touched (to a settled time)
  auto c = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(c.written);
  EXPECT_TRUE(prof::load_summary(r.run, summary_load(), {}).from_cache);
  {  // appended to (SQLite ignores the tail; the key sees the size)
    const auto t = mtime_of(r.files[1]);
    std::ofstream(r.files[1], std::ios::app | std::ios::binary) << std::string(4096, '\0');
    set_mtime(r.files[1], t.tv_sec, t.tv_nsec);  // same mtime: only the size differs
  }
  c = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(render(c.model, c.summary) == fresh(r.run));
  // A -wal file appearing beside a rank file (a writer attached) is part of the key too.
  EXPECT_TRUE(prof::load_summary(r.run, summary_load(), {}).from_cache);
  std::ofstream(r.files[0] + "-wal") << "";  // empty: no frames, the same content
  set_mtime(r.files[0] + "-wal", ::time(nullptr) - 1800, 0);
  EXPECT_TRUE(prof::load_summary(r.run, summary_load(), {}).from_cache);
  std::ofstream(r.files[0] + "-wal") << std::string(100, 'x');  // frames (here: garbage)
  set_mtime(r.files[0] + "-wal", ::time(nullptr) - 1800, 0);
  bool from_cache = true;
  try {
    from_cache = prof::load_summary(r.run, summary_load(), {}).from_cache;
  } catch (const prof::TraceError&) {  // an empty -wal may not open read-only: not from the cache either
    from_cache = false;
  }
  EXPECT_FALSE(from_cache);
}

// The stale-key test: a same-size, same-inode rewrite is seen only through the mtime. Were
// the cache consulted on size alone, the old summary would come back.
TEST(SummaryCache, SameSizeRewriteWithNewMtimeIsNotAnsweredFromCache) {
  CacheRun r;
  const Rendered before = fresh(r.run);
  ASSERT_TRUE(prof::load_summary(r.run, summary_load(), {}).written);
  rewrite_in_place(r.files[3]);
  set_mtime(r.files[3], ::time(nullptr) - 1800, 0);
  const Rendered after = fresh(r.run);
  ASSERT_FALSE(after == before);  // the rewrite shows in the summary
  const auto c = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(render(c.model, c.summary) == after);
  const auto again = prof::load_summary(r.run, summary_load(), {});
  EXPECT_TRUE(again.from_cache);
  EXPECT_TRUE(render(again.model, again.summary) == after);
}

TEST(SummaryCache, CorruptCacheIsIgnoredAndRewritten) {
  CacheRun r;
  const Rendered want = fresh(r.run);
  ASSERT_TRUE(prof::load_summary(r.run, summary_load(), {}).written);
  const std::string good = slurp(r.cache());
  ASSERT_GT(good.size(), 200u);
  std::string flipped = good;
  flipped[good.size() - 100] = static_cast<char>(flipped[good.size() - 100] ^ 0x10);  // in the payload
  const std::array<std::string, 5> bad = {good.substr(0, good.size() / 2), good.substr(0, good.size() - 1), flipped,
                                          std::string("not a cache at all"), std::string()};
  for (size_t k = 0; k < bad.size(); ++k) {
    std::ofstream(r.cache(), std::ios::binary | std::ios::trunc) << bad[k];
    const auto c = prof::load_summary(r.run, summary_load(), {});
    EXPECT_FALSE(c.from_cache) << k;
    EXPECT_TRUE(c.written) << k;
    EXPECT_TRUE(render(c.model, c.summary) == want) << k;
    EXPECT_EQ(slurp(r.cache()), good) << k;
    EXPECT_TRUE(prof::load_summary(r.run, summary_load(), {}).from_cache) << k;
  }
}

TEST(SummaryCache, UnwritableFolderComputesWithoutCache) {
  CacheRun r;
  const Rendered want = fresh(r.run);
  // The cache path taken by a folder: it can be neither read nor replaced.
  fs::create_directory(r.cache());
  auto c = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(c.from_cache);
  EXPECT_FALSE(c.written);
  EXPECT_TRUE(render(c.model, c.summary) == want);
  fs::remove(r.cache());
  // A read-only folder (only meaningful when not root: root writes anyway).
  fs::permissions(r.run + "/trace", fs::perms::owner_read | fs::perms::owner_exec);
  const bool can_write = std::ofstream(r.run + "/trace/probe").good();
  c = prof::load_summary(r.run, summary_load(), {});
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(render(c.model, c.summary) == want);
  if (!can_write) {
    EXPECT_FALSE(c.written);
  }
  fs::permissions(r.run + "/trace", fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(r.run + "/trace"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(SummaryCache, RunStillBeingWrittenIsNotCached) {
  CacheRun r;
  set_mtime(r.files[0], ::time(nullptr), 0);  // just written
  EXPECT_FALSE(prof::load_summary(r.run, summary_load(), {}).written);
  EXPECT_FALSE(fs::exists(r.cache()));
  prof::SummaryCacheOptions co;
  co.racy_window_ns = -3'600'000'000'000;  // anything older than an hour from now counts as settled
  EXPECT_TRUE(prof::load_summary(r.run, summary_load(), {}, co).written);
}

TEST(SummaryCache, SingleFileAndForeignTracesCacheBesideTheFile) {
  CacheRun r;
  const std::string one = r.files[1];
  EXPECT_EQ(prof::summary_cache_path(one), r.run + "/trace/.rank1.sqlite.ulysses-summary-cache");
  ASSERT_TRUE(prof::load_summary(one, summary_load(), {}).written);
  const auto c = prof::load_summary(one, summary_load(), {});
  EXPECT_TRUE(c.from_cache);
  EXPECT_TRUE(render(c.model, c.summary) == fresh(one));
  EXPECT_EQ(prof::summary_cache_path(r.dir.path + "/missing"), "");
  // The cache files are not taken for traces of the folder.
  EXPECT_EQ(prof::trace_input_files(r.run + "/trace"), r.files);
}

#ifdef ULYSSES_TRACE_BIN
namespace {
std::string cli(const std::string& args, int* rc, const std::string& env = "") {
  std::string out;
  FILE* p = popen((env + " " + std::string(ULYSSES_TRACE_BIN) + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = WEXITSTATUS(pclose(p));
  return out;
}
}  // namespace

TEST(SummaryCache, CliOutputIsByteIdenticalAndNoCacheBypassesIt) {
  CacheRun r;
  int rc = -1;
  const std::string json_nc = cli("summary " + r.run + " --json --no-cache", &rc);
  ASSERT_EQ(rc, 0);
  const std::string text_nc = cli("summary " + r.run + " --no-cache", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists(r.cache()));
  cli("summary " + r.run + " --json", &rc);  // writes
  ASSERT_TRUE(fs::exists(r.cache()));
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc), json_nc);
  EXPECT_EQ(cli("summary " + r.run, &rc), text_nc);
  EXPECT_EQ(rc, 0);
  // HTML report: same bytes with and without the cache.
  const std::string h1 = r.dir.path + "/a.html", h2 = r.dir.path + "/b.html";
  cli("report " + r.run + " --html " + h1, &rc);
  ASSERT_EQ(rc, 0);
  cli("report " + r.run + " --html " + h2 + " --no-cache", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(slurp(h1), slurp(h2));

  // Poison: rewrite a rank file in place and give it back its size and exact mtime, so the
  // cache's key still matches (the one change the key cannot see). The cached answer is then
  // the old one, which tells whether the cache was read.
  const auto t = mtime_of(r.files[2]);
  rewrite_in_place(r.files[2]);
  set_mtime(r.files[2], t.tv_sec, t.tv_nsec);
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc), json_nc);  // read from the (stale) cache
  const std::string json_new = cli("summary " + r.run + " --json --no-cache", &rc);
  EXPECT_NE(json_new, json_nc);  // --no-cache did not read it
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc, "ULYSSES_TRACE_NO_CACHE=1"), json_new);  // not read
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc, "ULYSSES_TRACE_NO_CACHE=0"), json_nc);   // "0" keeps it on
  // Nor written.
  fs::remove(r.cache());
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc, "ULYSSES_TRACE_NO_CACHE=1"), json_new);
  EXPECT_EQ(cli("summary " + r.run + " --no-cache", &rc), cli("summary " + r.run, &rc, "ULYSSES_TRACE_NO_CACHE=1"));
  cli("report " + r.run + " --html " + h1 + " --no-cache --force", &rc);  // h1 exists: replaced only with --force
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists(r.cache()));
}
#endif

#ifdef ULYSSES_TRACE_BIN
// `ulysses-trace prepare RUN` (what ulysses-run does when a traced run finishes): the summary
// and the overview are written beside the trace and then answer without reading the ranges;
// a second prepare finds both; a trace modified just now is not cached (exit 1, says why).
TEST(SummaryCache, CliPrepareWritesTheSummaryAndTheOverview) {
  CacheRun r;
  const std::string ov = prof::overview_cache_path(r.run);
  int rc = -1;
  cli("prepare " + r.run, &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_TRUE(fs::exists(r.cache()));
  ASSERT_TRUE(fs::exists(ov));
  // Both hit for the studio's load options and the CLI's.
  prof::LoadOptions studio;
  EXPECT_TRUE(prof::read_overview_cache(prof::probe_overview_cache(r.run, studio), r.run));
  EXPECT_TRUE(prof::read_summary_cache(r.run, studio, {}));
  EXPECT_TRUE(prof::read_summary_cache(r.run, summary_load(), {}));
  EXPECT_EQ(cli("summary " + r.run + " --json", &rc), cli("summary " + r.run + " --json --no-cache", &rc));
  const prof::PreparedCaches again = prof::prepare_trace_caches(r.run);
  EXPECT_FALSE(again.loaded);
  EXPECT_TRUE(again.summary_cached && again.overview_cached);
  // Only the overview missing: the ranges are read again for it, the summary is kept.
  fs::remove(ov);
  const prof::PreparedCaches only_ov = prof::prepare_trace_caches(r.run);
  EXPECT_TRUE(only_ov.loaded);
  EXPECT_TRUE(only_ov.overview_cached);
  EXPECT_GT(only_ov.ranges, 1000);
  EXPECT_TRUE(fs::exists(ov));
  // A rank file modified just now (a run still being written): not cached, exit 1.
  fs::remove(ov);
  fs::remove(r.cache());
  ASSERT_EQ(utimensat(AT_FDCWD, r.files[0].c_str(), nullptr, 0), 0);
  cli("prepare " + r.run, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_FALSE(fs::exists(ov));
  EXPECT_FALSE(fs::exists(r.cache()));
  cli("prepare " + r.dir.path + "/missing", &rc);
  EXPECT_EQ(rc, 2);
}

// A rank file dated in the future (clock skew) is "modified in the last 2 s" forever: prepare
// names the file and its date, not "a read-only folder, or a trace modified in the last 2 s" of
// a writable folder, run after run.
TEST(SummaryCache, CliPrepareNamesARankFileModifiedInTheFuture) {
  CacheRun r;
  set_mtime(r.files[1], 1893456000, 0);  // 2030-01-01
  std::string err;                       // stderr alone (cli() drops it)
  FILE* p = popen((std::string(ULYSSES_TRACE_BIN) + " prepare " + r.run + " 2>&1 >/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) err.append(buf, n);
  const int st = pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << err;
  EXPECT_NE(err.find("rank1.sqlite was modified in the future (2030-01-01 00:00:00 UTC; clock skew?)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("read-only"), std::string::npos) << err;
}
#endif

// Caches written at once by several threads of one process (the studio's loads of one run):
// each writer has its own temp file, so the file left is one writer's whole payload, never a
// mix of two. (With one temp name per process, interleaved writes would be renamed into place.)
TEST(CacheFiles, WritersOfOneProcessAtOnceLeaveOneWholeFile) {
  namespace cio = ulysses::prof::cache_io;
  ut::TempDir tmp;
  const std::string path = tmp.path + "/.ulysses-summary-cache";
  static constexpr char kMagic[8] = {'U', 'L', 'Y', 'T', 'E', 'S', 'T', '1'};
  constexpr int kThreads = 6, kRounds = 40;
  std::vector<std::string> payloads;
  for (int t = 0; t < kThreads; ++t) payloads.push_back(std::string(size_t(200000 + 1000 * t), char('a' + t)));
  std::atomic<int> written{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) written += cio::write_file(path, kMagic, 1, "key", payloads[size_t(t)]);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(written.load(), kThreads * kRounds);
  std::string got;
  ASSERT_TRUE(cio::read_file(path, kMagic, 1, "key", &got));  // checksum and length hold
  EXPECT_NE(std::find(payloads.begin(), payloads.end(), got), payloads.end());
  size_t left = 0;  // no temp file left behind
  for (const auto& e : std::filesystem::directory_iterator(tmp.path))
    left += e.path().filename() != ".ulysses-summary-cache";
  EXPECT_EQ(left, 0u);
}
