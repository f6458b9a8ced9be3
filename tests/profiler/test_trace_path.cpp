// The one classifier of trace paths (profiler/trace_path.hpp): every kind made by hand in a temp
// folder (a run folder of rank files, a folder of exports, an empty folder, a rank file, an
// Nsight export, an SQLite database of neither kind, a PyTorch profiler JSON, a gzip file, a
// text file), a missing path, a dangling link, a FIFO and a file without read permission, a
// link to a rank file; and is_trace_input / is_foreign_trace agreeing with it.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "testdata/nsys_export.hpp"
#include "testdata/rank_files.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/trace_path.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;
using K = prof::TracePathKind;

namespace {

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

K kind_of(const std::string& p) { return prof::classify_trace_path(p).kind; }

}  // namespace

TEST(TracePath, EveryKindIsTakenFromTheContent) {
  ut::TempDir tmp;
  const std::string run = tmp.path + "/run";
  fs::create_directories(run + "/trace");
  for (int r = 0; r < 2; ++r)
    ulysses::testdata::generate_rank(run + "/trace/rank" + std::to_string(r) + ".sqlite", r, 2, 50, 1);
  const prof::TracePath rf = prof::classify_trace_path(run);
  EXPECT_EQ(rf.kind, K::RunFolder);
  ASSERT_EQ(rf.files.size(), 2u);
  EXPECT_EQ(rf.files[1], run + "/trace/rank1.sqlite");
  EXPECT_TRUE(rf.folder());
  EXPECT_FALSE(rf.symlink);
  // A rank file named like an export and an export named like a rank file: by content.
  EXPECT_EQ(kind_of(run + "/trace/rank0.sqlite"), K::RankSqlite);
  const std::string exports = tmp.path + "/exports";
  fs::create_directories(exports);
  ulysses::testdata::write_tiny_nsys(exports + "/node0.sqlite", 42, {{1000, 2000, 0, 7, "sm90_gemm"}});
  EXPECT_EQ(kind_of(exports + "/node0.sqlite"), K::NsysExport);
  ulysses::testdata::write_tiny_nsys(tmp.path + "/renamed.json", 42, {{1000, 2000, 0, 7, "sm90_gemm"}});
  EXPECT_EQ(kind_of(tmp.path + "/renamed.json"), K::NsysExport);
  const prof::TracePath ef = prof::classify_trace_path(exports);
  EXPECT_EQ(ef.kind, K::ExportFolder);
  EXPECT_EQ(ef.files, std::vector<std::string>{exports + "/node0.sqlite"});
  write_text(exports + "/kineto.json", R"({"schemaVersion": 1, "traceEvents": []})");
  EXPECT_EQ(kind_of(exports + "/kineto.json"), K::KinetoJson);
  EXPECT_EQ(prof::classify_trace_path(exports).files.size(), 2u);
  fs::create_directories(tmp.path + "/empty");
  write_text(tmp.path + "/empty/config.json", R"({"profile": {"enabled": false}})");  // a config is no trace
  EXPECT_EQ(kind_of(tmp.path + "/empty"), K::EmptyFolder);
  EXPECT_EQ(kind_of(tmp.path + "/empty/config.json"), K::Other);
  write_text(tmp.path + "/packed.sqlite", std::string("\x1f\x8b\x08\x00junk", 8));
  EXPECT_EQ(kind_of(tmp.path + "/packed.sqlite"), K::Compressed);
  write_text(tmp.path + "/notes.txt", "hello\n");
  EXPECT_EQ(kind_of(tmp.path + "/notes.txt"), K::Other);
  {  // an SQLite database of neither kind: the loader says why
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((tmp.path + "/other.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  const prof::TracePath other = prof::classify_trace_path(tmp.path + "/other.sqlite");
  EXPECT_EQ(other.kind, K::SqliteOther);
  EXPECT_NE(other.why.find("not a Ulysses trace or an Nsight Systems export"), std::string::npos) << other.why;
  // What the studio and the CLI take as a trace follows the kind.
  for (const std::string& p : {run, exports, run + "/trace/rank0.sqlite", exports + "/node0.sqlite",
                               exports + "/kineto.json", tmp.path + "/packed.sqlite", tmp.path + "/other.sqlite"})
    EXPECT_TRUE(prof::is_trace_input(p)) << p;
  for (const std::string& p : {tmp.path + "/empty", tmp.path + "/notes.txt", tmp.path + "/empty/config.json"})
    EXPECT_FALSE(prof::is_trace_input(p)) << p;
  EXPECT_TRUE(prof::is_foreign_trace(exports));
  EXPECT_TRUE(prof::is_foreign_trace(exports + "/kineto.json"));
  EXPECT_FALSE(prof::is_foreign_trace(run));
  EXPECT_FALSE(prof::is_foreign_trace(exports + "/node0.sqlite"));
}

TEST(TracePath, MissingUnreadableAndLinkedPaths) {
  ut::TempDir tmp;
  EXPECT_EQ(kind_of(""), K::Missing);
  EXPECT_EQ(kind_of(tmp.path + "/none"), K::Missing);
  EXPECT_FALSE(prof::is_trace_input(tmp.path + "/none"));
  // A link to a rank file is the rank file; a dangling link is missing.
  const std::string rank = tmp.path + "/rank0.sqlite";
  ulysses::testdata::generate_rank(rank, 0, 1, 20, 1);
  fs::create_symlink(rank, tmp.path + "/link.sqlite");
  const prof::TracePath l = prof::classify_trace_path(tmp.path + "/link.sqlite");
  EXPECT_EQ(l.kind, K::RankSqlite);
  EXPECT_TRUE(l.symlink);
  fs::create_symlink(tmp.path + "/gone.sqlite", tmp.path + "/dangling.sqlite");
  const prof::TracePath d = prof::classify_trace_path(tmp.path + "/dangling.sqlite");
  EXPECT_EQ(d.kind, K::Missing);
  EXPECT_TRUE(d.symlink);
  // A FIFO named like a trace: unreadable (an open would block until a writer came).
  ASSERT_EQ(::mkfifo((tmp.path + "/fifo.sqlite").c_str(), 0600), 0);
  const prof::TracePath f = prof::classify_trace_path(tmp.path + "/fifo.sqlite");
  EXPECT_EQ(f.kind, K::Unreadable);
  EXPECT_NE(f.why.find("not a regular file"), std::string::npos) << f.why;
  EXPECT_FALSE(prof::is_trace_input(tmp.path + "/fifo.sqlite"));
}

// A file without read permission (root reads it anyway: checked only where the open fails).
TEST(TracePath, AFileWithoutReadPermissionIsUnreadable) {
  ut::TempDir tmp;
  const std::string locked = tmp.path + "/locked.sqlite";
  ulysses::testdata::generate_rank(locked, 0, 1, 20, 1);
  ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  if (std::ifstream(locked).good()) GTEST_SKIP() << "running as root: a file without permission is still readable";
  EXPECT_EQ(kind_of(locked), K::Unreadable);
  EXPECT_FALSE(prof::is_trace_input(locked));
}
