// Foreign traces read as precisely as our own (docs/TRACES.md): hostile hand-made files
// (small Nsight exports written with SQLite, PyTorch profiler JSON written as text, in a temp
// folder) and the exact notes and exit codes they get: rows left out or clamped counted per
// table and reason, text where a number belongs refused per row, the file kind taken from the
// content (JSON, SQLite, gzip, empty, garbage), copies and mixed tools in a folder named, and
// one test of what is a trace for the studio and the CLI alike.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/trace_test_files.hpp"
#include "profiler/test_util.hpp"
#include "testdata/nsys_export.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;
using ulysses::test::load_error;
using ulysses::test::trace_cli;
using ulysses::test::write_file;
using ulysses::testdata::TinyKernel;
using ulysses::testdata::write_tiny_nsys;

namespace {

std::string notes_of(const prof::TraceModel& m) {
  std::string s;
  for (const auto& n : m.notes) s += n + "\n";
  return s;
}

bool has_line(const prof::TraceModel& m, const std::string& line) {
  for (const auto& n : m.notes)
    if (n == line) return true;
  return false;
}

const std::vector<TinyKernel> kThree = {{1000, 2000, 0, 7, "sm90_gemm"},
                                        {2500, 3000, 0, 7, "flash_fwd_kernel"},
                                        {1500, 2600, 0, 13, "ncclDevKernel_SendRecv"}};

int kernels_of(const prof::TraceModel& m) {
  int n = 0;
  for (const auto& r : m.ranges) n += r.is_kernel;
  return n;
}

}  // namespace

