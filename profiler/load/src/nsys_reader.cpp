// Reader of `nsys export --type sqlite` files (Nsight Systems) as real exports are: one rank
// per process that owns GPU work (per process and device when one process drives several;
// when NCCL kernels are in the file, only processes that run them: autotune workers are not ranks),
// with its device and the rank NCCL states in its ncclCommInitRank payload when the export
// carries it; NVTX push/pop and start/end ranges of those processes per thread (PyTorch's
// "aten::mm, seq = 12, op_id = 34, sizes = ..." names grouped by operator); kernels, memcpy
// and memset per (device, stream); CUDA runtime calls. Columns and tables that differ
// across Nsight Systems versions (kernel table without globalPid, NVTX without textId or
// jsonText, no StringIds, no TARGET_INFO_GPU, ...) degrade with a note in TraceModel::notes
// instead of refusing the file. Part of the trace loader (see trace_loading.hpp).
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/nsys_ids.hpp"

namespace ulysses::prof::detail {

// "aten::mm, seq = 12, op_id = 34, sizes = [[2, 3]]" -> "aten::mm" (torch.autograd.profiler.emit_nvtx
// names every call differently; the operator is what a table should group by).
std::string group_pytorch_name(const std::string& s) {
  size_t cut = std::string::npos;
  for (const char* tag : {", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = "})
    cut = std::min(cut, s.find(tag));
  return cut == std::string::npos || cut == 0 ? s : s.substr(0, cut);
}

namespace {

// One GPU activity row before its rank is known.
struct GpuRow {
  int64_t start = 0, end = 0, device = 0, context = 0, stream = 0, pid = -1, bytes = 0, correlation = 0;
  int64_t guess = -1;  // pid of the runtime call that most likely launched it (no globalPid)
  int32_t name_id = 0;
};

// Rows of the file's tables left out or changed, per (table, reason): how many, and the first
// one's value, so that each gets one note naming the table, the reason and where to look.
struct RowTally {
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, std::string>> rows;
  void add(const std::string& table, const std::string& reason, const std::string& example = {}) {
    auto& e = rows[{table, reason}];
    if (e.first++ == 0) e.second = example;
  }
  template <typename Note>
  void to_notes(const Note& note) const {
    for (const auto& [key, v] : rows)
      note(key.first + ": " + std::to_string(v.first) + " rows " + key.second +
           (v.second.empty() ? std::string() : " (first: " + v.second + ")"));
  }
};

// The whole number in column `col` of the statement's current row. SQLite keeps '12' written
// to an INTEGER column as the number 12, so text there ('abc') is no number: read as one it
// would be 0 (a kernel at 0 ns). Returns false for NULL (*fault empty) and for text, a fraction or a blob
// (*fault: the reason, *example: the column and its value for the note).
bool int_cell(sqlite3_stmt* s, int col, int64_t* out, std::string* fault, std::string* example) {
  fault->clear();
  const int type = sqlite3_column_type(s, col);
  if (type == SQLITE_INTEGER) {
    *out = sqlite3_column_int64(s, col);
    return true;
  }
  if (type == SQLITE_NULL) return false;
  const char* column = sqlite3_column_name(s, col);  // before the fault, which names it
  std::string value;
  if (type == SQLITE_TEXT) {
    *fault = std::string(column ? column : "?") + " is text";
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
    value.assign(t ? t : "", std::min<size_t>(40, static_cast<size_t>(sqlite3_column_bytes(s, col))));
    for (char& c : value)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    value = "'" + value + "'";
  } else if (type == SQLITE_FLOAT) {
    *fault = std::string(column ? column : "?") + " is a fraction";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(s, col));
    value = buf;
  } else {
    *fault = std::string(column ? column : "?") + " is a blob";
    value = "(" + std::to_string(sqlite3_column_bytes(s, col)) + " bytes)";
  }
  *example = std::string(column ? column : "?") + " " + value;
  return false;
}

// What read_nsys_file reads from one export, shared by its steps (one per comment block of the
// reader: version, strings, GPU rows, their processes, the ranks, NCCL ranks, NVTX, runtime calls).
struct NsysFile {
  Builder& b;
  sql::Db& db;
  const std::string& path;
  int32_t file_index;
  const LoadOptions& opts;
  TraceModel& m;
  std::string fname;
  std::unordered_map<int64_t, int32_t> sid;  // string id of the file -> the model's
  std::unordered_map<int64_t, std::string> thread_names;
  bool have_runtime = false;
  // Correlation ids count per process, so several processes share them: the candidates of
  // an id are (launch start, pid), and a row goes to the latest launch before it.
  std::unordered_map<int64_t, std::vector<std::pair<int64_t, int64_t>>> launches_of_corr;
  bool corr_loaded = false;
  std::vector<GpuRow> rows;
  RowTally tally;                                              // rows left out or changed, per table and reason
  std::map<std::pair<int64_t, int64_t>, int32_t> rank_of_key;  // (pid, device) -> provisional rank
  bool have_nvtx = false, nvtx_gtid = false;
  bool cuda_calls_only = false;  // ranks are processes with CUDA API calls and no GPU rows
  std::map<int64_t, int32_t> first_rank_of_pid;
  int32_t first_rank = 0;

