// Foreign traces: Nsight Systems exports as real ones are shaped (several schema variants,
// several processes per file or one file per rank) and PyTorch profiler JSON (a real 2-rank
// Gloo trace made with Debian's torch in tests/data/foreign, plus a hand-written Kineto GPU
// trace). Every figure is checked against a hand computation or a naive recomputation from
// the file itself (no loader code), exact to the nanosecond.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiler/test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/chrome_export.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;
using prof::Phase;

namespace {

// ---- synthetic nsys exports -------------------------------------------------------------
// Column lists follow the documented `nsys export --type sqlite` schema; the variants are the
// differences met in real files: Modern (globalPid on GPU tables, NVTX textId + jsonText with
// NCCL's ncclCommInitRank payload, TARGET_INFO_GPU, many non-GPU processes), Older (GPU
// tables without globalPid: processes only through the runtime calls' correlationId, which
// both processes number from 1, so ids collide and launch times decide; NVTX
// with inline text only; no TARGET_INFO_GPU), Minimal (the older kernel table alone: no
// globalPid and no runtime calls to recover processes, no NVTX, ThreadNames or PROCESSES).
enum class Schema { Modern, Older, Minimal };

const char* kKernelModern =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid "
    "INTEGER, "
    "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig "
    "INTEGER, "
    "registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, "
    "blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
    "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, "
    "gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);";
const char* kKernelOlder =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, demangledName INTEGER NOT NULL, "
    "shortName INTEGER NOT NULL, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
    "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
    "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
    "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL);";
const char* kRuntime =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT "
    "NULL, "
    "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId "
    "INTEGER);";
const char* kNvtxModern =
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId "
    "INTEGER, "
    "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue "
    "REAL, "
    "jsonTextId INTEGER, jsonText TEXT, binaryData BLOB);";
const char* kNvtxOlder =
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER);";

int64_t gpid(int64_t pid) { return pid * 16777216LL; }
int64_t gtid(int64_t pid, int64_t tid) { return pid * 16777216LL + tid; }

struct Kernel {
  int64_t start, end;
  int dev, stream;
  const char* name;
};

// The hand-checked scenario: process 1001 drives device 0, process 1002 device 1.
//   device 0: compute flash_fwd_kernel [0,1000), sm90_gemm [2000,3000)
//             NCCL [900,1400) (100 overlapped), [1500,1800) (0), [2500,2700) (200)
//   device 1: compute flash_fwd_kernel [0,1200), sm90_gemm [2000,2400)
//             NCCL [1000,1500) (200 overlapped), [2300,2600) (100)
// 5 NCCL kernels, 1800 ns of communication, 600 ns of it overlapped (1/3).
const std::vector<Kernel> kKernels = {{0, 1000, 0, 7, "flash_fwd_kernel"},
                                      {2000, 3000, 0, 7, "sm90_xmma_gemm_bf16"},
                                      {900, 1400, 0, 13, "ncclDevKernel_SendRecv"},
                                      {1500, 1800, 0, 13, "ncclDevKernel_SendRecv"},
                                      {2500, 2700, 0, 13, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"},
                                      {0, 1200, 1, 7, "flash_fwd_kernel"},
                                      {2000, 2400, 1, 7, "sm90_xmma_gemm_bf16"},
                                      {1000, 1500, 1, 13, "ncclKernel_SendRecv"},
                                      {2300, 2600, 1, 13, "ncclDevKernel_SendRecv"}};

int64_t pid_of_dev(int dev) { return dev == 0 ? 1001 : 1002; }

void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << "\n" << sql;
}

