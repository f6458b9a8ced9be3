// The reader of Ulysses rank files (and of Nsight exports in the old layout that name their
// tables as ours): one SQLite trace into a Builder, table by table (StoreFile's read_*), beside
// the Nsight and Kineto readers (nsys_reader.cpp, kineto_reader.cpp); detail::read_file
// (trace_store.cpp) dispatches to them by content. Every SQLite failure becomes a TraceError
// that names the file.
#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/common/run_layout.hpp"

namespace fs = std::filesystem;

namespace ulysses::prof {

namespace {

using namespace detail;

static_assert(sizeof(TraceRange) <= 56, "TraceRange grew: 10 M-range traces hold one per range (two with head lanes)");

// What launched the GPU work of one external id (a ULYSSES_EXTERNAL_IDS row).
struct Launcher {
  int64_t step, phase, dir, layer, head_begin, head_end, chunk;
};

// Gives a kernel / copy (correlation id `corr`) the step, phase, layer, heads and chunk of the
// range that launched it; returns the external id it was launched under (0: none known).
int64_t attribute(TraceRange& r, uint32_t corr, const std::unordered_map<int64_t, int64_t>& ext_of_corr,
                  const std::unordered_map<int64_t, Launcher>& launcher_of_ext) {
  auto xe = ext_of_corr.find(corr);
  if (xe == ext_of_corr.end()) return 0;
  auto li = launcher_of_ext.find(xe->second);
  if (li == launcher_of_ext.end()) return 0;
  const Launcher& l = li->second;
  r.step = to_i32(l.step);
  r.phase = l.phase >= 0 && l.phase < static_cast<int64_t>(Phase::Count) ? static_cast<Phase>(l.phase) : Phase::Other;
  r.dir = l.dir >= 0 && l.dir <= 3 ? static_cast<Direction>(l.dir) : Direction::None;
  // As for host ranges (read_file): no layer, heads or chunk a model cannot have.
  (void)set_layer_heads_chunk(r, l.layer, l.head_begin, l.head_end, l.chunk);
  return xe->second;
}

// What the contract of ULYSSES_MEMORY_CATEGORIES rules out beyond a bad value (docs/CONTRACTS.md):
// the planner's row comes from rank 0 alone (one on rank 1 replaced rank 0's plan for every
// rank, unsaid); a measured row belongs to a step of the run (one at step 2^40 became the
// run's peak step). Counted, noted and left out.
struct CategoryRowsOut {
  int64_t plan_elsewhere = 0, steps_outside = 0;
  int64_t last_step = INT32_MAX;  // the file's last step row, or 2^31 - 1 without step rows
};

// ULYSSES_MEMORY_CATEGORIES when the file has it (older traces do not): rows with a
// time out of range, a size below 0 or an unknown edge are counted in *bad, rows of another
// rank than the file's in *foreign, rows the contract rules out in *out.
void read_memory_categories(sql::Db& db, TraceModel& m, bool has_rank_row, int32_t file_rank, int64_t* bad,
                            int64_t* foreign, CategoryRowsOut* out) {
  if (db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ULYSSES_MEMORY_CATEGORIES'") ==
      0)
    return;
  if (db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ULYSSES_STEPS'") > 0 &&
      db.query_int("SELECT count(*) FROM ULYSSES_STEPS") > 0)
    out->last_step = std::min<int64_t>(out->last_step, db.query_int("SELECT max(step) FROM ULYSSES_STEPS"));
  sql::Stmt q(db,
              "SELECT rank, timestamp, step, edge, phase, layer, parameters, gradients, optimizer, activations, "
              "logits, communication, other FROM ULYSSES_MEMORY_CATEGORIES");
  while (q.step()) {
    MemoryCategorySample c;
    c.rank = to_i32(q.i64(0));
    c.t_ns = q.i64(1);
    c.step = q.i64(2);
    const int64_t edge = q.i64(3);
    c.phase = to_i32(q.i64(4));
    c.layer = to_i32(q.i64(5));
    bool ok = sqlite3_column_type(q.get(), 1) == SQLITE_INTEGER && !time_out_of_range(c.t_ns) && edge >= 0 &&
              edge <= static_cast<int64_t>(MemEdge::PeakLayer);
    for (int k = 0; k < kMemCategories; ++k) {
      c.c.bytes[k] = q.i64(6 + k);
      ok &= sqlite3_column_type(q.get(), 6 + k) == SQLITE_INTEGER && c.c.bytes[k] >= 0 &&
            c.c.bytes[k] < (int64_t{1} << 58);
    }
    if (!ok) {
      ++*bad;
      continue;
    }
    c.edge = static_cast<MemEdge>(edge);
    if (has_rank_row && c.rank != file_rank) {
      ++*foreign;
      continue;
    }
    if (c.edge == MemEdge::Planned && (c.rank != 0 || (has_rank_row && file_rank != 0))) {
      ++out->plan_elsewhere;
      continue;
    }
    // A peak may be sampled in the step whose row was not yet written (a run stopped there).
    if (c.edge != MemEdge::Planned && (c.step < -1 || c.step > out->last_step + 1)) {
      ++out->steps_outside;
      continue;
    }
    m.memory_categories.push_back(c);
  }
}

// ULYSSES_PEAK_TENSORS when the file has it (older traces do not): a row with a byte count
// outside [0, 2^58) is counted in *bad, one of another rank than the file's in *foreign.
void read_peak_tensors(sql::Db& db, TraceModel& m, bool has_rank_row, int32_t file_rank, int64_t* bad,
                       int64_t* foreign) {
  if (db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ULYSSES_PEAK_TENSORS'") == 0)
    return;
  sql::Stmt q(db, "SELECT rank, step, ord, name, category, dtype, shape, bytes, blocks FROM ULYSSES_PEAK_TENSORS");
  while (q.step()) {
    PeakTensorSample p;
    p.rank = to_i32(q.i64(0));
    p.step = q.i64(1);
    p.ord = to_i32(q.i64(2));
    p.t.name = q.text(3);
    p.t.category = q.text(4);
    p.t.dtype = q.text(5);
    p.t.shape = q.text(6);
    p.t.bytes = q.i64(7);
    p.t.blocks = q.i64(8);
    if (p.t.bytes < 0 || p.t.bytes >= (int64_t{1} << 58) || p.ord < 0 || p.t.blocks < 0) {
      ++*bad;
      continue;
    }
    if (has_rank_row && p.rank != file_rank) {
      ++*foreign;
      continue;
    }
    m.peak_tensors.push_back(std::move(p));
  }
}

// What read_file reads from one SQLite trace (a Ulysses rank file, or an nsys export in the
// old layout), shared by its steps, and the rows it left out or read as absent, per kind.
struct StoreFile {
  Builder& b;
  sql::Db& db;
  const std::string& path;
  const LoadOptions& opts;
  const FileKind kind;
  TraceModel& m;
  const std::string& fname;
  // Rows whose times no clock gives (an end before its start, or beyond +-2^62 ns: INT64_MIN to
  // INT64_MAX would set the trace's time origin, and every export time would be near -9.2e15 µs).
  int64_t bad_times = 0, bad_steps = 0, repeated_steps = 0, bad_attrs = 0, wide_ids = 0;
  // Ranges with no start or end (NULL: never ended, or a hand-edited file; a NULL start read as
  // time 0 would make a 673 s range), step rows with a step time or tokens/s no step has (1e308, -inf,
  // NULL), memory rows with a time or size no allocator reports (INT64_MIN blanks every view)
  // and step or memory rows of another rank than the file's.
  int64_t null_times = 0, bad_figures = 0, bad_memory = 0, foreign_rows = 0;
  int64_t bad_documents = 0;  // ULYSSES_DOCUMENTS rows whose ranges contradict each other
  CategoryRowsOut category_rows;
  bool has_rank_row = false;
  // Strings used by this file, mapped into the model's table.
  // Ids are 0..n-1 in our files: looked up in a vector (one per range); a hash map for
  // sparse ids (foreign or hand-made files) and the legacy loader.
  std::unordered_map<int64_t, int32_t> sid;
  std::vector<int32_t> sid_dense;  // id -> string, -1 = no such id
  std::unordered_map<int64_t, std::string> thread_names;
  std::map<int64_t, int32_t> pid_rank;  // pid -> rank
  int32_t file_rank;
  // GPU attribution: CUPTI correlation id -> external id, external id -> what launched it,
  // event id -> external id.
  std::unordered_map<int64_t, int64_t> ext_of_corr, ext_of_event;
  std::unordered_map<int64_t, Launcher> launcher_of_ext;

  StoreFile(Builder& b_, sql::Db& db_, const std::string& path_, int32_t file_index, const LoadOptions& opts_,
            FileKind kind_, const std::string& fname_)
      : b(b_), db(db_), path(path_), opts(opts_), kind(kind_), m(b_.m), fname(fname_), file_rank(file_index) {}

  // A step or collective id past 32 bits (the tracer writes 64-bit sequence numbers): absent,
  // counted, never cut to 32 bits (seq 2^32 + 5 was paired with seq 5, seq 2^31 turned negative).
  int32_t id32(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) return static_cast<int32_t>(v);
    ++wide_ids;
    return -1;
  }
  static bool bad_interval(int64_t a, int64_t z) { return z < a || time_out_of_range(a) || time_out_of_range(z); }
  int32_t str(int64_t id) {
    if (!sid_dense.empty()) {
      if (id >= 0 && id < static_cast<int64_t>(sid_dense.size()) && sid_dense[static_cast<size_t>(id)] >= 0)
        return sid_dense[static_cast<size_t>(id)];
      return b.intern("?");
    }
    auto it = sid.find(id);
    return it == sid.end() ? b.intern("?") : it->second;
  }
  int32_t rank_of_pid(int64_t pid) const {
    auto it = pid_rank.find(pid);
    return it == pid_rank.end() ? file_rank : it->second;
  }
};

// Strings used by this file, mapped into the model's table (dense ids in a vector), and the
// threads' names.
void read_store_strings(StoreFile& f) {
  if (f.db.has_table("StringIds")) {
    sql::Stmt st(f.db, "SELECT id, value FROM StringIds");
    while (st.step()) f.sid[st.i64(0)] = f.b.intern(st.text(1));
  }
  if (!f.opts.legacy && !f.sid.empty()) {
    int64_t hi = -1;
    bool dense = true;
    for (const auto& [id, s] : f.sid) {
      dense = dense && id >= 0;
      hi = std::max(hi, id);
    }
    if (dense && hi < 4 * static_cast<int64_t>(f.sid.size()) + 1024) {
      f.sid_dense.assign(static_cast<size_t>(hi) + 1, -1);
      for (const auto& [id, s] : f.sid) f.sid_dense[static_cast<size_t>(id)] = s;
    }
  }
  if (f.db.has_table("ThreadNames")) {
    sql::Stmt st(f.db, "SELECT nameId, globalTid FROM ThreadNames");
    while (st.step()) f.thread_names[st.i64(1)] = f.m.strings[f.str(st.i64(0))];
  }
}

// The run: ULYSSES_RUN's config and shape (one ulysses-run could have had).
bool read_run_row(StoreFile& f) {
  TraceModel& m = f.m;
  const bool has_run_id = f.db.has_column("ULYSSES_RUN", "runId");
  sql::Stmt run(f.db, has_run_id ? "SELECT configJson, worldSize, spSize, dpSize, runId FROM ULYSSES_RUN LIMIT 1"
                                 : "SELECT configJson, worldSize, spSize, dpSize FROM ULYSSES_RUN LIMIT 1");
  if (!run.step()) return false;
  // a run config is a few KiB; one beyond the config loader's own cap is not kept
  if (m.config_json.empty() && sqlite3_column_bytes(run.get(), 0) <= (16 << 20)) m.config_json = run.text(0);
  const int64_t world = run.i64(1), sp = run.i64(2), dp = run.i64(3);
  // The run's shape must be one ulysses-run could have had: "sp 0 x dp 0" was shown, and a
  // worldSize of 4 over two rank files let two missing ranks pass unnamed.
  if (sp < 1 || dp < 1 || sp > (1 << 20) || dp > (1 << 20) || (world >= 0 && world != sp * dp))
    throw TraceError(describe(f.path) + ": ULYSSES_RUN says worldSize " + std::to_string(world) + ", spSize " +
                     std::to_string(sp) + ", dpSize " + std::to_string(dp) +
                     ", which no run has (worldSize = spSize x dpSize, each at least 1): the file was edited or "
                     "damaged");
  m.sp_size = to_i32(sp);
  m.dp_size = to_i32(dp);
  check_same_run(f.b, has_run_id ? Builder::capped(run.text(4)) : std::string(), run.i64(1), f.path);
  return true;
}

// Ranks: one ULYSSES_RANKS row per file.
void read_ranks(StoreFile& f) {
  TraceModel& m = f.m;
  m.from_nsys = false;
  const bool has_run_row = read_run_row(f);
  sql::Stmt rk(f.db, "SELECT rank, spRank, dpRank, device, hostname, pid FROM ULYSSES_RANKS");
  while (rk.step()) {
    RankInfo ri;
    ri.rank = to_i32(rk.i64(0));
    ri.sp_rank = to_i32(rk.i64(1));
    ri.dp_rank = to_i32(rk.i64(2));
    ri.device = Builder::capped(rk.text(3));
    ri.hostname = Builder::capped(rk.text(4));
    ri.pid = rk.i64(5);
    // spRank / dpRank place the rank's heads and batch: one past the run's shape (a head map
    // "owning heads 10-11" of a 4-head model) is a damaged file, like a shape no run has.
    if (has_run_row && (ri.sp_rank < 0 || ri.sp_rank >= m.sp_size || ri.dp_rank < 0 || ri.dp_rank >= m.dp_size))
      throw TraceError(describe(f.path) + ": ULYSSES_RANKS says rank " + std::to_string(ri.rank) + " has spRank " +
                       std::to_string(rk.i64(1)) + " and dpRank " + std::to_string(rk.i64(2)) +
                       ", outside the run's spSize " + std::to_string(m.sp_size) + " x dpSize " +
                       std::to_string(m.dp_size) + ": the file was edited or damaged");
    f.file_rank = ri.rank;
    f.has_rank_row = true;
    f.pid_rank[ri.pid] = ri.rank;
    m.ranks.push_back(ri);
  }
}

// GPU attribution (Ulysses files of GPU ranks): CUPTI correlation id -> external id, and
// external id -> what launched it (ULYSSES_EXTERNAL_IDS); event id -> external id.
void read_gpu_attribution(StoreFile& f) {
  if (f.kind != FileKind::Ulysses || !f.opts.gpu_activity || !f.db.has_table("ULYSSES_EXTERNAL_IDS") ||
      !f.db.has_table("CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION"))
    return;
  sql::Stmt xc(f.db, "SELECT correlationId, externalId FROM CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION");
  while (xc.step()) f.ext_of_corr[xc.i64(0)] = xc.i64(1);
  sql::Stmt xi(f.db,
               "SELECT externalId, eventId, step, phase, direction, layer, headBegin, headEnd, chunk "
               "FROM ULYSSES_EXTERNAL_IDS");
  while (xi.step()) {
    f.launcher_of_ext[xi.i64(0)] = {xi.i64(2), xi.i64(3), xi.i64(4), xi.i64(5), xi.i64(6), xi.i64(7), xi.i64(8)};
    if (!xi.is_null(1)) f.ext_of_event[xi.i64(1)] = xi.i64(0);
  }
}

// A host range's Ulysses attributes: columns ab + 1 .. ab + 11 of `a` (step, phase, direction,
// layer, headBegin, headEnd, chunk, bytesSent, bytesRecv, pgId, seq).
void set_host_range_attributes(StoreFile& f, TraceRange& r, sqlite3_stmt* a, int ab) {
  auto attr = [&](int k) { return sqlite3_column_int64(a, ab + k); };  // NULL (a hand-edited file) = 0
  r.step = f.id32(attr(1));
  int64_t ph = attr(2);
  r.phase = ph >= 0 && ph < static_cast<int64_t>(Phase::Count) ? static_cast<Phase>(ph) : Phase::Other;
  int64_t dir = attr(3);
  r.dir = dir >= 0 && dir <= 3 ? static_cast<Direction>(dir) : Direction::None;
  // A layer past what a model has (1024) sized every per-layer table by it (layer
  // 1000000 in a 2-layer run); heads that are no range ("4-1", "2-2147483646"), a chunk
  // past 32766: each shown as absent, with a note.
  f.bad_attrs += set_layer_heads_chunk(r, attr(4), attr(5), attr(6), attr(7));
  RangeExtra x;
  x.bytes_sent = attr(8);
  x.bytes_recv = attr(9);
  x.pg = f.id32(attr(10));
  x.seq = f.id32(attr(11));
  if (!x.empty()) f.m.extra_for(r) = x;
}

// The lane of a host thread (global tid): its rank's thread lane, or a comm lane for the
// tracer's communication threads in our files.
int32_t host_thread_lane(StoreFile& f, int64_t gtid) {
  const bool ours = f.kind == FileKind::Ulysses;
  int64_t pid = pid_of_global_id(gtid);
  int64_t tid = tid_of_global_tid(gtid);
  int32_t rank = f.rank_of_pid(pid);
  auto tn = f.thread_names.find(gtid);
  std::string name = tn != f.thread_names.end() ? tn->second : "thread " + std::to_string(tid);
  bool comm = ours && is_comm_row_tid(tid);
  int order = comm ? (tid == kCommTid         ? 2
                      : tid == kRingTid       ? 3
                      : tid == kRingGradTid   ? 4
                      : tid == kZeroGatherTid ? 5
                                              : 6)
                   : (name == "main" ? 0 : 1);
  return f.b.source(rank, comm ? LaneKind::Comm : LaneKind::HostThread, tid, name, order);
}

// Host ranges. Format 4 files keep a range's Ulysses attributes in NVTX_EVENTS' ulysses*
// columns: one scan. Older Ulysses files: NVTX_EVENTS and the ULYSSES_RANGES table are both
// scanned in rowid order (eventId is ULYSSES_RANGES' rowid) and merged here: a merge join
// costs one cursor step per row where "LEFT JOIN ... ON u.eventId = n.rowid" costs a B-tree seek.
void read_host_ranges(StoreFile& f) {
  sql::Db& db = f.db;
  TraceModel& m = f.m;
  if (!db.has_table("NVTX_EVENTS")) return;
  const bool ours = f.kind == FileKind::Ulysses;
  const bool one_row = ours && db.has_column("NVTX_EVENTS", "ulyssesStep");
  {
    const int64_t upper = db.query_int("SELECT max(rowid) FROM NVTX_EVENTS");  // O(log n)
    if (upper > 0) m.ranges.rows().reserve(m.ranges.rows().size() + static_cast<size_t>(upper));
  }
  sql::Stmt st(db, std::string("SELECT start, end, globalTid, textId, text, rowid") +
                       (one_row ? ", ulyssesStep, category, ulyssesDirection, ulyssesLayer, ulyssesHeadBegin, "
                                  "ulyssesHeadEnd, ulyssesChunk, ulyssesBytesSent, ulyssesBytesRecv, "
                                  "ulyssesPgId, ulyssesSeq"
                                : "") +
                       " FROM NVTX_EVENTS WHERE eventType IN (59, 60) ORDER BY rowid");
  sql::Stmt ust;
  if (ours && !one_row) {  // pgId / seq: format 3 on (older files: not collectives, -1)
    const bool coll = db.has_column("ULYSSES_RANGES", "seq") && db.has_column("ULYSSES_RANGES", "pgId");
    ust = sql::Stmt(db, std::string("SELECT eventId, step, phase, direction, layer, headBegin, headEnd, chunk, "
                                    "bytesSent, bytesRecv, ") +
                            (coll ? "pgId, seq" : "-1, -1") + " FROM ULYSSES_RANGES ORDER BY eventId");
  }
  sqlite3_stmt* s = st.get();
  sqlite3_stmt* u = ust.get();
  bool u_row = ours && !one_row && ust.step();
  std::unordered_map<int64_t, int32_t> lane_of_gtid;
  int64_t last_gtid = 0;
  int32_t last_lane = -1;
  while (st.step()) {
    TraceRange r;
    r.start_ns = sqlite3_column_int64(s, 0);
    r.end_ns = sqlite3_column_int64(s, 1);
    const int64_t rowid = sqlite3_column_int64(s, 5);
    while (u_row && sqlite3_column_int64(u, 0) < rowid) u_row = ust.step();
    if (sqlite3_column_type(s, 0) == SQLITE_NULL || sqlite3_column_type(s, 1) == SQLITE_NULL) {
      ++f.null_times;
      continue;
    }
    if (StoreFile::bad_interval(r.start_ns, r.end_ns)) {
      ++f.bad_times;
      continue;
    }
    int64_t gtid = sqlite3_column_int64(s, 2);
    if (sqlite3_column_type(s, 3) != SQLITE_NULL) {
      r.name_id = f.str(sqlite3_column_int64(s, 3));
    } else {
      const unsigned char* t = sqlite3_column_text(s, 4);
      r.name_id =
          f.b.intern(t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s, 4)) : std::string());
    }
    const bool has_u =
        one_row ? sqlite3_column_type(s, 6) != SQLITE_NULL : u_row && sqlite3_column_int64(u, 0) == rowid;
    if (has_u) {
      set_host_range_attributes(f, r, one_row ? s : u, one_row ? 5 : 0);
    } else {
      Phase p;
      if (phase_from_name(m.strings[r.name_id], &p)) r.phase = p;
    }
    if (!f.ext_of_event.empty()) {
      auto xe = f.ext_of_event.find(rowid);
      if (xe != f.ext_of_event.end() && xe->second != 0) m.extra_for(r).external_id = xe->second;
    }
    if (last_lane < 0 || gtid != last_gtid) {  // consecutive rows mostly share a thread
      auto it = lane_of_gtid.find(gtid);
      if (it == lane_of_gtid.end()) it = lane_of_gtid.emplace(gtid, host_thread_lane(f, gtid)).first;
      last_gtid = gtid;
      last_lane = it->second;
    }
    r.lane = last_lane;
    r.rank = f.b.sources[r.lane].rank;
    m.ranges.rows().push_back(r);
  }
}