  NsysFile(Builder& b_, sql::Db& db_, const std::string& path_, int32_t file_index_, const LoadOptions& opts_)
      : b(b_),
        db(db_),
        path(path_),
        file_index(file_index_),
        opts(opts_),
        m(b_.m),
        fname(path_.substr(path_.find_last_of('/') == std::string::npos ? 0 : path_.find_last_of('/') + 1)) {}

  void note(const std::string& s) { m.notes.push_back(fname + ": " + s); }
  int32_t str(int64_t id) {
    auto it = sid.find(id);
    return it == sid.end() ? b.intern("?") : it->second;
  }
  void load_corr() {
    if (corr_loaded || !have_runtime) return;
    corr_loaded = true;
    sql::Stmt st(db, "SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME");
    while (st.step()) launches_of_corr[st.i64(0)].emplace_back(st.i64(2), pid_of_global_id(st.i64(1)));
  }
  int64_t launcher_pid(int64_t corr, int64_t start) const {
    auto it = launches_of_corr.find(corr);
    if (it == launches_of_corr.end()) return -1;
    int64_t best = INT64_MIN, pid = -1;
    for (const auto& [t, p] : it->second)
      if (t <= start && t > best) best = t, pid = p;
    return pid;
  }
  int32_t rank_of_pid(int64_t pid) const {
    auto it = first_rank_of_pid.find(pid);
    return it == first_rank_of_pid.end() ? -1 : it->second;
  }
};

// One GPU activity table: kernels (fixed_name -1: the kernel's own name), memcpy or memset.
struct NsysTable {
  const char* table;
  int32_t fixed_name;  // -1: the kernel's own name
};

// Which Nsight Systems wrote the file: META_DATA_EXPORT (EXPORT_META_DATA before 2023.2 or
// so). The reader goes by columns, not by version; the note tells the user what was read.
void note_export_version(NsysFile& f) {
  for (const char* meta : {"META_DATA_EXPORT", "EXPORT_META_DATA"}) {
    if (!f.db.has_table(meta) || !f.db.has_column(meta, "name") || !f.db.has_column(meta, "value")) continue;
    std::string product, schema;
    sql::Stmt st(f.db, std::string("SELECT name, value FROM ") + meta +
                           " WHERE name IN ('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')");
    while (st.step()) (st.text(0) == "EXPORT_PRODUCT_VERSION" ? product : schema) = st.text(1);
    if (!product.empty() || !schema.empty()) {
      std::string v = "Nsight Systems " + (product.empty() ? std::string("?") : product) + ", export schema " +
                      (schema.empty() ? std::string("?") : schema);
      const int major = schema.empty() ? 0 : std::atoi(schema.c_str());
      if (major > 3) v += " (newer than the 3.x schemas this reader knows: missing columns degrade with notes)";
      f.note(v);
    }
    break;
  }
}

// Strings used by this file, mapped into the model's table (ids are per file), and the
// threads' names.
void read_nsys_strings(NsysFile& f) {
  if (f.db.has_table("StringIds")) {
    sql::Stmt st(f.db, "SELECT id, value FROM StringIds");
    while (st.step()) f.sid[st.i64(0)] = f.b.intern(st.text(1));
  } else {
    f.note("no StringIds table: names stored as ids show as '?'");
  }
  if (f.db.has_table("ThreadNames") && f.db.has_column("ThreadNames", "nameId") &&
      f.db.has_column("ThreadNames", "globalTid")) {
    sql::Stmt st(f.db, "SELECT nameId, globalTid FROM ThreadNames");
    while (st.step()) f.thread_names[st.i64(1)] = f.m.strings[f.str(st.i64(0))];
  }
}

// The SELECT of one GPU table: the columns it lacks read as constants, each with its note.
std::string gpu_table_sql(NsysFile& f, const NsysTable& t) {
  const std::string tn = t.table;
  auto has = [&](const char* c) { return f.db.has_column(tn, c); };
  std::string name_sql = "NULL";
  if (t.fixed_name < 0) {
    if (has("shortName") && has("demangledName"))
      name_sql = "COALESCE(shortName, demangledName)";
    else if (has("shortName"))
      name_sql = "shortName";
    else if (has("demangledName"))
      name_sql = "demangledName";
    else if (has("name"))
      name_sql = "name";
    else
      f.note(tn + " has no kernel name column (shortName, demangledName): kernels are unnamed");
  }
  std::string pid_sql = "NULL";
  if (has("globalPid")) {
    pid_sql = "globalPid";
  } else if (has("correlationId") && f.have_runtime) {
    f.load_corr();
    f.note(tn +
           " has no globalPid column: its rows are mapped to processes through the CUDA runtime calls "
           "with the same correlationId");
  } else {
    f.note(tn + " has no globalPid column and no CUDA runtime calls to map it: one rank per device");
  }
  const std::string sql = "SELECT start, end, " + std::string(has("deviceId") ? "deviceId" : "0") + ", " +
                          (has("contextId") ? "contextId" : "0") + " AS ctx, " + (has("streamId") ? "streamId" : "0") +
                          ", " + pid_sql + ", " + name_sql + ", " +
                          (t.fixed_name >= 0 && has("bytes") ? "bytes" : "0") + ", " +
                          (has("correlationId") ? "correlationId" : "0") + " FROM " + tn;
  if (!has("deviceId")) f.note(tn + " has no deviceId column: device 0 assumed");
  return sql;
}

// One row of a GPU table into *out; false (the reason tallied) when the row is left out.
bool gpu_row(NsysFile& f, const NsysTable& t, const std::string& tn, sqlite3_stmt* s, bool via_corr, GpuRow* out) {
  GpuRow& r = *out;
  std::string fault, example;
  // Every number of the row is one, or the row is left out (counted per reason).
  int64_t v[9] = {};
  bool null[9] = {};
  for (int c : {0, 1, 2, 3, 4, 5, 7, 8}) {
    if (int_cell(s, c, &v[c], &fault, &example)) continue;
    if (!fault.empty()) {
      f.tally.add(tn, "dropped: " + fault, example);
      return false;
    }
    null[c] = true;
  }
  if (null[0] || null[1]) {
    f.tally.add(tn, "dropped: start or end is NULL");
    return false;
  }
  r.start = v[0];
  r.end = v[1];
  if (r.end < r.start) {
    f.tally.add(tn, "dropped: end before start", "start " + std::to_string(r.start) + ", end " + std::to_string(r.end));
    return false;
  }
  if (time_out_of_range(r.start) || time_out_of_range(r.end)) {
    f.tally.add(tn, "dropped: time beyond +-2^62 ns (146 years)",
                "start " + std::to_string(r.start) + ", end " + std::to_string(r.end));
    return false;
  }
  r.device = null[2] ? int64_t{-1} : v[2];
  if (gpu_device_id(r.device) != r.device) {
    f.tally.add(tn, "kept as device unknown (\"gpu ?\"): deviceId below 0, past 2^20 or NULL",
                null[2] ? std::string("deviceId NULL") : "deviceId " + std::to_string(r.device));
    r.device = kUnknownDevice;
  }
  r.context = v[3];
  r.stream = v[4];
  r.correlation = v[8];
  if (!null[5]) {
    r.pid = pid_of_global_id(v[5]);
  } else if (via_corr) {
    r.guess = f.launcher_pid(r.correlation, r.start);
  }
  r.name_id = t.fixed_name >= 0                             ? t.fixed_name
              : sqlite3_column_type(s, 6) == SQLITE_INTEGER ? f.str(sqlite3_column_int64(s, 6))
              : sqlite3_column_type(s, 6) == SQLITE_TEXT
                  ? f.b.intern(reinterpret_cast<const char*>(sqlite3_column_text(s, 6)))
                  : f.b.intern("kernel");
  r.bytes = v[7];
  return true;
}

// GPU activity rows: kernels, memcpy, memset.
void read_gpu_rows(NsysFile& f) {
  if (!f.opts.gpu_activity) return;
  const NsysTable tables[] = {{"CUPTI_ACTIVITY_KIND_KERNEL", -1},
                              {"CUPTI_ACTIVITY_KIND_MEMCPY", f.b.intern("[CUDA memcpy]")},
                              {"CUPTI_ACTIVITY_KIND_MEMSET", f.b.intern("[CUDA memset]")}};
  for (const auto& t : tables) {
    if (!f.db.has_table(t.table)) continue;
    const std::string tn = t.table;
    if (!f.db.has_column(tn, "start") || !f.db.has_column(tn, "end")) {
      f.note(tn + " has no start/end columns: skipped");
      continue;
    }
    const bool has_pid = f.db.has_column(tn, "globalPid");
    sql::Stmt st(f.db, gpu_table_sql(f, t));
    sqlite3_stmt* s = st.get();
    const bool via_corr = !has_pid && f.corr_loaded;
    while (st.step()) {
      GpuRow r;
      if (gpu_row(f, t, tn, s, via_corr, &r)) f.rows.push_back(r);
    }
  }
}

// Rows without globalPid: a CUDA context belongs to one process, so each (device,
// context) goes to the process whose launches precede most of its rows (greedy, most
// votes first); failing that, the only process with work on the device, else a rank of
// its own with an unknown pid.
void assign_rows_without_pid(NsysFile& f) {
  auto& rows = f.rows;
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, int64_t>> votes;  // (dev, ctx) -> pid -> rows
  for (const auto& r : rows)
    if (r.pid < 0 && r.guess >= 0) votes[{r.device, r.context}][r.guess]++;
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> cand;  // (-votes, dev, ctx, pid)
  for (const auto& [key, pv] : votes)
    for (const auto& [pid, n] : pv) cand.emplace_back(-n, key.first, key.second, pid);
  std::sort(cand.begin(), cand.end());
  // Pass 1: one context per process (the usual one process per GPU); pass 2: the contexts
  // left go to a process with work on other devices (one process driving several GPUs).
  std::map<std::pair<int64_t, int64_t>, int64_t> pid_of_ctx;
  std::set<int64_t> used;
  std::set<std::pair<int64_t, int64_t>> taken;  // (pid, dev)
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& [n, dev, ctx, pid] : cand) {
      if (pid_of_ctx.count({dev, ctx}) || taken.count({pid, dev}) || (pass == 0 && used.count(pid))) continue;
      pid_of_ctx[{dev, ctx}] = pid;
      taken.insert({pid, dev});
      used.insert(pid);
    }
  std::map<int64_t, std::set<int64_t>> pids_of_dev;
  for (auto& r : rows) {
    if (r.pid >= 0) continue;
    auto it = pid_of_ctx.find({r.device, r.context});
    if (it != pid_of_ctx.end()) r.pid = it->second;
  }
  for (const auto& r : rows)
    if (r.pid >= 0) pids_of_dev[r.device].insert(r.pid);
  int64_t unknown = 0;
  for (auto& r : rows) {
    if (r.pid >= 0) continue;
    if (pids_of_dev[r.device].size() == 1) {
      r.pid = *pids_of_dev[r.device].begin();
    } else {
      r.pid = -1 - r.context;  // process unknown: one rank per (device, context)
      ++unknown;
    }
  }
  if (unknown > 0)
    f.note(std::to_string(unknown) + " GPU rows could not be tied to a process: one rank per device and context");
}

