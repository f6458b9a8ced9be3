// Limits on what a trace's claims cost its readers: a trace whose strings are 50 MB (a range
// name, a thread name, a host name, NVTX text) loads with every stored string cut to the
// loader's cap (4 KiB + "..."), cut at a UTF-8 boundary, so that nothing downstream (the
// studio's timeline, ulysses-trace summaries) pays for 50 MB per use. Asserts on the work
// left for readers (the stored lengths), not on wall time.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <string>

#include "profiler/test_util.hpp"
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;

namespace {

constexpr size_t kCap = 4096 + 3;  // the loader's cap plus "..."

std::string small_trace(const std::string& dir) {
  const std::string path = dir + "/t.sqlite";
  auto t = prof::Tracer::open(options_for(path, 0, 1));
  Synth s;
  s.ranks = 1;
  for (int step = 0; step < 2; ++step) record_step(t.get(), 0, step, s);
  t->close();
  return path;
}

void exec_sql(const std::string& path, const std::string& sql, const std::string& bind_text = {}) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  if (!bind_text.empty()) sqlite3_bind_text(st, 1, bind_text.data(), static_cast<int>(bind_text.size()), SQLITE_STATIC);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST(TraceLimits, FiftyMegabyteStringsAreCutAtLoad) {
  TempDir tmp;
  const std::string path = small_trace(tmp.path);
  // "x" then 2-byte characters: the 4096-byte cut falls inside a character.
  const std::string huge = "x" + [] {
    std::string s;
    s.reserve(50u << 20);
    while (s.size() < (50u << 20)) s += "\xC3\xA9";  // é
    return s;
  }();
  // the name of the step ranges (the lowest id), and the host name
  exec_sql(path, "UPDATE StringIds SET value = ?1 WHERE id = (SELECT min(id) FROM StringIds)", huge);
  exec_sql(path, "UPDATE ULYSSES_RANKS SET hostname = ?1", huge);
  exec_sql(path, "UPDATE ULYSSES_RANKS SET device = ?1", huge.substr(0, 5000));
  const prof::TraceModel m = prof::load_trace(path);
  ASSERT_FALSE(m.strings.empty());
  size_t longest = 0, cut = 0;
  for (const auto& s : m.strings) {
    longest = std::max(longest, s.size());
    if (s.size() > 4096) {
      ++cut;
      EXPECT_EQ(s.substr(0, 3), "x\xC3\xA9");
      EXPECT_EQ(s.substr(s.size() - 3), "...");
      EXPECT_TRUE(valid_utf8(s)) << "cut inside a character";
    }
  }
  EXPECT_LE(longest, kCap);
  EXPECT_GE(cut, 1u) << "the huge name should be there, cut";
  ASSERT_FALSE(m.ranks.empty());
  EXPECT_LE(m.ranks[0].hostname.size(), kCap);
  EXPECT_LE(m.ranks[0].device.size(), kCap);
  // Every range still points at a (cut) name: nothing was dropped.
  ASSERT_FALSE(m.ranges.empty());
  for (const auto& r : m.ranges) ASSERT_LT(static_cast<size_t>(r.name_id), m.strings.size());
}

TEST(TraceLimits, ShortStringsAreKeptExactly) {
  TempDir tmp;
  const std::string path = small_trace(tmp.path);
  const std::string exact(4096, 'a');
  exec_sql(path, "UPDATE ULYSSES_RANKS SET hostname = ?1", exact);
  const prof::TraceModel m = prof::load_trace(path);
  ASSERT_FALSE(m.ranks.empty());
  EXPECT_EQ(m.ranks[0].hostname, exact);
}

// A fixed 512-byte buffer for the text summary's printf-style lines would cut a trace source
// (or a device name, up to the loader's 4 KiB cap) longer than that, unsaid. A
// 3000-character source must come out whole. (Set on the loaded model: SQLite itself opens
// no path over 512 bytes.)
TEST(TraceLimits, ReportsKeepLongSourcesWhole) {
  TempDir tmp;
  auto m = prof::load_trace(small_trace(tmp.path));
  const auto s = prof::analyze(m);
  m.source = tmp.path + "/" + std::string(3000, 'a') + "/rank0.sqlite";
  const std::string text = prof::summary_to_text(m, s);
  EXPECT_NE(text.find("Trace: " + m.source + "\n"), std::string::npos) << text.substr(0, 200);
}

// Names that are no UTF-8 (a hand-edited StringIds) must not reach the HTML report as raw
// bytes, since the page declares charset=utf-8; they are U+FFFD there, as in the JSON.
TEST(TraceLimits, HtmlReportIsValidUtf8) {
  TempDir tmp;
  const std::string path = small_trace(tmp.path);
  exec_sql(path, "UPDATE StringIds SET value = CAST(?1 || value AS TEXT)", std::string("\xff\xfe\x80\xc3("));
  prof::LoadOptions lo;
  lo.file_caches = false;
  const auto m = prof::load_trace(path, lo);
  const std::string html = prof::summary_to_html(m, prof::analyze(m), "t");
  EXPECT_EQ(html.find('\xff'), std::string::npos);
  EXPECT_EQ(html.find('\xfe'), std::string::npos);
  EXPECT_NE(html.find("\xEF\xBF\xBD"), std::string::npos) << "no name reached the report";
  // Every byte of the page is well-formed UTF-8.
  const auto* p = reinterpret_cast<const unsigned char*>(html.data());
  for (size_t i = 0; i < html.size();) {
    const unsigned c = p[i];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    ASSERT_GT(len, 0u) << "byte " << i;
    ASSERT_LE(i + len, html.size());
    for (size_t k = 1; k < len; ++k) ASSERT_EQ(p[i + k] >> 6, 2u) << "byte " << i + k;
    i += len;
  }
}

#ifdef ULYSSES_TRACE_BIN
// ulysses-trace summary of such a file: exit 0 and an output of normal size.
TEST(TraceLimits, SummaryOfATraceWithHugeNamesStaysSmall) {
  TempDir tmp;
  const std::string path = small_trace(tmp.path);
  exec_sql(path, "UPDATE StringIds SET value = ?1 WHERE id = (SELECT min(id) FROM StringIds)",
           std::string(50u << 20, 'n'));
  const std::string out = tmp.path + "/summary.txt";
  const int st = std::system((std::string(ULYSSES_TRACE_BIN) + " summary " + path + " > " + out + " 2>&1").c_str());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_LT(std::filesystem::file_size(out), 1u << 20);
}
#endif