// Writes an export holding the devices in `devs` (their processes), in the given schema.
// nccl_rank_of_dev: the rank each process's ncclCommInitRank payload states (Modern only).
void write_nsys(const std::string& path, Schema schema, const std::vector<int>& devs,
                const std::map<int, int>& nccl_rank_of_dev = {}) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  exec(db, "PRAGMA synchronous = OFF; BEGIN;");
  exec(db, "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);");
  exec(db,
       "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);"
       "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '" +
           std::string(schema == Schema::Modern  ? "3.25"
                       : schema == Schema::Older ? "2.4"
                                                 : "3.0") +
           "');");
  std::map<std::string, int> sid;
  auto id = [&](const std::string& s) {
    auto it = sid.find(s);
    if (it != sid.end()) return it->second;
    int v = static_cast<int>(sid.size()) + 1;
    sid[s] = v;
    return v;
  };
  exec(db, schema == Schema::Modern ? kKernelModern : kKernelOlder);
  if (schema != Schema::Minimal) {
    exec(db, kRuntime);
    exec(db, schema == Schema::Modern ? kNvtxModern : kNvtxOlder);
    exec(db, "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);");
    exec(db, "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);");
  }
  if (schema == Schema::Modern) {
    exec(db,
         "CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
         "isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, "
         "smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER);");
    for (int d : devs)
      exec(db, "INSERT INTO TARGET_INFO_GPU(vmId, id, name, cuDevice) VALUES (0, " + std::to_string(d) +
                   ", 'NVIDIA H100 80GB HBM3', " + std::to_string(d) + ");");
    // The launcher, nsys' own helpers, compile workers: processes without GPU work.
    for (int p = 2000; p < 2157; ++p)
      exec(db, "INSERT INTO PROCESSES VALUES (" + std::to_string(gpid(p)) + ", " + std::to_string(p) + ", 'python3');");
    // One of them has NVTX ranges (a data loader worker): it must not become a rank.
    exec(db, "INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid) VALUES (0, 50, 59, " +
                 std::to_string(id("dataloader")) + ", " + std::to_string(gtid(2001, 2001)) + ");");
  }
  std::map<int64_t, int> corr_of_pid;  // CUPTI counts correlation ids per process: they collide
  for (const auto& k : kKernels) {
    if (std::find(devs.begin(), devs.end(), k.dev) == devs.end()) continue;
    const int64_t pid = pid_of_dev(k.dev);
    const int corr = ++corr_of_pid[pid];
    const std::string name = std::to_string(id(k.name));
    if (schema != Schema::Modern) {
      exec(db, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(k.start) + ", " +
                   std::to_string(k.end) + ", " + std::to_string(k.dev) + ", 1, " + std::to_string(k.stream) + ", " +
                   std::to_string(corr) + ", " + name + ", " + name + ", 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, " +
                   std::to_string(corr) + ");");
    } else {
      exec(
          db,
          "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, globalPid, "
          "demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
          "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) VALUES (" +
              std::to_string(k.start) + ", " + std::to_string(k.end) + ", " + std::to_string(k.dev) + ", 1, " +
              std::to_string(k.stream) + ", " + std::to_string(corr) + ", " + std::to_string(gpid(pid)) + ", " + name +
              ", " + name + ", 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, " + std::to_string(corr) + ");");
    }
    if (schema != Schema::Minimal)
      exec(db, "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (" + std::to_string(k.start - 20 - 5 * k.dev) + ", " +
                   std::to_string(k.start - 10) + ", 0, " + std::to_string(gtid(pid, pid)) + ", " +
                   std::to_string(corr) + ", " + std::to_string(id("cudaLaunchKernel")) + ", 0, NULL);");
  }
  if (schema != Schema::Minimal) {
    for (int d : devs) {
      const int64_t pid = pid_of_dev(d);
      exec(db,
           "INSERT INTO PROCESSES VALUES (" + std::to_string(gpid(pid)) + ", " + std::to_string(pid) + ", 'python3');");
      exec(db, "INSERT INTO ThreadNames VALUES (" + std::to_string(id("python3")) + ", 0, " +
                   std::to_string(gtid(pid, pid)) + ");");
      // PyTorch emit_nvtx ranges: every call named differently, one operator.
      for (int i = 0; i < 3; ++i) {
        const std::string text = "aten::mm, seq = " + std::to_string(10 + i) + ", op_id = " + std::to_string(20 + i) +
                                 ", sizes = [[8, 16], [16, 4]]";
        const std::string t0 = std::to_string(100 * i), t1 = std::to_string(100 * i + 40);
        if (schema == Schema::Modern)
          exec(db, "INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid) VALUES (" + t0 + ", " + t1 +
                       ", 59, " + std::to_string(id(text)) + ", " + std::to_string(gtid(pid, pid)) + ");");
        else
          exec(db, "INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (" + t0 + ", " + t1 +
                       ", 59, '" + text + "', " + std::to_string(gtid(pid, pid)) + ");");
      }
      auto nr = nccl_rank_of_dev.find(d);
      if (schema == Schema::Modern && nr != nccl_rank_of_dev.end())
        exec(db, "INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid, jsonText) VALUES (0, 5, 59, " +
                     std::to_string(id("ncclCommInitRank")) + ", " + std::to_string(gtid(pid, pid)) +
                     ", '{\"NCCL communicator ID\": 12345, \"Rank\": " + std::to_string(nr->second) +
                     ", \"No. of ranks\": 2, \"CUDA device\": " + std::to_string(d) + "}');");
    }
  }
  for (const auto& [s, v] : sid) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "INSERT INTO StringIds VALUES (?, ?)", -1, &st, nullptr);
    sqlite3_bind_int(st, 1, v);
    sqlite3_bind_text(st, 2, s.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_step(st);
    sqlite3_finalize(st);
  }
  exec(db, "COMMIT;");
  sqlite3_close(db);
}

// The hand-checked figures of kKernels for one rank (device) of a loaded export.
void expect_hand_checked(const prof::TraceModel& m, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(m.ranks.size(), 2u);
  auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 2u);
  std::map<int64_t, const prof::StepBreakdown*> by_pid;
  for (const auto& b : s.steps) {
    EXPECT_TRUE(b.gpu);
    for (const auto& r : m.ranks)
      if (r.rank == b.rank) by_pid[r.pid] = &b;
  }
  ASSERT_EQ(by_pid.count(1001), 1u);
  ASSERT_EQ(by_pid.count(1002), 1u);
  EXPECT_EQ(by_pid[1001]->comm_ns, 1000);  // 500 + 300 + 200
  EXPECT_EQ(by_pid[1001]->overlap_ns, 300);
  EXPECT_EQ(by_pid[1001]->compute_ns, 2000);
  EXPECT_EQ(by_pid[1002]->comm_ns, 800);  // 500 + 300
  EXPECT_EQ(by_pid[1002]->overlap_ns, 300);
  EXPECT_EQ(by_pid[1002]->compute_ns, 1600);
  EXPECT_EQ(s.overall.comm_ns, 1800);
  EXPECT_EQ(s.overall.overlap_ns, 600);
  EXPECT_NEAR(s.overall.ratio, 1.0 / 3.0, 1e-12);
  int nccl = 0;
  for (const auto& r : m.ranges) nccl += r.is_kernel && prof::is_comm_range(m, r);
  EXPECT_EQ(nccl, 5);
  EXPECT_EQ(s.num_kernels, 9);
}

std::string data_dir() { return ULYSSES_TEST_DATA_DIR "/foreign"; }

}  // namespace