// When NCCL runs in this file, the ranks are the processes that run it: other processes
// with GPU work (Triton autotune or torch.compile workers, a benchmark in a subprocess)
// are not ranks of the job and are left out with a note.
void drop_processes_without_nccl(NsysFile& f) {
  auto& rows = f.rows;
  std::set<int64_t> nccl_pids;
  for (const auto& r : rows) {
    std::string n = f.m.strings[static_cast<size_t>(r.name_id)];
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    if (n.find("nccl") != std::string::npos) nccl_pids.insert(r.pid);
  }
  if (nccl_pids.empty()) return;
  std::set<int64_t> helpers;
  const size_t before = rows.size();
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const GpuRow& r) {
                              if (nccl_pids.count(r.pid)) return false;
                              helpers.insert(r.pid);
                              return true;
                            }),
             rows.end());
  if (!helpers.empty())
    f.note(std::to_string(helpers.size()) +
           " process(es) with GPU work but no NCCL kernels (compile or autotune "
           "workers?) left out with their " +
           std::to_string(before - rows.size()) + " GPU rows");
}

// No GPU work: a CPU-only capture; ranks are the processes with NVTX ranges, else (an
// export with CUDA API calls but no kernel table, as captures where CUPTI activity
// tracing is unavailable give) the processes that called CUDA.
void ranks_without_gpu_work(NsysFile& f) {
  auto& rank_of_key = f.rank_of_key;
  const std::string pid_of = " / " + std::to_string(kGlobalIdShift) + " % " + std::to_string(kGlobalIdShift);
  if (f.nvtx_gtid) {
    sql::Stmt st(f.db, "SELECT DISTINCT globalTid" + pid_of +
                           " FROM NVTX_EVENTS WHERE globalTid IS NOT NULL "
                           "AND eventType IN (59, 60)");
    while (st.step()) rank_of_key.emplace(std::make_pair(st.i64(0), int64_t{-1}), 0);
  }
  if (rank_of_key.empty() && f.have_runtime && f.opts.gpu_activity) {
    f.cuda_calls_only = true;
    sql::Stmt st(
        f.db, "SELECT DISTINCT globalTid" + pid_of + " FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid IS NOT NULL");
    while (st.step()) rank_of_key.emplace(std::make_pair(st.i64(0), int64_t{-1}), 0);
    if (!rank_of_key.empty())
      f.note(
          "no kernel, memcpy or memset rows: the capture holds CUDA API calls only (ranks are the processes "
          "that made them); re-capture with `nsys profile -t cuda` on a GPU where CUDA activity tracing works");
  } else if (f.opts.gpu_activity) {
    f.note("no GPU activity: ranks are the processes with NVTX ranges, compute is host ranges");
  }
  if (rank_of_key.empty()) rank_of_key.emplace(std::make_pair(int64_t{-1}, int64_t{-1}), 0);
}

