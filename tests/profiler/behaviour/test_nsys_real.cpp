// Nsight Systems exports built on NVIDIA's own table definitions: the CREATE TABLE text of two
// documented export schemas (tests/data/foreign/nsys_schema/: the User Guide reference of the
// 3.x line and schema 3.28.1 of Nsight Systems 2026.4) is executed as is, and a 2-process,
// 2-GPU run with NCCL send/recv and all-reduce kernels, CUDA launches whose correlation ids
// collide across processes, NVTX ranges and 60 processes without GPU work is written into it.
// The schema is real, the rows are synthetic (no public multi-GPU export with a licence that
// allows committing it was found; see tests/data/foreign/README.md).
//
// Every expected figure is recomputed from the file with independent SQL and a naive
// elementary-segment sweep written here (no loader or analysis code): ranks, NCCL kernel
// count and summed time per device, compute time and the overlapped part. Exact in ns.
//
// Real exports: NsysReal.RealExportsInAFolder checks every *.sqlite in $ULYSSES_NSYS_EXPORTS
// the same way (skipped when unset), so a real export can be checked without committing it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "profiler/test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;

namespace {

std::string schema_dir() { return ULYSSES_TEST_DATA_DIR "/foreign/nsys_schema"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- a tiny SQLite writer that fills every NOT NULL column the test does not set -----------

struct Val {
  bool text = false;
  int64_t i = 0;
  std::string s;
  Val(int64_t v) : i(v) {}                             // NOLINT
  Val(int v) : i(v) {}                                 // NOLINT
  Val(const char* v) : text(true), s(v) {}             // NOLINT
  Val(std::string v) : text(true), s(std::move(v)) {}  // NOLINT
};

class Db {
 public:
  explicit Db(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("open " + path);
    exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN");
  }
  ~Db() {
    exec("COMMIT");
    sqlite3_close(db_);
  }
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string e = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(e + " in: " + sql.substr(0, 200));
    }
  }
  // INSERT with the given columns; other NOT NULL columns (no default, not the rowid) get 0 or ''.
  void insert(const std::string& table, const std::vector<std::pair<std::string, Val>>& cols) {
    auto& filler = fillers_[table];
    if (filler.empty() && !filled_[table]) {
      filled_[table] = true;
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(
          db_, ("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('" + table + "')").c_str(), -1,
          &st, nullptr);
      while (sqlite3_step(st) == SQLITE_ROW) {
        const std::string name = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
        const std::string type = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
        if (sqlite3_column_int(st, 2) && sqlite3_column_type(st, 3) == SQLITE_NULL && sqlite3_column_int(st, 4) == 0)
          filler.emplace_back(name, type == "TEXT" ? Val("") : Val(0));
      }
      sqlite3_finalize(st);
    }
    std::vector<std::pair<std::string, Val>> all = cols;
    for (const auto& f : filler) {
      bool given = false;
      for (const auto& c : cols) given |= c.first == f.first;
      if (!given) all.push_back(f);
    }
    std::string sql = "INSERT INTO " + table + " (", q;
    for (size_t k = 0; k < all.size(); ++k) {
      sql += (k ? ", \"" : "\"") + all[k].first + "\"";
      q += k ? ", ?" : "?";
    }
    sql += ") VALUES (" + q + ")";
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    for (size_t k = 0; k < all.size(); ++k) {
      const Val& v = all[k].second;
      if (v.text)
        sqlite3_bind_text(st, static_cast<int>(k + 1), v.s.c_str(), -1, SQLITE_TRANSIENT);
      else
        sqlite3_bind_int64(st, static_cast<int>(k + 1), v.i);
    }
    if (sqlite3_step(st) != SQLITE_DONE) throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    sqlite3_finalize(st);
  }
  int64_t string_id(const std::string& s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const int64_t id = static_cast<int64_t>(ids_.size()) + 1;
    insert("StringIds", {{"id", id}, {"value", s}});
    return ids_[s] = id;
  }

 private:
  sqlite3* db_ = nullptr;
  std::map<std::string, std::vector<std::pair<std::string, Val>>> fillers_;
  std::map<std::string, bool> filled_;
  std::map<std::string, int64_t> ids_;
};