TEST(ForeignNsys, TwoProcessesTwoDevicesInOneFileAreTwoRanksWithHandCheckedOverlap) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  // NCCL says process 1002 (device 1) is rank 0: the trace's own rank wins over pid order.
  write_nsys(path, Schema::Modern, {0, 1}, {{0, 1}, {1, 0}});
  auto m = prof::load_trace(path);
  EXPECT_EQ(m.format, "nsys");
  expect_hand_checked(m, "modern schema, one file");
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].pid, 1002);
  EXPECT_EQ(m.ranks[1].pid, 1001);
  EXPECT_EQ(m.ranks[0].device, "cuda:1 NVIDIA H100 80GB HBM3 (python3)");
  EXPECT_EQ(m.sp_size, 2);
  // The data loader's NVTX range is left out, with a note; emit_nvtx names grouped.
  bool loader_note = false;
  for (const auto& n : m.notes)
    loader_note |= n.find("1 NVTX ranges of 1 process(es) without GPU work") != std::string::npos;
  EXPECT_TRUE(loader_note);
  std::map<std::string, int> names;
  for (const auto& r : m.ranges)
    if (!r.is_kernel) names[m.strings[static_cast<size_t>(r.name_id)]]++;
  EXPECT_EQ(names["aten::mm"], 6);  // 3 calls x 2 processes, one name
  EXPECT_EQ(names.count("dataloader"), 0u);
  auto top = prof::name_totals(m, 50);
  int mm_rows = 0;
  for (const auto& row : top) mm_rows += row.name.rfind("aten::mm", 0) == 0;
  EXPECT_EQ(mm_rows, 1);
}

TEST(ForeignNsys, OlderSchemaWithoutGlobalPidOpensWithANote) {
  TempDir tmp;
  const std::string path = tmp.path + "/old.sqlite";
  write_nsys(path, Schema::Older, {0, 1});
  prof::TraceModel m;
  ASSERT_NO_THROW(m = prof::load_trace(path));
  expect_hand_checked(m, "older schema");
  EXPECT_EQ(m.ranks[0].pid, 1001);  // no rank hints: device order
  bool note = false;
  for (const auto& n : m.notes) note |= n.find("no globalPid column") != std::string::npos;
  EXPECT_TRUE(note);
  EXPECT_EQ(m.runtime.size(), 9u);
}

TEST(ForeignNsys, MinimalExportWithOnlyKernelsGivesOneRankPerDevice) {
  TempDir tmp;
  const std::string path = tmp.path + "/min.sqlite";
  write_nsys(path, Schema::Minimal, {0, 1});
  prof::TraceModel m;
  ASSERT_NO_THROW(m = prof::load_trace(path));
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].device, "cuda:0");
  EXPECT_EQ(m.ranks[1].device, "cuda:1");
  auto s = prof::analyze(m);
  EXPECT_EQ(s.overall.comm_ns, 1800);
  EXPECT_EQ(s.overall.overlap_ns, 600);
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[0].comm_ns, 1000);
  EXPECT_EQ(s.steps[1].overlap_ns, 300);
  bool note = false;
  for (const auto& n : m.notes) note |= n.find("one rank per device") != std::string::npos;
  EXPECT_TRUE(note);
}

TEST(ForeignNsys, FolderWithOneExportPerRankUnderAnyName) {
  TempDir tmp;
  // Natural order would put device 1's file first; NCCL ranks say otherwise.
  write_nsys(tmp.path + "/node-a_2.sqlite", Schema::Modern, {1}, {{1, 1}});
  write_nsys(tmp.path + "/node-a_10.sqlite", Schema::Modern, {0}, {{0, 0}});
  auto m = prof::load_trace(tmp.path);
  expect_hand_checked(m, "folder");
  EXPECT_EQ(m.ranks[0].pid, 1001);
  EXPECT_EQ(m.ranks[1].pid, 1002);
  // Without hints: natural file-name order (2 before 10).
  TempDir t2;
  write_nsys(t2.path + "/x_2.sqlite", Schema::Older, {1});
  write_nsys(t2.path + "/x_10.sqlite", Schema::Older, {0});
  auto m2 = prof::load_trace(t2.path);
  ASSERT_EQ(m2.ranks.size(), 2u);
  EXPECT_EQ(m2.ranks[0].pid, 1002);
  EXPECT_EQ(m2.ranks[1].pid, 1001);
}

TEST(ForeignNsys, GzippedExportIsRefusedWithWhatToDo) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite.gz";
  std::ofstream(path, std::ios::binary) << "\x1f\x8b\x08\x00junk";
  try {
    prof::load_trace(path);
    FAIL() << "a gzip file loaded";
  } catch (const prof::TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("gunzip"), std::string::npos) << e.what();
  }
}