// The ranks: one per (process, device) with GPU rows, named after the GPU and the process.
void make_ranks(NsysFile& f) {
  auto& db = f.db;
  for (const auto& r : f.rows) f.rank_of_key.emplace(std::make_pair(r.pid, r.device), 0);

  std::map<int64_t, std::string> gpu_name;
  if (db.has_table("TARGET_INFO_GPU") && db.has_column("TARGET_INFO_GPU", "id") &&
      db.has_column("TARGET_INFO_GPU", "name")) {
    sql::Stmt st(db, "SELECT id, name FROM TARGET_INFO_GPU");
    while (st.step()) gpu_name[st.i64(0)] = st.text(1);
  }
  std::map<int64_t, std::string> process_name;
  if (db.has_table("PROCESSES") && db.has_column("PROCESSES", "pid") && db.has_column("PROCESSES", "name")) {
    sql::Stmt st(db, "SELECT pid, name FROM PROCESSES WHERE pid IS NOT NULL");
    while (st.step()) process_name[st.i64(0)] = st.text(1);
  }

  f.have_nvtx = db.has_table("NVTX_EVENTS") && db.has_column("NVTX_EVENTS", "start") &&
                db.has_column("NVTX_EVENTS", "end") && db.has_column("NVTX_EVENTS", "eventType");
  f.nvtx_gtid = f.have_nvtx && db.has_column("NVTX_EVENTS", "globalTid");
  if (f.have_nvtx && !f.nvtx_gtid)
    f.note("NVTX_EVENTS has no globalTid column: NVTX ranges are given to the first rank");
  if (f.rank_of_key.empty()) ranks_without_gpu_work(f);
  for (auto& [key, rank] : f.rank_of_key) {
    rank = static_cast<int32_t>(f.m.ranks.size());
    RankInfo ri;
    ri.rank = rank;
    ri.pid = key.first >= 0 ? key.first : -1;  // -1: process unknown
    if (key.second >= 0) {
      auto g = gpu_name.find(key.second);
      ri.device =
          gpu_rank_device(key.second) + (g != gpu_name.end() ? " " + Builder::capped(g->second) : std::string());
    } else {
      ri.device = f.cuda_calls_only ? "cuda (no GPU activity recorded)" : "cpu";
    }
    auto pn = process_name.find(key.first);  // "python3" when PROCESSES names it
    if (pn != process_name.end() && !pn->second.empty()) ri.device += " (" + pn->second + ")";
    f.m.ranks.push_back(ri);
    ForeignRank fr;
    fr.provisional = rank;
    fr.file_index = f.file_index;
    fr.pid = key.first;
    fr.device = key.second;
    f.b.foreign.push_back(fr);
    f.first_rank_of_pid.emplace(key.first, rank);  // lowest device first (map order)
  }
  if (f.rank_of_key.size() == 1) {
    // One rank per file: the file name may say which ("rank3.sqlite", "report_rank_3.sqlite").
    f.b.foreign.back().name_hint = rank_from_file_name(f.fname);
  }
  f.first_rank = f.rank_of_key.begin()->second;
}