// Each hostile row is refused with its table and reason, counted, and the first one quoted; the
// good rows are read as written (a start 'abc' is no kernel at 0 ns).
TEST(ForeignImport, NsysRowsLeftOutAreCountedPerTableAndReason) {
  TempDir tmp;
  const std::string f = tmp.path + "/x.sqlite";
  // gpid of pid 42: 42 << 24 = 704643072.
  write_tiny_nsys(f, 42, kThree,
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (500, 400, 0, 1, 7, 90, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('12abc', 900, 0, 1, 7, 91, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('abc', 900, 0, 1, 7, 96, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 'x9', 0, 1, 7, 92, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1.5, 900, 0, 1, 7, 93, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 900, 'gpu0', 1, 7, 94, 704643072, 2, 2);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (NULL, 900, 0, 1, 7, 95, 704643072, 2, 2);"
                  "INSERT INTO NVTX_EVENTS VALUES (1000, NULL, 59, 'open', 704643114, NULL);"
                  "INSERT INTO NVTX_EVENTS VALUES (3000, 1000, 59, 'back', 704643114, NULL);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (900, 800, 0, 704643114, 77, 1, 0);"
                  "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ('later', 800, 0, 704643114, 78, 1, 0);");
  const auto m = prof::load_trace(f);
  SCOPED_TRACE(notes_of(m));
  EXPECT_EQ(kernels_of(m), 3);
  for (const auto& r : m.ranges) EXPECT_GE(r.start_ns, 900) << "a refused row was read";
  const std::string k = "x.sqlite: CUPTI_ACTIVITY_KIND_KERNEL: ";
  EXPECT_TRUE(has_line(m, k + "1 rows dropped: end before start (first: start 500, end 400)"));
  EXPECT_TRUE(has_line(m, k + "2 rows dropped: start is text (first: start '12abc')"));
  EXPECT_TRUE(has_line(m, k + "1 rows dropped: end is text (first: end 'x9')"));
  EXPECT_TRUE(has_line(m, k + "1 rows dropped: deviceId is text (first: deviceId 'gpu0')"));
  EXPECT_TRUE(has_line(m, k + "1 rows dropped: start is a fraction (first: start 1.5)"));
  EXPECT_TRUE(has_line(m, k + "1 rows dropped: start or end is NULL"));
  EXPECT_TRUE(has_line(m,
                       "x.sqlite: NVTX_EVENTS: 1 rows dropped: end is NULL (range still open when the capture "
                       "stopped)"));
  EXPECT_TRUE(has_line(m, "x.sqlite: NVTX_EVENTS: 1 rows dropped: end before start (first: start 3000, end 1000)"));
  EXPECT_TRUE(has_line(m,
                       "x.sqlite: CUPTI_ACTIVITY_KIND_RUNTIME: 1 rows dropped: end before start (first: start "
                       "900, end 800)"));
  EXPECT_TRUE(has_line(m,
                       "x.sqlite: CUPTI_ACTIVITY_KIND_RUNTIME: 1 rows dropped: start is text (first: start "
                       "'later')"));
  EXPECT_EQ(m.runtime.size(), 3u);
  // The CLI reads the same and says the same (exit 0: the file is readable, rows are noted).
  std::string out;
  ASSERT_EQ(trace_cli("summary --json --no-cache '" + f + "'", &out), 0) << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  bool said = false;
  for (const auto& n : j["notes"])
    said |= n.get<std::string>().find("CUPTI_ACTIVITY_KIND_KERNEL: 2 rows dropped: start is text") != std::string::npos;
  EXPECT_TRUE(said) << out;
}

// A trace whose every kernel is refused is empty, and says what the importer left out instead
// of asking about our own profile.* settings.
TEST(ForeignImport, AnExportWithOnlyRefusedRowsSaysWhatWasLeftOutExit2) {
  TempDir tmp;
  const std::string f = tmp.path + "/inverted.sqlite";
  write_tiny_nsys(f, 42, {}, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (500, 400, 0, 1, 7, 1, 704643072, 1, 1);");
  std::string out;
  EXPECT_EQ(trace_cli("summary --no-cache '" + f + "'", &out), 2) << out;
  EXPECT_NE(out.find("has nothing to show: no kernel, range or memory sample was read from it. The importer's notes:"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("CUPTI_ACTIVITY_KIND_KERNEL: 1 rows dropped: end before start"), std::string::npos) << out;
  EXPECT_EQ(out.find("profile.step_begin"), std::string::npos) << out;
}

// PyTorch profiler JSON: text in ts or dur is no time ("12" included), other values no number,
// out-of-range and negative times: each event left out, counted by reason with the first one.
TEST(ForeignImport, KinetoTimesThatAreNoNumbersAreRefusedPerEventWithANote) {
  TempDir tmp;
  const std::string f = tmp.path + "/rank0.json";
  write_file(
      f,
      R"({"traceEvents": [)"
      R"({"ph": "X", "cat": "kernel", "name": "gemm", "ts": "abc", "dur": 5, "pid": 0, "tid": 7},)"
      R"({"ph": "X", "cat": "kernel", "name": "gemm", "ts": "12", "dur": 5, "pid": 0, "tid": 7},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": true, "dur": 5, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 1e300, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 18446744073709551615, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": "7", "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 10, "dur": -5, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "no_ts", "dur": 5, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "outer", "ts": 100, "dur": 10, "pid": 1, "tid": 1},)"
      R"({"ph": "X", "cat": "cpu_op", "name": "inner", "ts": 105, "dur": 5.5, "pid": 1, "tid": 1}]})");
  const auto m = prof::load_trace(f);
  SCOPED_TRACE(notes_of(m));
  EXPECT_EQ(m.ranges.size(), 2u);
  // One note per reason, counted, not one per event.
  const std::string t = "rank0.json: traceEvents: ";
  EXPECT_TRUE(has_line(m, t + "2 rows dropped: ts is text (first: \"kernel\" 'gemm' ts \"abc\")"));
  EXPECT_TRUE(has_line(m, t + "1 rows dropped: dur is text (first: \"cpu_op\" 'aten::mm' dur \"7\")"));
  EXPECT_TRUE(has_line(m, t + "1 rows dropped: ts is no number (true, null, an object) (first: \"cpu_op\" "
                              "'aten::mm' ts true)"));
  EXPECT_TRUE(has_line(m, t + "2 rows dropped: dur is beyond +-2^62 ns (146 years) (first: \"cpu_op\" 'aten::mm' "
                              "dur 1e+300)"));
  EXPECT_TRUE(has_line(m, t + "1 rows dropped: dur is negative (an end before its start) (first: \"cpu_op\" "
                              "'aten::add' dur -5)"));
  EXPECT_TRUE(has_line(m, t + "1 rows dropped: ts is missing (complete \"ph\": \"X\" events)"));
  EXPECT_TRUE(has_line(m, t + "1 rows clamped: end up to 1 us after the event that holds them, set to that event's "
                              "end (the profiler rounds times to whole us)"));
  size_t event_notes = 0;
  for (const auto& n : m.notes) event_notes += n.find("traceEvents: ") != std::string::npos;
  EXPECT_EQ(event_notes, 7u) << "one note per reason, not one per event";
  // The clamped one ends with its parent.
  for (const auto& r : m.ranges)
    if (m.strings[static_cast<size_t>(r.name_id)] == "inner") {
      EXPECT_EQ(r.end_ns, 110000);
    }
}

// The kind is the content's, whatever the name: a .json that is an export opens, a .sqlite that
// is JSON opens, and what is neither is said for what it is (exit 2), before any other message.
TEST(ForeignImport, TheFileKindIsTakenFromTheContentNotTheName) {
  TempDir tmp;
  std::string out;
  const std::string as_json = tmp.path + "/export.json";
  write_tiny_nsys(as_json, 42, kThree);
  const auto a = prof::load_trace(as_json);
  EXPECT_EQ(a.format, "nsys");
  EXPECT_EQ(kernels_of(a), 3);
  EXPECT_TRUE(has_line(a, "export.json: is an SQLite database, not JSON: read as an Nsight Systems export"))
      << notes_of(a);
  EXPECT_TRUE(prof::is_trace_input(as_json));
  EXPECT_EQ(trace_cli("summary --no-cache '" + as_json + "'", &out), 0) << out;

  const std::string as_sqlite = tmp.path + "/trace.sqlite";
  write_file(as_sqlite, R"({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]})");
  const auto b = prof::load_trace(as_sqlite);
  EXPECT_EQ(b.format, "kineto");
  EXPECT_TRUE(has_line(b, "trace.sqlite: holds JSON, not SQLite: read as a PyTorch profiler trace")) << notes_of(b);
  EXPECT_EQ(trace_cli("summary --no-cache '" + as_sqlite + "'", &out), 0) << out;

  struct Bad {
    std::string name, bytes, said;
  };
  const std::vector<Bad> bad = {
      {"empty.json", "", "is empty"},
      {"empty.sqlite", "", "is empty"},
      {"notes.json", "hello, this is text\n",
       "is neither JSON nor an SQLite database (a text file starting "
       "\"hello, this is text \")"},
      {"noise.sqlite", std::string("\x00\x01\x02\x03garbage", 11),
       "is neither JSON nor an SQLite database (binary "
       "data starting 00 01 02 03)"},
      {"packed.json", std::string("\x1f\x8b\x08\x00junk", 8), "is gzip-compressed: unpack it first (gzip -dc"},
      {"broken.json", "{\"traceEvents\": [1, 2", "is not valid JSON: it stops being JSON at byte 21 of 21"},
      {"config.sqlite", "{\"model\": {}}", "is JSON but not a PyTorch profiler trace (no traceEvents)"},
  };
  for (const auto& c : bad) {
    const std::string p = tmp.path + "/" + c.name;
    write_file(p, c.bytes);
    EXPECT_NE(load_error(p).find(c.said), std::string::npos) << c.name << ": " << load_error(p);
    EXPECT_EQ(trace_cli("summary --no-cache '" + p + "'", &out), 2) << c.name << ": " << out;
    EXPECT_NE(out.find(c.said), std::string::npos) << c.name << ": " << out;
  }
  EXPECT_FALSE(prof::is_trace_input(tmp.path + "/notes.json"));
  EXPECT_TRUE(prof::is_trace_input(tmp.path + "/packed.json"));  // the loader says to unpack it
}

// One export copied twice would count its ranks twice (4 of 2); a PyTorch JSON beside an export
// would be passed over unsaid. Both are refused naming the files (exit 2); trace files beside rank<N>.sqlite
// files are named in a note.
TEST(ForeignImport, CopiesAndMixedToolsInAFolderAreNamed) {
  TempDir tmp;
  std::string out;
  const std::string dup = tmp.path + "/dup";
  fs::create_directories(dup);
  write_tiny_nsys(dup + "/report.sqlite", 42, kThree);
  fs::copy_file(dup + "/report.sqlite", dup + "/report (copy).sqlite");
  const std::string said_dup =
      "holds the same trace twice: report (copy).sqlite and report.sqlite have the same content";
  EXPECT_NE(load_error(dup).find(said_dup), std::string::npos) << load_error(dup);
  EXPECT_EQ(trace_cli("summary --no-cache '" + dup + "'", &out), 2) << out;
  EXPECT_NE(out.find(said_dup), std::string::npos) << out;
  // Not a copy: another process's export of the same shape reads as 2 ranks.
  fs::remove(dup + "/report (copy).sqlite");
  write_tiny_nsys(dup + "/other.sqlite", 43, kThree);
  EXPECT_EQ(prof::load_trace(dup).ranks.size(), 2u);

  // One export copied as rank0.sqlite and rank1.sqlite (issue 54: read as two ranks): the copy
  // is left out with a note, the export reads as the one process it holds.
  const std::string copied = tmp.path + "/copied";
  fs::create_directories(copied);
  write_tiny_nsys(copied + "/rank0.sqlite", 42, kThree);
  fs::copy_file(copied + "/rank0.sqlite", copied + "/rank1.sqlite");
  const auto one = prof::load_trace(copied);
  EXPECT_EQ(one.ranks.size(), 1u);
  EXPECT_TRUE(has_line(one,
                       "rank1.sqlite is a byte-for-byte copy of rank0.sqlite (one Nsight Systems export under two "
                       "names): left out, its processes would count as another rank's"))
      << notes_of(one);

  const std::string mixed = tmp.path + "/mixed";
  fs::create_directories(mixed);
  write_tiny_nsys(mixed + "/a.sqlite", 42, kThree);
  write_file(mixed + "/b.json", R"({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]})");
  const std::string said_mixed = "mixes a PyTorch profiler trace (b.json) and an SQLite trace (a.sqlite)";
  EXPECT_NE(load_error(mixed).find(said_mixed), std::string::npos) << load_error(mixed);
  EXPECT_EQ(trace_cli("summary --no-cache '" + mixed + "'", &out), 2) << out;
  EXPECT_NE(out.find(said_mixed), std::string::npos) << out;

  const std::string ranks = tmp.path + "/ranks";
  fs::create_directories(ranks);
  write_tiny_nsys(ranks + "/rank0.sqlite", 42, kThree);
  write_tiny_nsys(ranks + "/rank1.sqlite", 43, kThree);
  write_file(ranks + "/extra.json", R"({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]})");
  const auto m = prof::load_trace(ranks);
  EXPECT_EQ(m.ranks.size(), 2u);
  EXPECT_TRUE(has_line(m,
                       "extra.json is in the folder but not read: its trace is its rank<N>.sqlite files (open the "
                       "other file on its own)"))
      << notes_of(m);
}

// What the studio opens as a trace (prof::is_trace_input) is what ulysses-trace reads: a folder
// of Nsight exports named rank0.sqlite, rank1.sqlite is read by both, not by the CLI alone.
TEST(ForeignImport, StudioAndCliTakeTheSameInputs) {
  TempDir tmp;
  const std::string dir = tmp.path + "/exports";
  fs::create_directories(dir);
  write_tiny_nsys(dir + "/rank0.sqlite", 42, kThree);
  write_tiny_nsys(dir + "/rank1.sqlite", 43, kThree);
  EXPECT_TRUE(prof::is_trace_input(dir));
  std::string out;
  EXPECT_EQ(trace_cli("summary --no-cache '" + dir + "'", &out), 0) << out;
  EXPECT_EQ(prof::load_trace(dir).ranks.size(), 2u);
  // A run's config .json and an empty folder are no trace for either.
  write_file(tmp.path + "/config.json", R"({"model": {"hidden_size": 64}})");
  EXPECT_FALSE(prof::is_trace_input(tmp.path + "/config.json"));
  fs::create_directories(tmp.path + "/none");
  EXPECT_FALSE(prof::is_trace_input(tmp.path + "/none"));
  EXPECT_EQ(trace_cli("summary --no-cache '" + tmp.path + "/none'", &out), 2) << out;
}

// Hostile files never crash either tool: each is refused with exit 2 naming the file and what
// it holds (10 MB of '[' nests 10 million deep, refused at depth 64; traceEvents an object; an export cut in half).
TEST(ForeignImport, HostileFilesAreRefusedNamingTheFile) {
  TempDir tmp;
  std::string out;
  const std::string deep = tmp.path + "/deep.json";
  write_file(deep, std::string(10 << 20, '['));
  const std::string object = tmp.path + "/object.json";
  write_file(object, R"({"traceEvents": {"ph": "X", "name": "op", "ts": 1, "dur": 2}})");
  const std::string whole = tmp.path + "/whole.sqlite", cut = tmp.path + "/cut.sqlite";
  write_tiny_nsys(whole, 42, kThree);
  {
    std::ifstream f(whole, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    write_file(cut, bytes.substr(0, bytes.size() / 2));
  }
  for (const std::string& p : {deep, object, cut}) {
    const std::string why = load_error(p);
    EXPECT_NE(why.find(p), std::string::npos) << why;
    EXPECT_EQ(trace_cli("summary --no-cache '" + p + "'", &out), 2) << out;
    EXPECT_NE(out.find(p), std::string::npos) << out;
  }
  EXPECT_NE(load_error(object).find("traceEvents is object, not a list of events"), std::string::npos)
      << load_error(object);
  EXPECT_NE(load_error(cut).find("truncated"), std::string::npos) << load_error(cut);
  // Refused at depth 64, not after reading the 10 MB (which took minutes under ASan).
  EXPECT_NE(load_error(deep).find("nests deeper than 64 levels: not a PyTorch profiler trace"), std::string::npos)
      << load_error(deep);
}