// ---- PyTorch profiler ---------------------------------------------------------------------
namespace {

struct Ev {
  std::string name;
  int64_t start, end, tid;
};

// Naive reference from the JSON alone: comm = union of gloo:/c10d:: events, compute = union
// of leaf events (no other event of the thread starts inside them and ends within them) that are not comm, overlap
// summed pairwise over the two unions. The profiler rounds to µs, so an event ending at most
// 1 µs after the innermost event that holds its start is first clamped to that event's end
// (quadratic search, parents first). No loader, no analysis code.
struct Naive {
  int64_t comm = 0, compute = 0, overlap = 0;
  std::vector<Ev> a2a;  // gloo:all_to_all sorted by start
  int attention = 0;
};

int64_t union_len(std::vector<std::pair<int64_t, int64_t>> v, std::vector<std::pair<int64_t, int64_t>>* out) {
  std::sort(v.begin(), v.end());
  int64_t total = 0;
  for (const auto& [s, e] : v) {
    if (e <= s) continue;
    if (!out->empty() && s <= out->back().second) {
      out->back().second = std::max(out->back().second, e);
    } else {
      out->push_back({s, e});
    }
  }
  for (const auto& [s, e] : *out) total += e - s;
  return total;
}

Naive naive_from_json(const std::string& path) {
  std::ifstream f(path);
  auto j = nlohmann::json::parse(f);
  std::vector<Ev> ev;
  for (const auto& e : j) {
    if (e.value("ph", "") != "X") continue;
    const int64_t ts = e["ts"].get<int64_t>() * 1000, dur = e["dur"].get<int64_t>() * 1000;
    ev.push_back({e["name"].get<std::string>(), ts, ts + dur, e["tid"].get<int64_t>()});
  }
  std::sort(ev.begin(), ev.end(),
            [](const Ev& x, const Ev& y) { return x.start != y.start ? x.start < y.start : x.end > y.end; });
  for (size_t i = 0; i < ev.size(); ++i) {
    int64_t holder = -1;
    for (size_t k = 0; k < i; ++k)  // earlier in (start, -end) order: a possible parent
      if (ev[k].tid == ev[i].tid && ev[k].start <= ev[i].start && ev[i].start < ev[k].end &&
          (holder < 0 || ev[k].start >= ev[static_cast<size_t>(holder)].start))
        holder = static_cast<int64_t>(k);
    if (holder >= 0) {
      const int64_t pe = ev[static_cast<size_t>(holder)].end;
      if (ev[i].end > pe && ev[i].end - pe <= 1000) ev[i].end = pe;
    }
  }
  auto is_comm = [](const std::string& n) { return n.rfind("gloo:", 0) == 0 || n.rfind("c10d::", 0) == 0; };
  Naive out;
  std::vector<std::pair<int64_t, int64_t>> comm, compute, cu, mu;
  for (size_t i = 0; i < ev.size(); ++i) {
    const Ev& a = ev[i];
    if (a.name == "gloo:all_to_all") out.a2a.push_back(a);
    if (a.name == "aten::_scaled_dot_product_attention") ++out.attention;
    if (is_comm(a.name)) {
      comm.push_back({a.start, a.end});
      continue;
    }
    bool leaf = true;
    for (size_t k = 0; k < ev.size() && leaf; ++k)
      if (k != i && ev[k].tid == a.tid && ev[k].start >= a.start && ev[k].end <= a.end && ev[k].start < a.end &&
          (ev[k].start > a.start || ev[k].end < a.end || k > i))
        leaf = false;
    if (leaf) compute.push_back({a.start, a.end});
  }
  out.comm = union_len(comm, &mu);
  out.compute = union_len(compute, &cu);
  for (const auto& [s, e] : mu)
    for (const auto& [s2, e2] : cu) out.overlap += std::max<int64_t>(0, std::min(e, e2) - std::max(s, s2));
  std::sort(out.a2a.begin(), out.a2a.end(), [](const Ev& x, const Ev& y) { return x.start < y.start; });
  return out;
}

}  // namespace

TEST(ForeignKineto, RealTwoRankGlooTraceOpensAsTwoRanksWithItsBreakdown) {
  const std::string dir = data_dir() + "/kineto_2rank";
  auto m = prof::load_trace(dir);
  EXPECT_EQ(m.format, "kineto");
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].rank, 0);
  EXPECT_EQ(m.ranks[1].rank, 1);
  auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 2u);
  Naive ref[2] = {naive_from_json(dir + "/rank0.json"), naive_from_json(dir + "/rank1.json")};
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& b = s.steps[static_cast<size_t>(r)];
    EXPECT_EQ(b.rank, r);
    EXPECT_FALSE(b.gpu);
    EXPECT_EQ(b.comm_ns, ref[r].comm);
    EXPECT_EQ(b.compute_ns, ref[r].compute);
    EXPECT_EQ(b.overlap_ns, ref[r].overlap);
    EXPECT_GT(ref[r].comm, 0);
    EXPECT_GT(ref[r].compute, 0);
    ASSERT_EQ(ref[r].a2a.size(), 4u);  // 2 layers x (seq->head, head->seq)
    EXPECT_EQ(ref[r].attention, 2);
  }
  // Ulysses labels: per rank the all-to-alls alternate seq->head, head->seq, layer 0 then 1.
  std::map<std::tuple<int, int>, int64_t> want;  // (layer, phase 0 = s2h / 1 = h2s) -> ns over ranks
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 4; ++k)
      want[{k / 2, k % 2}] += ref[r].a2a[static_cast<size_t>(k)].end - ref[r].a2a[static_cast<size_t>(k)].start;
  ASSERT_EQ(s.layers.size(), 2u);
  for (const auto& row : s.layers) {
    SCOPED_TRACE("layer " + std::to_string(row.layer));
    EXPECT_EQ(row.dir, prof::Direction::Forward);
    EXPECT_EQ(row.a2a_seq_to_head_ns, (want[{row.layer, 0}]));
    EXPECT_EQ(row.a2a_head_to_seq_ns, (want[{row.layer, 1}]));
    EXPECT_GT(row.attention_ns, 0);
  }
  int per_rank_ops = 0;
  for (const auto& r : m.ranges) per_rank_ops += r.rank == 1 && m.strings[static_cast<size_t>(r.name_id)] == "aten::mm";
  EXPECT_EQ(per_rank_ops, 2);  // the qkv projection of each layer
}