// NCCL's ncclCommInitRank NVTX payload ({"Rank": r, "No. of ranks": n, "CUDA device": d},
// exported as jsonText by recent versions): the rank each process holds in its largest
// communicator.
void read_nccl_rank_hints(NsysFile& f) {
  if (!f.nvtx_gtid || !f.db.has_column("NVTX_EVENTS", "jsonText")) return;
  sql::Stmt st(f.db, "SELECT globalTid, jsonText FROM NVTX_EVENTS WHERE jsonText LIKE '%\"Rank\"%'");
  std::map<int64_t, std::pair<int64_t, int64_t>> best;  // pid -> (nranks, rank)
  while (st.step()) {
    auto j = nlohmann::json::parse(st.text(1), nullptr, false);
    if (!j.is_object() || !j.contains("Rank") || !j["Rank"].is_number_integer()) continue;
    const int64_t n =
        j.contains("No. of ranks") && j["No. of ranks"].is_number_integer() ? j["No. of ranks"].get<int64_t>() : 0;
    const int64_t pid = pid_of_global_id(st.i64(0));
    auto it = best.find(pid);
    if (it == best.end() || n > it->second.first) best[pid] = {n, j["Rank"].get<int64_t>()};
  }
  for (auto& fr : f.b.foreign) {
    auto it = best.find(fr.pid);
    if (it != best.end() && fr.file_index == f.file_index && f.first_rank_of_pid[fr.pid] == fr.provisional)
      fr.hint = it->second.second;
  }
}