// Serialized GlobalIds as real exports hold them: pid 30156 is 0x1000075CC000000 there.
int64_t nsys_gpid(int64_t pid) { return (int64_t{1} << 48) | (pid << 24); }
int64_t nsys_gtid(int64_t pid, int64_t tid) { return nsys_gpid(pid) | tid; }

enum class Variant {
  Schema3281,            // schema_3_28_1.sql as documented
  UserGuide,             // userguide_3x.sql as documented
  UserGuideNoGlobalPid,  // userguide_3x.sql with globalPid removed from the GPU tables (derived)
  RuntimeOnly,           // schema_3_28_1.sql without kernel/memcpy/memset/NVTX tables
};

// The scenario: processes 4242 (device 0) and 4243 (device 1) train with NCCL; 60 more
// processes (launcher, nsys, data loader workers) own no GPU work, one of them NVTX ranges.
// Each worker launches 36 compute kernels on stream 7 and 12 NCCL kernels on stream 13
// (send/recv, all-reduce under both NCCL naming schemes), plus a memcpy and a memset;
// durations and gaps come from a fixed LCG so the overlap is not a round number.
void write_export(const std::string& path, Variant v, const std::string& schema_version = "3.28.1") {
  std::string ddl = slurp(schema_dir() + (v == Variant::Schema3281 || v == Variant::RuntimeOnly ? "/schema_3_28_1.sql"
                                                                                                : "/userguide_3x.sql"));
  ASSERT_FALSE(ddl.empty());
  if (v == Variant::UserGuideNoGlobalPid) {
    // Derived, not documented: the kernel/memcpy/memset tables of an export without globalPid.
    std::string out;
    std::istringstream in(ddl);
    std::string line, table;
    while (std::getline(in, line)) {
      if (line.rfind("CREATE TABLE ", 0) == 0) table = line;
      if (table.find("CUPTI_ACTIVITY_KIND_RUNTIME") == std::string::npos &&
          table.find("CUPTI_ACTIVITY_KIND_") != std::string::npos && line.find("    globalPid ") == 0)
        continue;
      out += line + "\n";
    }
    ddl = out;
  }
  Db db(path);
  db.exec(ddl);
  if (v == Variant::RuntimeOnly)
    db.exec(
        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL; DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY; "
        "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET; DROP TABLE NVTX_EVENTS");
  const bool has_gpid = v != Variant::UserGuideNoGlobalPid;
  const bool gpu = v != Variant::RuntimeOnly;
  if (!schema_version.empty()) {
    db.insert("META_DATA_EXPORT", {{"name", "EXPORT_PRODUCT_NAME"}, {"value", "NVIDIA Nsight Systems"}});
    db.insert("META_DATA_EXPORT", {{"name", "EXPORT_PRODUCT_VERSION"}, {"value", "2026.4 (synthetic rows)"}});
    db.insert("META_DATA_EXPORT", {{"name", "EXPORT_SCHEMA_VERSION"}, {"value", schema_version}});
  }
  for (int d = 0; d < 2; ++d)
    db.insert("TARGET_INFO_GPU", {{"vmId", 0}, {"id", d}, {"name", "NVIDIA H100 80GB HBM3"}, {"cuDevice", d}});
  // Processes: workers, then 60 without GPU work (the file listed 159).
  db.insert("PROCESSES", {{"globalPid", nsys_gpid(4242)}, {"pid", 4242}, {"name", "python3"}});
  db.insert("PROCESSES", {{"globalPid", nsys_gpid(4243)}, {"pid", 4243}, {"name", "python3"}});
  db.insert("PROCESSES", {{"globalPid", nsys_gpid(4100)}, {"pid", 4100}, {"name", "torchrun"}});
  for (int k = 0; k < 59; ++k)
    db.insert("PROCESSES",
              {{"globalPid", nsys_gpid(5000 + k)}, {"pid", 5000 + k}, {"name", k < 3 ? "nsys" : "pt_data_worker"}});
  for (int64_t pid : {4242, 4243})
    db.insert("ThreadNames",
              {{"nameId", db.string_id("python3")}, {"priority", 0}, {"globalTid", nsys_gtid(pid, pid)}});

  const char* compute_short[] = {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "flash_fwd_kernel",
                                 "vectorized_elementwise_kernel"};
  const char* nccl_short[] = {"ncclDevKernel_SendRecv", "ncclKernel_AllReduce_RING_LL_Sum_float",
                              "ncclDevKernel_AllGather_RING_LL"};
  const char* nccl_long[] = {"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                             "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                             "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"};
  uint64_t lcg = 12345;
  auto rnd = [&](int64_t lo, int64_t hi) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int64_t>((lcg >> 33) % static_cast<uint64_t>(hi - lo + 1));
  };
  const int64_t launch = db.string_id("cudaLaunchKernel_v7000");
  for (int w = 0; w < 2; ++w) {
    const int64_t pid = 4242 + w, dev = w, tid = pid;
    int64_t corr = 0, t = 1'000'000 + w * 777, tc = t + 500;  // correlation ids count per process
    auto kernel = [&](int64_t start, int64_t dur, int64_t stream, const std::string& shrt, const std::string& lng) {
      ++corr;
      db.insert("CUPTI_ACTIVITY_KIND_RUNTIME", {{"start", start - 900},
                                                {"end", start - 400},
                                                {"eventClass", 1},
                                                {"globalTid", nsys_gtid(pid, tid)},
                                                {"correlationId", corr},
                                                {"nameId", launch},
                                                {"returnValue", 0}});
      if (!gpu) return;
      std::vector<std::pair<std::string, Val>> c = {{"start", start},
                                                    {"end", start + dur},
                                                    {"deviceId", dev},
                                                    {"contextId", 1},
                                                    {"streamId", stream},
                                                    {"correlationId", corr},
                                                    {"demangledName", db.string_id(lng)},
                                                    {"shortName", db.string_id(shrt)},
                                                    {"gridX", 132},
                                                    {"gridY", 1},
                                                    {"gridZ", 1},
                                                    {"blockX", 256},
                                                    {"blockY", 1},
                                                    {"blockZ", 1},
                                                    {"registersPerThread", 96},
                                                    {"gridId", corr}};
      if (has_gpid) c.emplace_back("globalPid", nsys_gpid(pid));
      db.insert("CUPTI_ACTIVITY_KIND_KERNEL", c);
    };
    for (int k = 0; k < 36; ++k) {
      const std::string s = compute_short[k % 3];
      kernel(t, rnd(3'000, 40'000), 7, s, s + "(Params)");
      t += rnd(3'000, 40'000) + rnd(0, 9'000);
      if (k % 3 == 2) {  // an NCCL kernel on the comm stream, overlapping compute or not
        const int n = (k / 3) % 3;
        tc = std::max(tc, t - rnd(0, 60'000));
        const int64_t dur = rnd(5'000, 50'000);
        kernel(tc, dur, 13, nccl_short[n], nccl_long[n]);
        tc += dur + rnd(1'000, 20'000);
      }
    }
    if (gpu) {
      std::vector<std::pair<std::string, Val>> mc = {{"start", t + 1000}, {"end", t + 9000}, {"deviceId", dev},
                                                     {"contextId", 1},    {"streamId", 7},   {"correlationId", ++corr},
                                                     {"bytes", 1 << 20},  {"copyKind", 1}};
      std::vector<std::pair<std::string, Val>> ms = {{"start", t + 9500}, {"end", t + 9900}, {"deviceId", dev},
                                                     {"contextId", 1},    {"streamId", 7},   {"correlationId", ++corr},
                                                     {"bytes", 4096},     {"value", 0}};
      if (has_gpid) mc.emplace_back("globalPid", nsys_gpid(pid)), ms.emplace_back("globalPid", nsys_gpid(pid));
      db.insert("CUPTI_ACTIVITY_KIND_MEMCPY", mc);
      db.insert("CUPTI_ACTIVITY_KIND_MEMSET", ms);
      // PyTorch's emit_nvtx names on the main thread.
      for (int k = 0; k < 3; ++k)
        db.insert(
            "NVTX_EVENTS",
            {{"start", 1'000'000 + k * 100'000},
             {"end", 1'050'000 + k * 100'000},
             {"eventType", 59},
             {"globalTid", nsys_gtid(pid, tid)},
             {"textId", db.string_id("aten::mm, seq = " + std::to_string(k) + ", op_id = " + std::to_string(40 + k))}});
    }
  }
  if (gpu && has_gpid) {
    // Two Triton autotune workers: GPU work, no NCCL, not ranks. (Left out of the file without
    // globalPid: their kernels share device and context id 1 with the workers there, and no
    // reader can tell them apart by context.)
    for (int h = 0; h < 2; ++h) {
      const int64_t pid = 6001 + h;
      db.insert("PROCESSES", {{"globalPid", nsys_gpid(pid)}, {"pid", pid}, {"name", "compile_worker"}});
      for (int k = 0; k < 4; ++k) {
        const int64_t start = 1'200'000 + h * 50'000 + k * 9'000;
        db.insert("CUPTI_ACTIVITY_KIND_RUNTIME", {{"start", start - 700},
                                                  {"end", start - 300},
                                                  {"eventClass", 1},
                                                  {"globalTid", nsys_gtid(pid, pid)},
                                                  {"correlationId", k + 1},
                                                  {"nameId", launch},
                                                  {"returnValue", 0}});
        db.insert("CUPTI_ACTIVITY_KIND_KERNEL",
                  {{"start", start},
                   {"end", start + 4'000},
                   {"deviceId", h},
                   {"contextId", 1},
                   {"streamId", 7},
                   {"correlationId", k + 1},
                   {"globalPid", nsys_gpid(pid)},
                   {"demangledName", db.string_id("triton_mm_autotune_" + std::to_string(k))},
                   {"shortName", db.string_id("triton_mm_autotune_" + std::to_string(k))}});
      }
    }
  }
  if (gpu)  // the data loader's range: a process without GPU work
    db.insert("NVTX_EVENTS", {{"start", 1'000'000},
                              {"end", 1'400'000},
                              {"eventType", 59},
                              {"globalTid", nsys_gtid(5010, 5011)},
                              {"text", "dataloader"}});
}

// ---- the independent reference ---------------------------------------------------------

struct Iv {
  int64_t s, e;
};
// |union(a) ∩ union(b)| (b empty: |union(a)|) by elementary segments: every boundary point,
// each segment tested against every interval. Quadratic and obviously right.
int64_t naive_measure(const std::vector<Iv>& a, const std::vector<Iv>* b) {
  std::vector<int64_t> pts;
  for (const auto& x : a) pts.push_back(x.s), pts.push_back(x.e);
  if (b)
    for (const auto& x : *b) pts.push_back(x.s), pts.push_back(x.e);
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  auto covered = [](const std::vector<Iv>& v, int64_t lo, int64_t hi) {
    for (const auto& x : v)
      if (x.s <= lo && hi <= x.e) return true;
    return false;
  };
  int64_t total = 0;
  for (size_t k = 0; k + 1 < pts.size(); ++k)
    if (covered(a, pts[k], pts[k + 1]) && (!b || covered(*b, pts[k], pts[k + 1]))) total += pts[k + 1] - pts[k];
  return total;
}

struct Expect {
  int64_t nccl_count = 0, nccl_sum = 0, comm = 0, compute = 0, overlap = 0;
};

std::vector<std::vector<std::string>> rows(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  std::vector<std::vector<std::string>> out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> r;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        r.emplace_back(t ? reinterpret_cast<const char*>(t) : "");
      }
      out.push_back(r);
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// Per (pid, device): the kernels of the file, NCCL ones by name, straight from SQL. pid from
// globalPid (bits 24..47), or, when the kernel table has none, from the launching runtime
// call of the same correlation id whose start is the latest before the kernel.
std::map<std::pair<int64_t, int64_t>, Expect> reference(const std::string& path, bool via_runtime) {
  const std::string pid_sql =
      via_runtime ? "(SELECT r.globalTid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                    "WHERE r.correlationId = k.correlationId AND r.start <= k.start ORDER BY r.start DESC LIMIT 1)"
                  : "k.globalPid / 16777216 % 16777216";
  auto kr = rows(path, "SELECT " + pid_sql +
                           ", k.deviceId, k.start, k.end, s.value LIKE '%nccl%' "
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName");
  std::map<std::pair<int64_t, int64_t>, std::pair<std::vector<Iv>, std::vector<Iv>>> iv;  // compute, comm
  std::map<std::pair<int64_t, int64_t>, Expect> out;
  for (const auto& r : kr) {
    const std::pair<int64_t, int64_t> key{std::stoll(r[0]), std::stoll(r[1])};
    const Iv x{std::stoll(r[2]), std::stoll(r[3])};
    auto& e = out[key];
    if (r[4] == "1") {
      iv[key].second.push_back(x);
      e.nccl_count++;
      e.nccl_sum += x.e - x.s;
    } else {
      iv[key].first.push_back(x);
    }
  }
  // Processes with only memcpy/memset are ranks too.
  for (const char* t : {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"})
    if (!via_runtime)
      for (const auto& r :
           rows(path, std::string("SELECT DISTINCT globalPid / 16777216 % 16777216, deviceId FROM ") + t))
        out[{std::stoll(r[0]), std::stoll(r[1])}];
  // When NCCL runs in the file, the ranks are the processes that run it (the definition the
  // importer documents): drop (pid, device) pairs of processes without an NCCL kernel.
  std::set<int64_t> nccl_pids;
  for (const auto& [key, e] : out)
    if (e.nccl_count > 0) nccl_pids.insert(key.first);
  if (!nccl_pids.empty())
    for (auto it = out.begin(); it != out.end();) it = nccl_pids.count(it->first.first) ? std::next(it) : out.erase(it);
  for (auto& [key, e] : out) {
    e.compute = naive_measure(iv[key].first, nullptr);
    e.comm = naive_measure(iv[key].second, nullptr);
    e.overlap = naive_measure(iv[key].second, &iv[key].first);
  }
  return out;
}

bool has_note(const prof::TraceModel& m, const std::string& s) {
  for (const auto& n : m.notes)
    if (n.find(s) != std::string::npos) return true;
  return false;
}

std::string all_notes(const prof::TraceModel& m) {
  std::string s;
  for (const auto& n : m.notes) s += "  " + n + "\n";
  return s;
}

// The importer's ranks, NCCL kernels and breakdown against the reference.
void expect_matches_reference(const prof::TraceModel& m, const std::map<std::pair<int64_t, int64_t>, Expect>& ref) {
  SCOPED_TRACE("notes:\n" + all_notes(m));
  ASSERT_EQ(m.ranks.size(), ref.size());
  auto s = prof::analyze(m);
  std::map<int32_t, const prof::StepBreakdown*> by_rank;
  for (const auto& b : s.steps) by_rank[b.rank] = &b;
  std::map<int32_t, std::pair<int64_t, int64_t>> nccl;  // rank -> count, sum
  for (const auto& r : m.ranges)
    if (r.is_kernel && prof::is_comm_range(m, r)) nccl[r.rank].first++, nccl[r.rank].second += r.end_ns - r.start_ns;
  int64_t comm_all = 0, overlap_all = 0;
  for (const auto& ri : m.ranks) {
    // device reads "cuda:<id> <name> (<process>)"
    const int64_t dev = std::stoll(ri.device.substr(5));
    auto it = ref.find({ri.pid, dev});
    ASSERT_NE(it, ref.end()) << "rank " << ri.rank << " pid " << ri.pid << " " << ri.device << " not in the file";
    const Expect& e = it->second;
    SCOPED_TRACE("pid " + std::to_string(ri.pid) + " device " + std::to_string(dev));
    EXPECT_EQ(nccl[ri.rank].first, e.nccl_count);
    EXPECT_EQ(nccl[ri.rank].second, e.nccl_sum);
    ASSERT_EQ(by_rank.count(ri.rank), 1u);
    EXPECT_TRUE(by_rank[ri.rank]->gpu);
    EXPECT_EQ(by_rank[ri.rank]->comm_ns, e.comm);
    EXPECT_EQ(by_rank[ri.rank]->compute_ns, e.compute);
    EXPECT_EQ(by_rank[ri.rank]->overlap_ns, e.overlap);
    comm_all += e.comm;
    overlap_all += e.overlap;
  }
  EXPECT_EQ(s.overall.comm_ns, comm_all);
  EXPECT_EQ(s.overall.overlap_ns, overlap_all);
}

}  // namespace

TEST(NsysReal, Schema3281TwoProcessesTwoGpusNcclCountTimeAndOverlapFromTheFile) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  write_export(path, Variant::Schema3281);
  auto ref = reference(path, false);
  // The scenario as built: 2 ranks, 12 NCCL kernels each, some overlapped, some not.
  ASSERT_EQ(ref.size(), 2u);
  for (const auto& [key, e] : ref) {
    EXPECT_EQ(e.nccl_count, 12);
    EXPECT_GT(e.overlap, 0);
    EXPECT_LT(e.overlap, e.comm);
  }
  auto m = prof::load_trace(path);
  EXPECT_EQ(m.format, "nsys");
  expect_matches_reference(m, ref);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].pid, 4242);
  EXPECT_EQ(m.ranks[0].device, "cuda:0 NVIDIA H100 80GB HBM3 (python3)");
  EXPECT_EQ(m.ranks[1].pid, 4243);
  EXPECT_EQ(m.ranks[1].device, "cuda:1 NVIDIA H100 80GB HBM3 (python3)");
  EXPECT_TRUE(has_note(m, "export schema 3.28.1")) << all_notes(m);
  EXPECT_FALSE(has_note(m, "newer than"));
  EXPECT_TRUE(has_note(m, "1 NVTX ranges of 1 process(es) without GPU work left out")) << all_notes(m);
  EXPECT_TRUE(has_note(m,
                       "2 process(es) with GPU work but no NCCL kernels (compile or autotune workers?) left out "
                       "with their 8 GPU rows"))
      << all_notes(m);
  // The autotune workers are in the file: 4 ranks would be the naive count.
  EXPECT_EQ(rows(path, "SELECT count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0], "4");
  // Correlation ids repeat across the two processes; each rank keeps its own launches.
  std::map<int32_t, int> calls;
  for (const auto& c : m.runtime) calls[c.rank]++;
  EXPECT_EQ(calls[0], 48);
  EXPECT_EQ(calls[1], 48);
}

TEST(NsysReal, UserGuideSchemaGivesTheSameFigures) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  write_export(path, Variant::UserGuide, "");
  auto ref = reference(path, false);
  auto m = prof::load_trace(path);
  expect_matches_reference(m, ref);
  EXPECT_FALSE(has_note(m, "export schema"));  // no META_DATA_EXPORT rows: nothing claimed
}

TEST(NsysReal, KernelTableWithoutGlobalPidIsTiedToProcessesThroughTheLaunches) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  write_export(path, Variant::UserGuideNoGlobalPid, "3.1.2");
  // The truth comes from the twin file with globalPid (same rows, same generator). A naive
  // per-row rule (the latest launch with the kernel's correlation id) gets some kernels
  // wrong, because both processes count correlation ids from 1: the reader must do better.
  write_export(tmp.path + "/twin.sqlite", Variant::UserGuide);
  auto truth = reference(tmp.path + "/twin.sqlite", false);
  auto naive = reference(path, true);
  EXPECT_NE(naive.size(), truth.size());  // the per-row rule splits a process across devices
  prof::TraceModel m;
  ASSERT_NO_THROW(m = prof::load_trace(path));
  expect_matches_reference(m, truth);
  EXPECT_TRUE(has_note(m, "has no globalPid column")) << all_notes(m);
  EXPECT_TRUE(has_note(m, "export schema 3.1.2")) << all_notes(m);
}

TEST(NsysReal, NewerSchemaAndMissingOptionalTablesOpenWithNotes) {
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  write_export(path, Variant::Schema3281, "4.0.0");
  {
    Db db(path);
    db.exec("DROP TABLE PROCESSES; DROP TABLE ThreadNames; DROP TABLE TARGET_INFO_GPU");
  }
  auto ref = reference(path, false);
  prof::TraceModel m;
  ASSERT_NO_THROW(m = prof::load_trace(path));
  expect_matches_reference(m, ref);
  EXPECT_TRUE(has_note(m, "export schema 4.0.0 (newer than")) << all_notes(m);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].device, "cuda:0");  // no GPU or process names without those tables
}

TEST(NsysReal, ExportWithCudaCallsButNoKernelTableOpensWithANote) {
  // Exports where CUDA activity tracing was unavailable hold CUPTI_ACTIVITY_KIND_RUNTIME but no
  // kernel, memcpy, memset or NVTX table (seen in real 2023.3 exports from a laptop GPU).
  TempDir tmp;
  const std::string path = tmp.path + "/report.sqlite";
  write_export(path, Variant::RuntimeOnly);
  prof::TraceModel m;
  ASSERT_NO_THROW(m = prof::load_trace(path));
  EXPECT_TRUE(has_note(m, "CUDA API calls only")) << all_notes(m);
  auto pids = rows(path, "SELECT DISTINCT globalTid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY 1");
  ASSERT_EQ(m.ranks.size(), pids.size());
  for (size_t k = 0; k < pids.size(); ++k) {
    EXPECT_EQ(m.ranks[k].pid, std::stoll(pids[k][0]));
    EXPECT_EQ(m.ranks[k].device, "cuda (no GPU activity recorded) (python3)");
  }
  EXPECT_EQ(static_cast<int64_t>(m.runtime.size()),
            std::stoll(rows(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]));
}

namespace {
// The real 2-GPU exports in ../shared/realdata (its README: MIT, read in place, never copied).
const std::string kRealData = std::string(ULYSSES_SOURCE_DIR) + "/../shared/realdata";

// Every NCCL kernel of each device of `path`, and the part of their time that other kernels of
// the same device overlap, by SQL of this test's own (the importer is not used).
struct DeviceNccl {
  int64_t count = 0, sum_ns = 0, overlap_ns = 0;
};
std::map<int64_t, DeviceNccl> nccl_by_device(const std::string& path) {
  std::map<int64_t, DeviceNccl> out;
  for (const auto& r : rows(path,
                            "SELECT k.deviceId, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                            "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'ncclDevKernel%' "
                            "GROUP BY k.deviceId"))
    out[std::stoll(r[0])] = {std::stoll(r[1]), std::stoll(r[2]), 0};
  // Overlap: the union, over NCCL kernels, of their intersection with other kernels' spans.
  for (auto& [dev, d] : out) {
    const std::string where = "deviceId = " + std::to_string(dev);
    auto ivs = [&](const std::string& cond) {
      std::vector<Iv> v;
      for (const auto& r : rows(path,
                                "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON "
                                "s.id = k.shortName WHERE k." +
                                    where + " AND " + cond))
        v.push_back({std::stoll(r[0]), std::stoll(r[1])});
      return v;
    };
    auto comm = ivs("s.value LIKE 'ncclDevKernel%'");
    auto other = ivs("s.value NOT LIKE 'ncclDevKernel%'");
    d.overlap_ns = naive_measure(comm, &other);
  }
  return out;
}

std::string run_summary_json(const std::string& path, const std::string& cache_home) {
  const std::string cmd = "XDG_CACHE_HOME='" + cache_home + "' '" + std::string(ULYSSES_TRACE_BIN) +
                          "' summary --json '" + path + "' 2>/dev/null";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    EXPECT_EQ(::pclose(f), 0) << cmd;
  }
  return out;
}
}  // namespace