TEST(ForeignKineto, KinetoGpuTraceRanksFromDistributedInfoAndUlyssesLabels) {
  // Two Kineto files named against their ranks; distributedInfo decides. Per rank one layer:
  //   stream 20 (NCCL): SendRecv [0,100) (seq->head), SendRecv [400,500) (head->seq)
  //   stream 7: flash_fwd_kernel [100,400), gemm [450,600) (overlaps head->seq by 50)
  // comm 200, compute 450, overlap 50.
  TempDir tmp;
  for (int r = 0; r < 2; ++r) {
    nlohmann::json j;
    j["schemaVersion"] = 1;
    j["distributedInfo"] = {{"backend", "nccl"}, {"rank", r}, {"world_size", 2}};
    j["deviceProperties"] = nlohmann::json::array({{{"id", r}, {"name", "NVIDIA H100 80GB HBM3"}}});
    const double base = 1000.0 * r;  // µs
    auto k = [&](const char* name, double ts, double dur, int stream) {
      return nlohmann::json{{"ph", "X"},     {"cat", "kernel"},
                            {"name", name},  {"pid", r},
                            {"tid", stream}, {"ts", base + ts},
                            {"dur", dur},    {"args", {{"device", r}, {"stream", stream}, {"correlation", 1}}}};
    };
    j["traceEvents"] = nlohmann::json::array(
        {{{"ph", "M"}, {"name", "thread_name"}, {"pid", 100 + r}, {"tid", 100 + r}, {"args", {{"name", "python3"}}}},
         {{"ph", "X"},
          {"cat", "cpu_op"},
          {"name", "aten::_scaled_dot_product_flash_attention"},
          {"pid", 100 + r},
          {"tid", 100 + r},
          {"ts", base + 0.05},
          {"dur", 0.02}},
         {{"ph", "X"},
          {"cat", "cuda_runtime"},
          {"name", "cudaLaunchKernel"},
          {"pid", 100 + r},
          {"tid", 100 + r},
          {"ts", base + 0.06},
          {"dur", 0.005},
          {"args", {{"correlation", 1}}}},
         {{"ph", "X"},
          {"cat", "gpu_user_annotation"},
          {"name", "nccl:all_to_all"},
          {"pid", r},
          {"tid", 20},
          {"ts", base},
          {"dur", 0.1}},
         k("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 0, 0.1, 20),
         k("flash_fwd_kernel", 0.1, 0.3, 7),
         k("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 0.4, 0.1, 20),
         k("sm90_xmma_gemm_bf16bf16", 0.45, 0.15, 7)});
    std::ofstream(tmp.path + "/trace_" + std::string(r == 0 ? "b" : "a") + ".json") << j.dump();
  }
  auto m = prof::load_trace(tmp.path);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].rank, 0);
  EXPECT_EQ(m.ranks[0].pid, 100);  // the file named trace_b.json
  EXPECT_EQ(m.ranks[1].pid, 101);
  EXPECT_EQ(m.ranks[0].device, "cuda:0");
  auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 2u);
  for (const auto& b : s.steps) {
    EXPECT_TRUE(b.gpu);
    EXPECT_EQ(b.comm_ns, 200);
    EXPECT_EQ(b.compute_ns, 450);
    EXPECT_EQ(b.overlap_ns, 50);
  }
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].a2a_seq_to_head_ns, 200);  // 100 per rank
  EXPECT_EQ(s.layers[0].a2a_head_to_seq_ns, 200);
  EXPECT_EQ(s.layers[0].attention_ns, 600);
  EXPECT_EQ(m.runtime.size(), 2u);
}

TEST(ForeignKineto, BrokenJsonIsATraceErrorNamingTheFile) {
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.json";
  std::ofstream(path) << "{\"traceEvents\": [{\"ph\": \"X\", ";
  try {
    prof::load_trace(path);
    FAIL();
  } catch (const prof::TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("rank0.json"), std::string::npos) << e.what();
  }
}

// A trace saved by an editor that writes a UTF-8 byte order mark first is JSON, not "not an
// SQLite database" (a sniffer looking for '{' or '[' at the first byte would say that).
TEST(ForeignKineto, AByteOrderMarkBeforeTheJsonIsSkipped) {
  TempDir tmp;
  const std::string bom = "\xEF\xBB\xBF";
  const std::string kineto = tmp.path + "/rank0.json", legacy = tmp.path + "/legacy.json";
  std::ofstream(kineto) << bom << R"({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]})";
  std::ofstream(legacy) << bom << "\n "
                        << R"([{"ph": "X", "name": "op", "ts": 1, "dur": 2}])";
  for (const std::string& path : {kineto, legacy}) {
    EXPECT_TRUE(prof::is_foreign_trace(path)) << path;
    const auto m = prof::load_trace(path);
    EXPECT_EQ(m.format, "kineto") << path;
    ASSERT_EQ(m.ranges.size(), 1u) << path;
    EXPECT_EQ(m.strings[static_cast<size_t>(m.ranges[0].name_id)], "op");
  }
  // A byte order mark alone, or before something that is not JSON, is still no trace.
  std::ofstream(tmp.path + "/mark.json") << bom;
  std::ofstream(tmp.path + "/text.json") << bom << "hello";
  EXPECT_FALSE(prof::is_foreign_trace(tmp.path + "/mark.json"));
  EXPECT_FALSE(prof::is_foreign_trace(tmp.path + "/text.json"));
}

// Two ProfilerStep#1 events on one rank: one step record (the second made every per-step table
// count step 1 twice), the repeat kept as a plain range, with a note; as in our own format.
TEST(ForeignKineto, ARepeatedProfilerStepIsOneStepWithANote) {
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.json";
  std::ofstream(path) << R"({"traceEvents": [)"
                      << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10},)"
                      << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 20, "dur": 10},)"
                      << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 40, "dur": 10}]})";
  const auto m = prof::load_trace(path);
  ASSERT_EQ(m.steps.size(), 2u);
  EXPECT_EQ(m.steps[0].step, 1);
  EXPECT_EQ(m.steps[0].start_ns, 0);
  EXPECT_EQ(m.steps[1].step, 2);
  EXPECT_EQ(m.ranges.size(), 3u);
  std::string notes;
  for (const auto& n : m.notes) notes += n + "\n";
  EXPECT_NE(notes.find("1 ProfilerStep# ranges repeating a step of this rank"), std::string::npos) << notes;
}