// GPU rows to ranges, one lane per (device, stream) of each rank.
void gpu_rows_to_ranges(NsysFile& f) {
  for (const auto& g : f.rows) {
    TraceRange r;
    r.start_ns = g.start;
    r.end_ns = g.end;
    r.name_id = g.name_id;
    r.is_kernel = true;
    RangeExtra x;
    x.bytes_sent = g.bytes;
    x.correlation = static_cast<uint32_t>(g.correlation);
    if (!x.empty()) f.m.extra_for(r) = x;
    r.rank = f.rank_of_key.at({g.pid, g.device});
    r.lane = f.b.source(r.rank, LaneKind::CudaStream, stream_lane_key(g.device, g.stream),
                        gpu_lane_label(g.device) + " stream " + std::to_string(g.stream), 3);
    f.m.ranges.push_back(r);
  }
}

// The first `n` integer cells of the current row into v/null; false (the fault tallied under
// `tn`) when one is text, a fraction or a blob.
bool int_cells(NsysFile& f, const std::string& tn, sqlite3_stmt* s, int n, int64_t* v, bool* null) {
  std::string fault, example;
  for (int c = 0; c < n; ++c) {
    if (int_cell(s, c, &v[c], &fault, &example)) continue;
    null[c] = fault.empty();
    if (!fault.empty()) {
      f.tally.add(tn, "dropped: " + fault, example);
      return false;
    }
  }
  return true;
}