// Both real exports open as 2 ranks, each with its CUDA device, and the importer's kernels,
// NCCL figures and breakdown equal the SQL reference of this file.
TEST(NsysReal, SharedRealExportsOpenAsTwoRanksWithTheirDevices) {
  for (const char* name : {"h100_2gpu_1s.sqlite", "mfu_2gpu_before.sqlite"}) {
    const std::string path = kRealData + "/" + name;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (../shared/realdata, see its README)";
    SCOPED_TRACE(path);
    auto ref = reference(path, false);
    auto m = prof::load_trace(path);
    ASSERT_EQ(m.ranks.size(), 2u) << all_notes(m);
    std::set<std::string> devices;
    for (const auto& r : m.ranks) {
      EXPECT_EQ(r.device.rfind("cuda:", 0), 0u) << r.device;
      devices.insert(r.device.substr(0, 6));
    }
    EXPECT_EQ(devices, (std::set<std::string>{"cuda:0", "cuda:1"}));
    expect_matches_reference(m, ref);
  }
}

// mfu_2gpu_before: each device's NCCL kernels (count, summed time, time overlapped by other
// kernels) recounted by SQL equal the README's hand figures and `ulysses-trace summary --json`
// (per rank: comm_ns, overlap_ns). The summary leaves the export's folder as it was.
TEST(NsysReal, SharedMfuExportNcclFiguresEqualSummaryJson) {
  const std::string path = kRealData + "/mfu_2gpu_before.sqlite";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (../shared/realdata, see its README)";
  const auto nccl = nccl_by_device(path);
  ASSERT_EQ(nccl.size(), 2u);
  // The README's figures: device 0 33 kernels, 17.17 ms; device 1 33 kernels, 8.23 ms; no overlap.
  EXPECT_EQ(nccl.at(0).count, 33);
  EXPECT_NEAR(nccl.at(0).sum_ns / 1e6, 17.17, 0.005);
  EXPECT_EQ(nccl.at(1).count, 33);
  EXPECT_NEAR(nccl.at(1).sum_ns / 1e6, 8.23, 0.005);
  EXPECT_EQ(nccl.at(0).overlap_ns, 0);
  EXPECT_EQ(nccl.at(1).overlap_ns, 0);

  auto m = prof::load_trace(path);
  ASSERT_EQ(m.ranks.size(), 2u);
#ifdef ULYSSES_TRACE_BIN
  std::set<std::string> before;
  for (const auto& f : std::filesystem::directory_iterator(kRealData)) before.insert(f.path().filename().string());
  TempDir cache;
  const auto j = nlohmann::json::parse(run_summary_json(path, cache.path), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (const auto& jr : j["ranks"]) {
    const int rank = jr["rank"].get<int>();
    ASSERT_LT(static_cast<size_t>(rank), m.ranks.size());
    const int64_t dev = std::stoll(m.ranks[static_cast<size_t>(rank)].device.substr(5));
    SCOPED_TRACE("rank " + std::to_string(rank) + " device " + std::to_string(dev));
    // Every NCCL kernel is communication and nothing else is (SendRecv kernels do not overlap
    // each other here), so the rank's comm time is the summed NCCL time.
    EXPECT_EQ(jr["comm_ns"].get<int64_t>(), nccl.at(dev).sum_ns);
    EXPECT_EQ(jr["overlap_ns"].get<int64_t>(), nccl.at(dev).overlap_ns);
  }
  std::set<std::string> after;
  for (const auto& f : std::filesystem::directory_iterator(kRealData)) after.insert(f.path().filename().string());
  EXPECT_EQ(before, after) << "summary wrote next to a user's export";
#endif
}

TEST(NsysReal, RealExportsInAFolder) {
  // Every real `nsys export --type sqlite` file in ULYSSES_NSYS_EXPORTS (default: the shared
  // ../shared/realdata) against the same reference; at least one must have been checked.
  const char* env = std::getenv("ULYSSES_NSYS_EXPORTS");
  const std::string dir = env && *env ? std::string(env) : kRealData;
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " is absent (set ULYSSES_NSYS_EXPORTS)";
  int checked = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".sqlite") continue;
    SCOPED_TRACE(f.path().string());
    const bool gpid_col = !rows(f.path().string(),
                                "SELECT 1 FROM pragma_table_info('CUPTI_ACTIVITY_KIND_KERNEL') "
                                "WHERE name = 'globalPid'")
                               .empty();
    if (!gpid_col) continue;  // no kernel table, or no globalPid: no independent truth to compare with
    auto ref = reference(f.path().string(), false);
    if (ref.empty()) continue;  // no GPU activity: nothing to compare
    auto m = prof::load_trace(f.path().string());
    expect_matches_reference(m, ref);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no export in " << dir << " had GPU kernels to compare";
  std::printf("checked %d real export(s) in %s\n", checked, dir.c_str());
}