// torch.profiler(profile_memory=True) writes one "[memory]" instant event per allocation and
// free, with the allocator's totals after it. A GPU rank's samples are its own device's (the
// CPU's and another device's are left out, counted in a note); peak is the largest allocated
// so far in the sample's step; samples are in the step whose ProfilerStep# holds them. Every
// figure below is the file's own number or a hand computation from it.
TEST(ForeignKineto, MemoryEventsOfTheRanksDeviceAreItsMemorySamples) {
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.json";
  auto mem = [](double ts, int type, int id, const std::string& rest) {
    return R"({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 5, "tid": 5, "ts": )" +
           std::to_string(ts) + R"(, "args": {"Device Type": )" + std::to_string(type) + R"(, "Device Id": )" +
           std::to_string(id) + ", " + rest + "}},";
  };
  std::ofstream(path)
      << R"({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [)"
      << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 5, "tid": 5, "ts": 0, "dur": 100},)"
      << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 5, "tid": 5, "ts": 100, "dur": 100},)"
      << R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 10, "args": {"device": 0, "stream": 7}},)"
      << mem(10, 1, 0, R"("Bytes": 1000, "Total Allocated": 1000, "Total Reserved": 2048)")
      << mem(20, 0, -1, R"("Bytes": 64, "Total Allocated": 64, "Total Reserved": 0)")
      << mem(50, 1, 0, R"("Bytes": 3000, "Total Allocated": 4000, "Total Reserved": 8192)")
      << mem(60, 1, 0, R"("Bytes": -3000, "Total Allocated": 1000, "Total Reserved": 8192)")
      << mem(150, 1, 0, R"("Bytes": 500, "Total Allocated": 1500, "Total Reserved": 8192)")
      << mem(170, 1, 1, R"("Bytes": 9, "Total Allocated": 99999, "Total Reserved": 99999)")
      << mem(180, 1, 0, R"("Bytes": 1, "Total Allocated": "NaN", "Total Reserved": 8192)")
      << R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 1, "dur": 1}]})";
  const auto m = prof::load_trace(path);
  ASSERT_EQ(m.ranks.size(), 1u);
  EXPECT_EQ(m.ranks[0].device, "cuda:0");
  struct Want {
    int64_t t_ns, allocated, reserved, peak, step;
  };
  const std::vector<Want> want = {{10000, 1000, 2048, 1000, 0},
                                  {50000, 4000, 8192, 4000, 0},
                                  {60000, 1000, 8192, 4000, 0},
                                  {150000, 1500, 8192, 1500, 1}};
  ASSERT_EQ(m.memory.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& p = m.memory[i];
    EXPECT_EQ(p.rank, 0) << i;
    EXPECT_EQ(p.t_ns, want[i].t_ns) << i;
    EXPECT_EQ(p.allocated, want[i].allocated) << i;
    EXPECT_EQ(p.reserved, want[i].reserved) << i;
    EXPECT_EQ(p.peak, want[i].peak) << i;
    EXPECT_EQ(p.step, want[i].step) << i;
    EXPECT_EQ(m.strings[static_cast<size_t>(p.label_id)], "[memory] cuda:0") << i;
  }
  std::string notes;
  for (const auto& n : m.notes) notes += n + "\n";
  EXPECT_NE(notes.find("4 [memory] samples of cuda:0's allocator read as the memory view's samples; 2 of other "
                       "devices left out; 1 without a readable time or byte count left out"),
            std::string::npos)
      << notes;
  // The headline's peak: the whole trace's, and step 1's alone.
  EXPECT_EQ(prof::headline(m, prof::AnalysisOptions{}).peak_memory_bytes, 4000);
  prof::AnalysisOptions one;
  one.step_begin = one.step_end = 1;
  EXPECT_EQ(prof::headline(m, one).peak_memory_bytes, 1500);
}

// Events with Bytes alone (older PyTorch), on a CPU rank (no kernels), some as counter ("C")
// events: allocated is the running sum of Bytes, never below 0, said in a note; the rank's
// number comes from distributedInfo and the samples carry it.
TEST(ForeignKineto, MemoryEventsWithBytesAloneAreSummedWithANote) {
  TempDir tmp;
  const std::string path = tmp.path + "/trace.json";
  std::ofstream(path) << R"({"distributedInfo": {"rank": 3, "world_size": 4}, "traceEvents": [)"
                      << R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 0, "dur": 100},)"
                      << R"({"ph": "i", "name": "[memory]", "ts": 10, "args": {"Device Type": 0, "Bytes": 100}},)"
                      << R"({"ph": "C", "name": "[memory]", "ts": 20, "args": {"Device Type": 0, "Bytes": 200}},)"
                      << R"({"ph": "i", "name": "[memory]", "ts": 30, "args": {"Device Type": 0, "Bytes": -50}},)"
                      << R"({"ph": "i", "name": "[memory]", "ts": 40, "args": {"Device Type": 0, "Bytes": -1000}}]})";
  const auto m = prof::load_trace(path);
  ASSERT_EQ(m.memory.size(), 4u);
  const int64_t want[] = {100, 300, 250, 0}, want_peak[] = {100, 300, 300, 300};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m.memory[i].rank, 3) << i;
    EXPECT_EQ(m.memory[i].allocated, want[i]) << i;
    EXPECT_EQ(m.memory[i].peak, want_peak[i]) << i;
    EXPECT_EQ(m.memory[i].step, -1) << i;
  }
  std::string notes;
  for (const auto& n : m.notes) notes += n + "\n";
  EXPECT_NE(notes.find("4 [memory] samples of cpu's allocator"), std::string::npos) << notes;
  EXPECT_NE(notes.find("4 [memory] samples without \"Total Allocated\": allocated is the running sum"),
            std::string::npos)
      << notes;
}