// Start and end of a row that has both: false (tallied) when the end is before the start or
// either is out of range.
bool times_in_order(NsysFile& f, const std::string& tn, int64_t start, int64_t end) {
  if (end < start) {
    f.tally.add(tn, "dropped: end before start", "start " + std::to_string(start) + ", end " + std::to_string(end));
    return false;
  }
  if (time_out_of_range(start) || time_out_of_range(end)) {
    f.tally.add(tn, "dropped: time beyond +-2^62 ns (146 years)",
                "start " + std::to_string(start) + ", end " + std::to_string(end));
    return false;
  }
  return true;
}

// The host-thread lane of an NVTX thread (global tid), -1 when its process is no rank's.
int32_t nvtx_lane(NsysFile& f, int64_t gtid) {
  const int64_t pid = f.nvtx_gtid ? pid_of_global_id(gtid) : -1;
  int32_t rank = f.nvtx_gtid ? f.rank_of_pid(pid) : f.first_rank;
  if (rank < 0 && f.rank_of_key.size() == 1 && f.rank_of_key.begin()->first.first < 0) rank = f.first_rank;
  if (rank < 0) return -1;
  const int64_t tid = tid_of_global_tid(gtid);
  auto tn = f.thread_names.find(gtid);
  std::string name = tn != f.thread_names.end() ? tn->second : "thread " + std::to_string(tid);
  return f.b.source(rank, LaneKind::HostThread, tid, name, name == "main" || tid == pid ? 0 : 1);
}