// GPU activity: kernels, memcpy, memset, one lane per (device, stream).
void read_gpu_activity(StoreFile& f) {
  if (!f.opts.gpu_activity) return;
  struct GpuTable {
    const char* table;
    const char* name_sql;
  };
  const GpuTable tables[] = {{"CUPTI_ACTIVITY_KIND_KERNEL", "COALESCE(shortName, demangledName)"},
                             {"CUPTI_ACTIVITY_KIND_MEMCPY", "NULL"},
                             {"CUPTI_ACTIVITY_KIND_MEMSET", "NULL"}};
  for (const auto& t : tables) {
    if (!f.db.has_table(t.table)) continue;
    bool is_memcpy = std::strcmp(t.table, "CUPTI_ACTIVITY_KIND_MEMCPY") == 0;
    bool is_memset = std::strcmp(t.table, "CUPTI_ACTIVITY_KIND_MEMSET") == 0;
    int32_t fixed_name = is_memcpy ? f.b.intern("[CUDA memcpy]") : is_memset ? f.b.intern("[CUDA memset]") : -1;
    // correlationId: in every nsys export we know of; optional all the same.
    const char* corr = f.db.has_column(t.table, "correlationId") ? ", correlationId" : ", 0";
    sql::Stmt st(f.db, std::string("SELECT start, end, deviceId, streamId, globalPid, ") + t.name_sql +
                           (is_memcpy || is_memset ? ", bytes" : ", 0") + corr + " FROM " + t.table);
    sqlite3_stmt* s = st.get();
    while (st.step()) {
      TraceRange r;
      r.start_ns = sqlite3_column_int64(s, 0);
      r.end_ns = sqlite3_column_int64(s, 1);
      if (StoreFile::bad_interval(r.start_ns, r.end_ns)) {
        ++f.bad_times;
        continue;
      }
      int64_t dev = sqlite3_column_int64(s, 2), stream = sqlite3_column_int64(s, 3);
      int64_t pid = pid_of_global_id(sqlite3_column_int64(s, 4));
      r.name_id = fixed_name >= 0 ? fixed_name : f.str(sqlite3_column_int64(s, 5));
      r.is_kernel = true;
      RangeExtra x;
      x.bytes_sent = sqlite3_column_int64(s, 6);
      x.correlation = static_cast<uint32_t>(sqlite3_column_int64(s, 7));
      if (!f.ext_of_corr.empty()) x.external_id = attribute(r, x.correlation, f.ext_of_corr, f.launcher_of_ext);
      if (!x.empty()) f.m.extra_for(r) = x;
      int32_t rank = f.rank_of_pid(pid);
      std::string lname =
          (dev != 0 ? "gpu " + std::to_string(dev) + " " : std::string()) + "stream " + std::to_string(stream);
      r.lane = f.b.source(rank, LaneKind::CudaStream, stream_lane_key(dev, stream), lname, 3);
      r.rank = rank;
      f.m.ranges.rows().push_back(r);
    }
  }
}