// A legacy profiler array of things that are not events ([[]], numbers) and a Kineto trace
// without one complete event open with a note saying so: they loaded as an empty picture
// with nothing said.
TEST(ForeignKineto, EntriesThatAreNotEventsAreNamedInANote) {
  TempDir tmp;
  auto notes_of = [&](const std::string& text) {
    const std::string path = tmp.path + "/rank0.json";
    std::ofstream(path, std::ios::trunc) << text;
    std::string all;
    for (const auto& n : prof::load_trace(path).notes) all += n + "\n";
    return all;
  };
  const std::string legacy = notes_of("[[], [[]], 7]");
  EXPECT_NE(legacy.find("3 of 3 entries are not event objects"), std::string::npos) << legacy;
  EXPECT_NE(legacy.find("no complete (\"ph\": \"X\") events"), std::string::npos) << legacy;
  const std::string instants = notes_of(R"({"traceEvents": [{"ph": "i", "name": "mark", "ts": 1}]})");
  EXPECT_EQ(instants.find("not event objects"), std::string::npos) << instants;
  EXPECT_NE(instants.find("no complete (\"ph\": \"X\") events"), std::string::npos) << instants;
  const std::string one = notes_of(R"({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]})");
  EXPECT_EQ(one.find("no complete"), std::string::npos) << one;
  // Events are taken from the parser one by one (not one document): only traceEvents' entries
  // count, whatever other top-level arrays come before or after it.
  const std::string around = notes_of(
      R"({"deviceProperties": [1, {"id": 0}], "traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}, 5, [3]], )"
      R"("after": [7, {"ph": "X", "name": "stray", "ts": 1, "dur": 2}], "baseTimeNanoseconds": 1000})");
  EXPECT_NE(around.find("2 of 3 entries are not event objects"), std::string::npos) << around;
  const auto m = prof::load_trace(tmp.path + "/rank0.json");
  ASSERT_EQ(m.ranges.size(), 1u);
  EXPECT_EQ(m.strings[static_cast<size_t>(m.ranges[0].name_id)], "op");
  EXPECT_EQ(m.ranges[0].start_ns, 1000 + 1000);  // baseTimeNanoseconds, written after the events, applies
}