// NVTX ranges of the ranks' processes, one source lane per thread.
void read_nvtx_ranges(NsysFile& f) {
  if (!f.have_nvtx) return;
  TraceModel& m = f.m;
  const bool has_text = f.db.has_column("NVTX_EVENTS", "text");
  const bool has_text_id = f.db.has_column("NVTX_EVENTS", "textId");
  if (!has_text && !has_text_id) f.note("NVTX_EVENTS has neither text nor textId: NVTX ranges are unnamed");
  sql::Stmt st(f.db, std::string("SELECT start, end, ") + (f.nvtx_gtid ? "globalTid" : "0") + ", " +
                         (has_text_id ? "textId" : "NULL") + ", " + (has_text ? "text" : "NULL") +
                         " FROM NVTX_EVENTS WHERE eventType IN (59, 60) ORDER BY rowid");
  sqlite3_stmt* s = st.get();
  std::unordered_map<int64_t, int32_t> lane_of_gtid;
  std::set<int64_t> skipped_pids;
  int64_t skipped = 0;
  const std::string tn = "NVTX_EVENTS";
  while (st.step()) {
    TraceRange r;
    int64_t v[3] = {};
    bool null[3] = {};
    if (!int_cells(f, tn, s, 3, v, null)) continue;
    if (null[0]) {
      f.tally.add(tn, "dropped: start is NULL");
      continue;
    }
    if (null[1]) {  // a push without its pop, a start without its end
      f.tally.add(tn, "dropped: end is NULL (range still open when the capture stopped)");
      continue;
    }
    r.start_ns = v[0];
    r.end_ns = v[1];
    if (!times_in_order(f, tn, r.start_ns, r.end_ns)) continue;
    const int64_t gtid = v[2];
    auto it = lane_of_gtid.find(gtid);
    if (it == lane_of_gtid.end()) it = lane_of_gtid.emplace(gtid, nvtx_lane(f, gtid)).first;
    if (it->second < 0) {
      ++skipped;
      skipped_pids.insert(pid_of_global_id(gtid));
      continue;
    }
    std::string name;
    if (sqlite3_column_type(s, 3) != SQLITE_NULL) {
      name = m.strings[f.str(sqlite3_column_int64(s, 3))];
    } else if (const unsigned char* t = sqlite3_column_text(s, 4)) {
      name.assign(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(s, 4)));
    }
    r.name_id = f.b.intern(group_pytorch_name(name));
    Phase p;
    if (phase_from_name(m.strings[r.name_id], &p)) r.phase = p;
    r.lane = it->second;
    r.rank = f.b.sources[static_cast<size_t>(r.lane)].rank;
    m.ranges.push_back(r);
  }
  if (skipped > 0)
    f.note(std::to_string(skipped) + " NVTX ranges of " + std::to_string(skipped_pids.size()) +
           " process(es) without GPU work left out");
}

// CUDA runtime calls of the ranks' processes (the launches of the kernels above).
void read_nsys_runtime_calls(NsysFile& f) {
  const std::string tn = "CUPTI_ACTIVITY_KIND_RUNTIME";
  if (!f.opts.gpu_activity || !f.have_runtime || !f.db.has_column(tn, "nameId") || !f.db.has_column(tn, "start") ||
      !f.db.has_column(tn, "end"))
    return;
  sql::Stmt st(f.db, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
  sqlite3_stmt* s = st.get();
  while (st.step()) {
    int64_t v[5] = {};
    bool null[5] = {};
    if (!int_cells(f, tn, s, 5, v, null) || null[2]) continue;  // no thread: no rank's call
    const int64_t gtid = v[2];
    const int32_t rank = f.rank_of_pid(pid_of_global_id(gtid));
    if (rank < 0) continue;
    RuntimeCall c;
    if (null[0] || null[1]) {
      f.tally.add(tn, "dropped: start or end is NULL");
      continue;
    }
    c.start_ns = v[0];
    c.end_ns = v[1];
    if (!times_in_order(f, tn, c.start_ns, c.end_ns)) continue;
    c.rank = rank;
    c.tid = tid_of_global_tid(gtid);
    c.correlation = v[3];
    c.name_id = null[4] ? f.b.intern("?") : f.str(v[4]);
    f.m.runtime.push_back(c);
  }
}

}  // namespace

void read_nsys_file(Builder& b, sql::Db& db, const std::string& path, int32_t file_index, const LoadOptions& opts) {
  b.m.from_nsys = true;
  b.m.format = "nsys";
  NsysFile f(b, db, path, file_index, opts);
  try {
    note_export_version(f);
    read_nsys_strings(f);
    // Correlation id -> pid from the CUDA runtime calls, for GPU tables without globalPid.
    f.have_runtime = db.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") &&
                     db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId") &&
                     db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid");
    read_gpu_rows(f);
    assign_rows_without_pid(f);
    drop_processes_without_nccl(f);
    make_ranks(f);
    read_nccl_rank_hints(f);
    gpu_rows_to_ranges(f);
    read_nvtx_ranges(f);
    read_nsys_runtime_calls(f);
    f.tally.to_notes([&](const std::string& s) { f.note(s); });
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw_unreadable(path, e);
  }
}

}  // namespace ulysses::prof::detail