// CUDA runtime calls (the launches of the kernels above; exports pair them by correlation).
void read_store_runtime_calls(StoreFile& f) {
  sql::Db& db = f.db;
  if (!f.opts.gpu_activity || !db.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") ||
      !db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId") ||
      !db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid") ||
      !db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"))
    return;
  sql::Stmt st(db, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
  while (st.step()) {
    RuntimeCall c;
    c.start_ns = st.i64(0);
    c.end_ns = st.i64(1);
    if (StoreFile::bad_interval(c.start_ns, c.end_ns)) {
      ++f.bad_times;
      continue;
    }
    const int64_t gtid = st.i64(2);
    c.rank = f.rank_of_pid(pid_of_global_id(gtid));
    c.tid = tid_of_global_tid(gtid);
    c.correlation = st.i64(3);
    c.name_id = f.str(st.i64(4));
    auto xe = f.ext_of_corr.find(c.correlation);
    if (xe != f.ext_of_corr.end()) c.external_id = xe->second;
    f.m.runtime.push_back(c);
  }
}

// Steps (ULYSSES_STEPS): each a time interval, once per rank, with figures a step can have.
void read_steps(StoreFile& f) {
  sql::Stmt st(f.db,
               "SELECT rank, step, start, end, loss, lr, gradNorm, tokens, tokensPerS, stepMs, maxMemBytes "
               "FROM ULYSSES_STEPS");
  std::set<std::pair<int32_t, int64_t>> seen_steps;  // (rank, step)
  while (st.step()) {
    StepInfo si;
    si.rank = to_i32(st.i64(0));
    si.step = st.i64(1);
    si.start_ns = st.i64(2);
    si.end_ns = st.i64(3);
    si.loss = st.f64(4);
    si.lr = st.f64(5);
    si.grad_norm = st.f64(6);
    si.tokens = st.i64(7);
    si.tokens_per_s = st.f64(8);
    si.step_ms = st.f64(9);
    si.max_mem_bytes = st.i64(10);
    // A step's window must be a time interval, and a rank has each step once: a repeated
    // step 0 was counted three times (inflating the per-step bytes), an inverted one showed
    // a wall of "-0.000".
    if (si.step < 0 || StoreFile::bad_interval(si.start_ns, si.end_ns) ||
        sqlite3_column_type(st.get(), 2) == SQLITE_NULL || sqlite3_column_type(st.get(), 3) == SQLITE_NULL) {
      ++f.bad_steps;
      continue;
    }
    if (f.has_rank_row && si.rank != f.file_rank) {
      ++f.foreign_rows;
      continue;
    }
    // The figures the headline's medians take: a step time or tokens/s that no step has
    // (1e308 printed 309 digits; -inf tokens/s) comes from the step's own window instead.
    const bool ms_ok = std::isfinite(si.step_ms) && si.step_ms >= 0 && si.step_ms < 1e15 &&
                       sqlite3_column_type(st.get(), 9) != SQLITE_NULL;
    const bool tps_ok = std::isfinite(si.tokens_per_s) && si.tokens_per_s >= 0 && si.tokens_per_s < 1e15 &&
                        sqlite3_column_type(st.get(), 8) != SQLITE_NULL;
    if (!ms_ok || !tps_ok) {
      ++f.bad_figures;
      if (!ms_ok) si.step_ms = static_cast<double>(si.end_ns - si.start_ns) / 1e6;
      if (!tps_ok) si.tokens_per_s = si.tokens > 0 && si.step_ms > 0 ? si.tokens / (si.step_ms / 1e3) : 0.0;
    }
    if (!seen_steps.insert({si.rank, si.step}).second) {
      ++f.repeated_steps;
      continue;
    }
    f.m.steps.push_back(si);
  }
}

// Clock offsets to rank 0 (ULYSSES_CLOCK, format 3: 'start', 'close').
void read_clocks(StoreFile& f) {
  TraceModel& m = f.m;
  if (!f.db.has_table("ULYSSES_CLOCK")) return;
  sql::Stmt ck(f.db, "SELECT rank, kind, offsetNs, errorNs, measuredAt FROM ULYSSES_CLOCK ORDER BY rowid");
  while (ck.step()) {
    const int32_t rank = to_i32(ck.i64(0));
    auto it = std::find_if(m.clocks.begin(), m.clocks.end(), [&](const ClockInfo& c) { return c.rank == rank; });
    if (it == m.clocks.end()) {
      m.clocks.push_back(ClockInfo{});
      it = m.clocks.end() - 1;
      it->rank = rank;
    }
    const bool start = ck.text(1) == "start";
    (start ? it->has_start : it->has_close) = true;
    (start ? it->start_offset_ns : it->close_offset_ns) = ck.i64(2);
    (start ? it->start_error_ns : it->close_error_ns) = ck.i64(3);
    (start ? it->start_at_ns : it->close_at_ns) = ck.i64(4);
    // Text or NULL read as 0 (a perfect 0 +- 0 offset): marked unusable (error -1), so that
    // align_to_rank0 leaves it out with a note, from the rows and from a cache alike.
    for (int col = 2; col <= 4; ++col)
      if (sqlite3_column_type(ck.get(), col) != SQLITE_INTEGER) (start ? it->start_error_ns : it->close_error_ns) = -1;
  }
}

// The documents of each shard (ULYSSES_DOCUMENTS, absent in older traces and without
// data.kind = documents). A row of another rank than the file's, or whose positions contradict
// each other (an empty or reversed range, a document part outside its piece), is left out.
void read_documents(StoreFile& f) {
  if (!f.db.has_table("ULYSSES_DOCUMENTS")) return;
  sql::Stmt q(f.db,
              "SELECT rank, step, sequence, packed, piece, shardBegin, shardEnd, document, docTokens, docOffset, "
              "begin, end FROM ULYSSES_DOCUMENTS");
  while (q.step()) {
    DocumentShard d;
    d.rank = to_i32(q.i64(0));
    d.step = q.i64(1);
    d.sequence = q.i64(2);
    d.packed = q.i64(3);
    d.piece = to_i32(q.i64(4));
    d.shard_begin = q.i64(5);
    d.shard_end = q.i64(6);
    d.document = q.i64(7);
    d.doc_tokens = q.i64(8);
    d.doc_offset = q.i64(9);
    d.begin = q.i64(10);
    d.end = q.i64(11);
    if (f.has_rank_row && d.rank != f.file_rank) {
      ++f.foreign_rows;
      continue;
    }
    if (d.shard_begin < 0 || d.shard_end <= d.shard_begin || d.begin < 0 || d.end <= d.begin ||
        d.held_end() <= d.held_begin() || d.doc_tokens < d.end - d.begin || d.document < -1) {
      ++f.bad_documents;
      continue;
    }
    f.m.documents.push_back(d);
  }
}

// Memory samples (ULYSSES_MEMORY), then the per-category ones.
void read_memory(StoreFile& f) {
  sql::Stmt mem(f.db, "SELECT rank, timestamp, labelId, allocated, reserved, peak, step FROM ULYSSES_MEMORY");
  while (mem.step()) {
    MemoryPoint p;
    p.rank = to_i32(mem.i64(0));
    p.t_ns = mem.i64(1);
    p.label_id = f.str(mem.i64(2));
    p.allocated = mem.i64(3);
    p.reserved = mem.i64(4);
    p.peak = mem.i64(5);
    p.step = mem.i64(6);
    auto size_ok = [](int64_t v) { return v >= 0 && v < (int64_t{1} << 62); };
    if (sqlite3_column_type(mem.get(), 1) == SQLITE_NULL || time_out_of_range(p.t_ns) || !size_ok(p.allocated) ||
        !size_ok(p.reserved) || !size_ok(p.peak)) {
      ++f.bad_memory;
      continue;
    }
    if (f.has_rank_row && p.rank != f.file_rank) {
      ++f.foreign_rows;
      continue;
    }
    f.m.memory.push_back(p);
  }
  read_memory_categories(f.db, f.m, f.has_rank_row, f.file_rank, &f.bad_memory, &f.foreign_rows, &f.category_rows);
  read_peak_tensors(f.db, f.m, f.has_rank_row, f.file_rank, &f.bad_memory, &f.foreign_rows);
}

// One note per kind of row left out or read as absent, with its count.
void note_left_out_rows(const StoreFile& f) {
  auto count_note = [&](int64_t n, const char* what) {
    if (n > 0) f.m.notes.push_back(f.fname + ": " + std::to_string(n) + what);
  };
  count_note(f.bad_times, " ranges with an end before their start or times beyond +-2^62 ns left out");
  count_note(f.null_times, " ranges without a start or an end (never ended: the process stopped inside them) left out");
  count_note(f.bad_figures,
             " step rows with a step time or tokens/s that is not a number from 0 to 1e15: taken from the "
             "step's start and end");
  count_note(f.bad_memory,
             " memory samples with no time, a time beyond +-2^62 ns or a size below 0 or past 2^62 bytes "
             "left out");
  count_note(f.foreign_rows, " step or memory rows of another rank than the file's left out");
  count_note(f.bad_steps,
             " step rows with a negative step, no start or end, an end before their start or times beyond "
             "+-2^62 ns left out");
  count_note(f.bad_attrs,
             " layer, head or chunk attributes no model has (a layer past 1023, heads begin >= end or past "
             "32767, a chunk past 32766) shown as absent");
  count_note(f.wide_ids,
             " step or collective ids past 32 bits (beyond 2147483647) shown as absent: those ranges are "
             "in no step and pair with no other rank");
  count_note(f.repeated_steps, " step rows repeating a step of the same rank left out (the first one is kept)");
  count_note(f.category_rows.plan_elsewhere,
             " memory-plan rows on a rank other than 0 left out (the planner's figures are rank 0's alone)");
  count_note(f.category_rows.steps_outside, " memory-category rows of a step outside the run's steps left out");
  count_note(f.bad_documents,
             " document rows whose ranges contradict each other (empty, reversed or outside the rank's piece) "
             "left out");
}

}  // namespace

void detail::read_native_file(Builder& b, sql::Db& db, const std::string& path, int32_t file_index,
                              const LoadOptions& opts, FileKind kind, const std::string& fname) {
  StoreFile f(b, db, path, file_index, opts, kind, fname);
  try {
    read_store_strings(f);
    if (kind == FileKind::Ulysses) read_ranks(f);
    read_gpu_attribution(f);
    read_host_ranges(f);
    read_gpu_activity(f);
    read_store_runtime_calls(f);
    if (kind == FileKind::Ulysses) {
      read_steps(f);
      read_clocks(f);
      read_memory(f);
      read_documents(f);
    }
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw_unreadable(path, e);
  }
  note_left_out_rows(f);
}

}  // namespace ulysses::prof