// Hostile values in foreign traces (helper sweep): each must not end in exit 1 with a
// bare library message, in wrapped numbers, or in one rank's data lost.
TEST(ForeignHostile, OutOfRangeRanksTimesAndTypesLoadWithNotes) {
  TempDir tmp;
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp.path + "/" + name, std::ios::trunc) << text;
    return tmp.path + "/" + name;
  };
  auto all_notes = [](const prof::TraceModel& m) {
    std::string s;
    for (const auto& n : m.notes) s += n + "\n";
    return s;
  };
  const std::string ev =
      R"("traceEvents": [{"ph": "X", "name": "op", "cat": "cpu_op", "ts": 10, "dur": 5, "pid": 1, "tid": 1}])";
  // A rank of 2^32 cut to int32 would be 0: two "rank 0"s, and a per-rank export losing one.
  fs::create_directories(tmp.path + "/big");
  write("big/a.json", "{\"distributedInfo\": {\"rank\": 4294967296}, " + ev + "}");
  write("big/b.json", "{\"distributedInfo\": {\"rank\": 0}, " + ev + "}");
  const auto big = prof::load_trace(tmp.path + "/big");
  ASSERT_EQ(big.ranks.size(), 2u);
  EXPECT_NE(big.ranks[0].rank, big.ranks[1].rank);
  for (const auto& r : big.ranks) EXPECT_GE(r.rank, 0);
  EXPECT_NE(all_notes(big).find("out of range"), std::string::npos) << all_notes(big);
  // A file name with a rank past int64 threw a bare "stoll".
  EXPECT_EQ(prof::load_trace(write("rank99999999999999999999999.json", "{" + ev + "}")).ranks.size(), 1u);
  // A member of the wrong type ({"ph": 5}, {"cat": 7}) threw nlohmann's type_error.
  EXPECT_NO_THROW(prof::load_trace(write("types.json", R"({"traceEvents": [{"ph": 5, "ts": 1}, )"
                                                       R"({"ph": "X", "cat": 7, "name": "op", "ts": 1, "dur": 1}]})")));
  // Times past +-2^62 ns (1e300 us, "-inf", 2^64 - 1, a base of INT64_MAX) are left out with a
  // note, not turned into INT64_MIN or wrapped.
  const auto times = prof::load_trace(
      write("times.json", R"({"baseTimeNanoseconds": 9223372036854775807, "traceEvents": [)"
                          R"({"ph": "X", "name": "a", "ts": 1e300, "dur": 1, "pid": 1, "tid": 1},)"
                          R"({"ph": "X", "name": "b", "ts": "-inf", "dur": 1, "pid": 1, "tid": 1},)"
                          R"({"ph": "X", "name": "c", "ts": 18446744073709551615, "dur": 1, "pid": 1, "tid": 1},)"
                          R"({"ph": "X", "name": "ok", "ts": 100, "dur": 1, "pid": 1, "tid": 1}]})"));
  EXPECT_NE(all_notes(times).find("traceEvents: 2 rows dropped: ts is beyond +-2^62 ns"), std::string::npos)
      << all_notes(times);
  EXPECT_NE(all_notes(times).find("traceEvents: 1 rows dropped: ts is text"), std::string::npos) << all_notes(times);
  EXPECT_NE(all_notes(times).find("baseTimeNanoseconds"), std::string::npos) << all_notes(times);
  for (const auto& r : times.ranges) {
    EXPECT_GE(r.start_ns, 0);
    EXPECT_GE(r.end_ns, r.start_ns);
  }
  // An nsys export with a kernel from INT64_MIN to INT64_MAX: left out with a note, no
  // negative step time; one with invalid UTF-8 in a name exports valid JSON.
  const std::string nsys = tmp.path + "/x.sqlite";
  write_nsys(nsys, Schema::Modern, {0}, {{0, 0}});
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(nsys.c_str(), &db), SQLITE_OK);
  exec(db,
       "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1; "
       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808, end = 9223372036854775807 "
       "WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)");
  exec(db,
       "UPDATE StringIds SET value = CAST(x'6e63636cff3c2f7363726970743e' AS TEXT) WHERE id = (SELECT "
       "demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)");
  sqlite3_close(db);
  const auto nm = prof::load_trace(nsys);
  EXPECT_NE(all_notes(nm).find("CUPTI_ACTIVITY_KIND_KERNEL: 1 rows dropped: time beyond +-2^62 ns"), std::string::npos)
      << all_notes(nm);
  const auto sum = prof::analyze(nm);
  for (const auto& st : sum.steps) {
    EXPECT_GE(st.wall_ns, 0);
    EXPECT_GE(st.idle_ns, 0);
  }
  // Kernels with deviceId -1 (CUPTI did not say) or 2^40: a GPU rank "cuda (device id unknown)",
  // with a note; -1 is not labelled "cpu" nor shifted negative into its lane key.
  const std::string devs = tmp.path + "/dev.sqlite";
  write_nsys(devs, Schema::Modern, {0}, {{0, 0}});
  ASSERT_EQ(sqlite3_open(devs.c_str(), &db), SQLITE_OK);
  exec(db,
       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -1 WHERE rowid % 2 = 0; "
       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1099511627776 WHERE rowid % 2 = 1");
  sqlite3_close(db);
  const auto dm = prof::load_trace(devs);
  EXPECT_NE(all_notes(dm).find("deviceId below 0, past 2^20"), std::string::npos) << all_notes(dm);
  bool unknown_rank = false;
  for (const auto& r : dm.ranks) {
    EXPECT_EQ(r.device.find("cpu"), std::string::npos) << r.device;
    unknown_rank |= r.device.rfind("cuda (device id unknown)", 0) == 0;
  }
  EXPECT_TRUE(unknown_rank);
  int64_t kernels = 0;
  for (const auto& r : dm.ranges) kernels += r.is_kernel;
  EXPECT_GT(kernels, 0);
  for (const auto& l : dm.lanes) {
    if (l.kind == prof::LaneKind::CudaStream) {
      EXPECT_EQ(l.name.rfind("gpu ? stream", 0), 0u) << l.name;
    }
  }
  prof::export_chrome_trace(nm, tmp.path + "/x.json", {});
  std::ifstream in(tmp.path + "/x.json");
  const auto exported = nlohmann::json::parse(in, nullptr, false);
  EXPECT_FALSE(exported.is_discarded()) << "the export is not valid JSON";
#ifdef ULYSSES_TRACE_BIN
  // summary --json of it: exit 0 and valid JSON (not exit 1, "invalid UTF-8 byte", no output).
  const int st = std::system((std::string(ULYSSES_TRACE_BIN) + " summary --json --no-cache '" + nsys + "' > '" +
                              tmp.path + "/s.json' 2>/dev/null")
                                 .c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::ifstream sj(tmp.path + "/s.json");
  EXPECT_FALSE(nlohmann::json::parse(sj, nullptr, false).is_discarded());
  // The text summary shows a name's control characters as '?': "\x1b]0;T\x07" set the
  // terminal's title.
  // A newline in a name must not break the names table over two lines: one row per name.
  write("esc.json", R"({"traceEvents": [{"ph": "X", "name": "op\u001b]0;T\u0007", "cat": "cpu_op", "ts": 1, )"
                    R"("dur": 5, "pid": 1, "tid": 1}, {"ph": "X", "name": "two\nlines", "cat": "cpu_op", "ts": 10, )"
                    R"("dur": 5, "pid": 1, "tid": 1}]})");
  const int st2 = std::system((std::string(ULYSSES_TRACE_BIN) + " summary --no-cache '" + tmp.path + "/esc.json' > '" +
                               tmp.path + "/esc.txt' 2>/dev/null")
                                  .c_str());
  EXPECT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 0) << st2;
  std::ifstream et(tmp.path + "/esc.txt");
  const std::string text((std::istreambuf_iterator<char>(et)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("op?]0;T?"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("two lines\n"), std::string::npos) << text;
#endif
  // "ProfilerStep#-3" is no step (it made step -3; the summary then found no step in 0..).
  const auto neg = prof::load_trace(write(
      "negstep.json", R"({"traceEvents": [{"ph": "X", "name": "ProfilerStep#-3", "ts": 1, "dur": 5, "pid": 1, )"
                      R"("tid": 1}, {"ph": "X", "name": "ProfilerStep#4", "ts": 10, "dur": 5, "pid": 1, "tid": 1}]})"));
  ASSERT_EQ(neg.steps.size(), 1u);
  EXPECT_EQ(neg.steps[0].step, 4);
  EXPECT_NE(all_notes(neg).find("1 ProfilerStep# ranges without a step number"), std::string::npos) << all_notes(neg);
  // An array that holds no event objects ([1, 2, 3], a run.json gone wrong) is no profiler trace.
  EXPECT_FALSE(prof::is_foreign_trace(write("array.json", "[1, 2, 3]")));
  EXPECT_TRUE(prof::is_foreign_trace(write("events.json", R"([{"ph": "X", "name": "a", "ts": 1, "dur": 1}])")));
}
