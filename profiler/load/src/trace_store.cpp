// Loading traces into a TraceModel: a run directory (RUN/trace/rank*.sqlite), one rank's
// file, or an `nsys export --type sqlite` file. This file holds load_trace, the reader of
// Ulysses trace files and the finishing of the model; file checks, the nsys reader and lane
// building live beside it (see trace_loading.hpp). Every SQLite failure becomes a TraceError
// that names the file.
#include "ulysses/profiler/trace_store.hpp"

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
#include "ulysses/common/run_record.hpp"

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

void detail::read_file(Builder& b, const std::string& path, int32_t file_index, const LoadOptions& opts) {
  // The kind comes from the content (JSON or SQLite), whatever the name says; a name that says
  // otherwise is noted, so that a renamed file is no surprise.
  const std::string fname = fs::path(path).filename().string();
  auto named = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return fname.size() >= n && fname.compare(fname.size() - n, n, suffix) == 0;
  };
  if (looks_like_json(path)) {
    if (named(".sqlite") || named(".db") || named(".sqlite3"))
      b.m.notes.push_back(fname + ": holds JSON, not SQLite: read as a PyTorch profiler trace");
    return read_kineto_file(b, path, file_index, opts);
  }
  sql::Db db;
  FileKind kind = validate_file(path, &db);
  if (named(".json"))
    b.m.notes.push_back(fname + ": is an SQLite database, not JSON: read as " +
                        (kind == FileKind::Nsys ? "an Nsight Systems export" : "a Ulysses rank trace"));
  if (kind == FileKind::Nsys) return read_nsys_file(b, db, path, file_index, opts);
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

namespace {

void finish(Builder& b, const LoadOptions& opts) {
  TraceModel& m = b.m;
  renumber_foreign_ranks(b);
  std::sort(m.ranks.begin(), m.ranks.end(), [](const RankInfo& x, const RankInfo& y) { return x.rank < y.rank; });
  build_lanes(b, opts.legacy ? -1 : opts.threads, opts.head_lanes);
  label_foreign_phases(m);
  if (opts.head_lanes) add_head_lanes(m, !opts.legacy, opts.threads);
  link_kernels_to_launchers(m, opts.legacy ? 1 : opts.threads);
  attribute_kernels_by_time(m);
  std::sort(m.runtime.begin(), m.runtime.end(), [](const RuntimeCall& x, const RuntimeCall& y) {
    return std::tie(x.rank, x.start_ns) < std::tie(y.rank, y.start_ns);
  });
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepInfo& x, const StepInfo& y) { return std::tie(x.rank, x.step) < std::tie(y.rank, y.step); });
  std::sort(m.memory.begin(), m.memory.end(), [](const MemoryPoint& x, const MemoryPoint& y) {
    return std::tie(x.rank, x.t_ns) < std::tie(y.rank, y.t_ns);
  });
  std::stable_sort(m.memory_categories.begin(), m.memory_categories.end(),
                   [](const MemoryCategorySample& x, const MemoryCategorySample& y) {
                     return std::tie(x.rank, x.t_ns) < std::tie(y.rank, y.t_ns);
                   });
  std::sort(m.documents.begin(), m.documents.end(), [](const DocumentShard& x, const DocumentShard& y) {
    return std::tie(x.step, x.sequence, x.rank, x.piece, x.begin) <
           std::tie(y.step, y.sequence, y.rank, y.piece, y.begin);
  });
  std::stable_sort(m.peak_tensors.begin(), m.peak_tensors.end(),
                   [](const PeakTensorSample& x, const PeakTensorSample& y) {
                     return std::tie(x.rank, x.step, x.ord) < std::tie(y.rank, y.step, y.ord);
                   });
  bool first = true;
  int32_t max_layer = -1;
  auto extend = [&](int64_t a, int64_t z) {
    if (first) {
      m.t_min = a;
      m.t_max = z;
      first = false;
    } else {
      m.t_min = std::min(m.t_min, a);
      m.t_max = std::max(m.t_max, z);
    }
  };
  // Per lane, on the loader's threads; head-range lanes hold copies of ranges counted already.
  struct Extent {
    bool any = false;
    int64_t lo = 0, hi = 0;
    int16_t layer = -1;
  };
  std::vector<Extent> ext(m.lanes.size());
  parallel_for(m.lanes.size(), opts.legacy ? 1 : opts.threads, [&](size_t l) {
    const Lane& lane = m.lanes[l];
    if (lane.kind == LaneKind::HeadRange) return;
    Extent& x = ext[l];
    for (int64_t i = lane.first; i < lane.first + lane.count; ++i) {
      const TraceRange& r = m.ranges.rows()[static_cast<size_t>(i)];
      x.lo = x.any ? std::min(x.lo, r.start_ns) : r.start_ns;
      x.hi = x.any ? std::max(x.hi, r.end_ns) : r.end_ns;
      x.any = true;
      x.layer = std::max(x.layer, r.layer);
    }
  });
  for (const Extent& x : ext) {
    if (x.any) extend(x.lo, x.hi);
    max_layer = std::max<int32_t>(max_layer, x.layer);
  }
  for (const auto& s : m.steps) extend(s.start_ns, s.end_ns);
  m.num_layers = max_layer + 1;
  if (!m.config_json.empty()) {
    auto j = nlohmann::json::parse(m.config_json, nullptr, false);
    if (j.is_object() && j.contains("model") && j["model"].is_object()) {
      const auto& md = j["model"];
      if (md.contains("num_attention_heads") && md["num_attention_heads"].is_number_integer())
        m.num_heads = md["num_attention_heads"].get<int32_t>();
      if (md.contains("num_hidden_layers") && md["num_hidden_layers"].is_number_integer())
        m.num_layers = std::max(m.num_layers, md["num_hidden_layers"].get<int32_t>());
    }
  }
  if (m.format != "ulysses") {
    m.sp_size = static_cast<int32_t>(std::max<size_t>(1, m.ranks.size()));
    m.dp_size = 1;
  }
}

// Moves what one file added (entries from the given sizes on) onto rank 0's clock with the
// offsets that file stored (ULYSSES_CLOCK): t -> t - offset_at(t).
void align_to_rank0(TraceModel& m, size_t n_clocks, size_t n_ranges, size_t n_steps, size_t n_mem, size_t n_rt,
                    size_t n_cat) {
  for (size_t c = n_clocks; c < m.clocks.size(); ++c) {
    ClockInfo& ck = m.clocks[c];
    if (ck.rank == 0 || (!ck.has_start && !ck.has_close)) continue;
    // Measurements no clock gives are left out with a note rather than applied: offsets past
    // +-2^61 ns overflowed every shifted time (a median skew of -9.2e12 ms), a negative error
    // is a row that was not a number, and a drift between the two past 1% (quartz drifts by tens
    // of ppm; a short run's measurement error by hundreds) is no clock's.
    const std::string who = "rank " + std::to_string(ck.rank) + "'s clock offset";
    auto usable = [&](int64_t off, int64_t err, int64_t at) {
      return off >= -kMaxClockOffsetNs && off <= kMaxClockOffsetNs && err >= 0 && err <= kMaxClockOffsetNs &&
             at >= -kMaxClockOffsetNs && at <= kMaxClockOffsetNs;
    };
    if (ck.has_start && !usable(ck.start_offset_ns, ck.start_error_ns, ck.start_at_ns)) {
      ck.has_start = false;
      m.notes.push_back(who + " measured at start is not usable (not a number, or beyond +-2^61 ns): left out");
    }
    if (ck.has_close && !usable(ck.close_offset_ns, ck.close_error_ns, ck.close_at_ns)) {
      ck.has_close = false;
      m.notes.push_back(who + " measured at close is not usable (not a number, or beyond +-2^61 ns): left out");
    }
    if (ck.has_start && ck.has_close && ck.close_at_ns > ck.start_at_ns) {
      const double drift = std::fabs(static_cast<double>(ck.close_offset_ns - ck.start_offset_ns)) /
                           static_cast<double>(ck.close_at_ns - ck.start_at_ns);
      if (drift > kMaxClockDrift) {
        ck.has_close = false;
        m.notes.push_back(who + " changed by " + std::to_string(static_cast<int64_t>(drift * 1e6)) +
                          " ppm between start and close, more than a clock drifts: the start offset is used alone");
      }
    }
    if (!ck.has_start && !ck.has_close) {
      m.notes.push_back("rank " + std::to_string(ck.rank) + " is left on its own clock (no usable offset to rank 0)");
      continue;
    }
    ck.applied = true;
    // Each time by the offset at that time: with drift, one offset per range (its start's) moved
    // a child's end past its parent's, and the loader split them over two lanes ("main #2").
    auto shift = [&](int64_t& t) {  // saturating: a stored time of INT64_MIN stays the earliest
      int64_t out = 0;
      if (__builtin_sub_overflow(t, ck.offset_at(t), &out)) out = t < 0 ? INT64_MIN : INT64_MAX;
      t = out;
    };
    for (size_t i = n_ranges; i < m.ranges.rows().size(); ++i) {
      TraceRange& r = m.ranges.rows()[i];
      if (r.rank != ck.rank) continue;
      shift(r.start_ns);
      shift(r.end_ns);
    }
    for (size_t i = n_steps; i < m.steps.size(); ++i)
      if (m.steps[i].rank == ck.rank) {
        shift(m.steps[i].start_ns);
        shift(m.steps[i].end_ns);
      }
    for (size_t i = n_mem; i < m.memory.size(); ++i)
      if (m.memory[i].rank == ck.rank) shift(m.memory[i].t_ns);
    for (size_t i = n_cat; i < m.memory_categories.size(); ++i)
      if (m.memory_categories[i].rank == ck.rank) shift(m.memory_categories[i].t_ns);
    for (size_t i = n_rt; i < m.runtime.size(); ++i)
      if (m.runtime[i].rank == ck.rank) {
        shift(m.runtime[i].start_ns);
        shift(m.runtime[i].end_ns);
      }
  }
}

// Appends what one file's own Builder read (its strings, sources, ranks, ranges, steps, ...)
// to the run's Builder, as if the file had been read into it directly: strings and sources
// are interned in the order the file met them, so ids come out as the sequential reader's.
void merge_file(Builder& g, Builder& f) {
  TraceModel& m = g.m;
  TraceModel& x = f.m;
  check_same_run(g, f.run_id, f.world_size, f.run_id_file);
  std::vector<int32_t> sid(x.strings.size());
  for (size_t i = 0; i < x.strings.size(); ++i) sid[i] = g.intern(x.strings[i]);
  std::vector<int32_t> src(f.sources.size());
  for (size_t i = 0; i < f.sources.size(); ++i) {
    const SourceLane& s = f.sources[i];
    src[i] = g.source(s.rank, s.kind, s.id, s.name, s.order);
  }
  if (m.config_json.empty()) m.config_json = std::move(x.config_json);
  if (x.sp_size >= 0) m.sp_size = x.sp_size;  // the reader sets them only when the file has a ULYSSES_RUN row
  if (x.dp_size >= 0) m.dp_size = x.dp_size;
  m.from_nsys = x.from_nsys;
  m.notes.insert(m.notes.end(), x.notes.begin(), x.notes.end());
  m.ranks.insert(m.ranks.end(), x.ranks.begin(), x.ranks.end());
  const auto extra_base = static_cast<int32_t>(m.ranges.extras().size());
  m.ranges.extras().insert(m.ranges.extras().end(), x.ranges.extras().begin(), x.ranges.extras().end());
  for (auto& r : x.ranges.rows()) {  // in place: build_lanes takes the file's vector as it is
    r.name_id = sid[static_cast<size_t>(r.name_id)];
    r.lane = src[static_cast<size_t>(r.lane)];
    if (r.extra >= 0) r.extra += extra_base;
  }
  g.pending_ranges.push_back(std::move(x.ranges.rows()));
  m.steps.insert(m.steps.end(), x.steps.begin(), x.steps.end());
  for (auto p : x.memory) {
    p.label_id = sid[static_cast<size_t>(p.label_id)];
    m.memory.push_back(p);
  }
  m.memory_categories.insert(m.memory_categories.end(), x.memory_categories.begin(), x.memory_categories.end());
  m.peak_tensors.insert(m.peak_tensors.end(), x.peak_tensors.begin(), x.peak_tensors.end());
  for (auto c : x.runtime) {
    c.name_id = sid[static_cast<size_t>(c.name_id)];
    m.runtime.push_back(c);
  }
  m.clocks.insert(m.clocks.end(), x.clocks.begin(), x.clocks.end());
  m.documents.insert(m.documents.end(), x.documents.begin(), x.documents.end());
}

constexpr const char* kLeftOutOfAnotherRun = "left out (a rank file of another run in this folder)";

// Which rank files belong to the folder's run (every worker writes its run's id into
// ULYSSES_RUN.runId): the id most files carry, ties going to the lowest file (rank 0's). A file
// of another run (a copy, a rank of an earlier run left behind) is left out with a note instead
// of failing the whole folder. Files without an id (older traces) are kept.
std::vector<char> files_of_one_run(const std::vector<Builder>& per, const std::vector<std::string>& files,
                                   std::vector<std::string>* notes) {
  std::map<std::string, size_t> count;
  std::string run;
  size_t best = 0;
  for (const Builder& f : per)
    if (!f.run_id.empty() && ++count[f.run_id] > best) best = count[f.run_id], run = f.run_id;
  std::vector<char> keep(per.size(), 1);
  for (size_t i = 0; i < per.size(); ++i) {
    if (per[i].run_id.empty() || per[i].run_id == run) continue;
    keep[i] = 0;
    notes->push_back(describe(files[i]) + " is of run '" + per[i].run_id + "', " + std::to_string(best) +
                     " other rank file(s) of the folder of run '" + run + "': " + kLeftOutOfAnotherRun);
  }
  return keep;
}

// The rank files of a Ulysses run folder read at once, one Builder per file on up to
// opts.threads threads, then merged in file order. Returns false (b untouched) when a file
// turned out not to be a plain Ulysses rank file (an nsys export named rank0.sqlite, ...):
// the caller then reads the folder the sequential way, which handles every kind.
bool read_rank_files_parallel(Builder& b, const std::vector<std::string>& files, const LoadOptions& opts,
                              std::map<int32_t, std::string>& claimed) {
  std::vector<Builder> per(files.size());
  std::vector<std::exception_ptr> err(files.size());
  std::vector<char> cached(files.size(), 0), written(files.size(), 0);
  parallel_for(files.size(), opts.threads, [&](size_t i) {
    try {
      // Probed before the file is read (a write after the read can tell whether it changed).
      const RankFileCacheProbe probe = probe_rank_file_cache(files[i], static_cast<int32_t>(i), opts);
      cached[i] = read_rank_file_cache(probe, &per[i]);
      if (cached[i]) per[i].run_id_file = files[i];  // the file its run id was read from
      if (!cached[i]) {
        per[i].m.sp_size = per[i].m.dp_size = -1;  // "not set by the file"
        read_file(per[i], files[i], static_cast<int32_t>(i), opts);
        order_file_ranges(per[i].m.ranges.rows());
        if (opts.write_file_caches) written[i] = write_rank_file_cache(probe, files[i], opts, per[i]);
      }
      if (opts.align_clocks) align_to_rank0(per[i].m, 0, 0, 0, 0, 0, 0);
    } catch (...) {
      err[i] = std::current_exception();
    }
  });
  for (size_t i = 0; i < files.size(); ++i) {
    if (err[i]) std::rethrow_exception(err[i]);  // the first failing file, as the sequential reader
    if (per[i].m.format != "ulysses" || !per[i].foreign.empty()) return false;
  }
  if (opts.stats) {
    for (size_t i = 0; i < files.size(); ++i) {
      opts.stats->from_file_cache += cached[i];
      opts.stats->file_caches_written += written[i];
    }
  }
  const std::vector<char> keep = files_of_one_run(per, files, &b.m.notes);
  for (size_t i = 0; i < files.size(); ++i)
    for (const auto& rk : per[i].m.ranks) {
      if (!keep[i]) break;
      auto [it, fresh] = claimed.emplace(rk.rank, files[i]);
      if (!fresh)
        throw TraceError("two trace files claim rank " + std::to_string(rk.rank) + ": " + it->second + " and " +
                         files[i] + "; remove the stray copy");
    }
  for (size_t i = 0; i < files.size(); ++i)
    if (keep[i]) merge_file(b, per[i]);
  return true;
}

}  // namespace

TraceModel detail::model_of_file_builders(const std::vector<Builder*>& files, const LoadOptions& opts) {
  Builder g;
  for (Builder* f : files) {
    if (opts.align_clocks) align_to_rank0(f->m, 0, 0, 0, 0, 0, 0);
    merge_file(g, *f);
  }
  finish(g, opts);
  if (opts.seal) g.m.ranges.seal(opts.legacy ? 1 : opts.threads);
  return std::move(g.m);
}

namespace {

// Whether two files hold the same bytes (the second of a pair of equal sizes: read only then).
bool same_file_content(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;  // a hard link or a symlink to the other
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::vector<char> x(1 << 16), y(1 << 16);
  while (fa && fb) {
    fa.read(x.data(), static_cast<std::streamsize>(x.size()));
    fb.read(y.data(), static_cast<std::streamsize>(y.size()));
    if (fa.gcount() != fb.gcount() || std::memcmp(x.data(), y.data(), static_cast<size_t>(fa.gcount())) != 0)
      return false;
  }
  return !fa && !fb;
}

std::string folder_file_name(const std::string& p) { return fs::path(p).filename().string(); }

}  // namespace

// A folder's inputs before any is read: the same trace twice (a copy counted its ranks twice)
// and traces of two tools (a PyTorch profiler JSON beside an Nsight export: one of them was
// passed over unsaid) are refused, naming the files; trace files a run folder's rank files
// leave unread are named in a note.
static void check_folder_inputs(const std::string& dir, const std::vector<std::string>& files,
                                std::vector<std::string>* notes) {
  std::error_code ec;
  // Copies: files of one size compared byte for byte (distinct sizes cost nothing). A run's own
  // rank<N>.sqlite files are left to the rank check ("two trace files claim rank N"): two ranks
  // killed before their first step leave byte-identical files that are no copy.
  const std::vector<std::string> own = find_rank_files(dir);
  std::map<std::uintmax_t, std::vector<std::string>> by_size;
  for (const auto& f : files)
    if (fs::is_regular_file(f, ec) && std::find(own.begin(), own.end(), f) == own.end())
      by_size[fs::file_size(f, ec)].push_back(f);
  for (const auto& [size, same] : by_size)
    for (size_t i = 0; i < same.size() && size > 0; ++i)
      for (size_t j = i + 1; j < same.size(); ++j)
        if (same_file_content(same[i], same[j]))
          throw TraceError("'" + dir + "' holds the same trace twice: " + folder_file_name(same[i]) + " and " +
                           folder_file_name(same[j]) +
                           " have the same content (a copy?); its ranks would count twice. Remove one of them");
  // Two tools: JSON (PyTorch profiler) beside SQLite (Nsight Systems export, Ulysses trace).
  std::string a_json, a_sqlite;
  for (const auto& f : files) {
    if (detail::looks_like_json(f)) {
      if (a_json.empty()) a_json = f;
    } else if (detail::has_sqlite_header(f) && a_sqlite.empty()) {
      a_sqlite = f;
    }
  }
  if (!a_json.empty() && !a_sqlite.empty())
    throw TraceError("'" + dir + "' mixes a PyTorch profiler trace (" + folder_file_name(a_json) +
                     ") and an SQLite trace (" + folder_file_name(a_sqlite) +
                     "): they would be read as ranks of one run. Keep one tool's traces in the folder (move the others "
                     "to a folder of their own)");
  // Rank files beside foreign traces in the same folder: the rank files are read, the others named.
  const std::vector<std::string> ranks = find_rank_files(dir);
  if (!ranks.empty() && fs::path(ranks.front()).parent_path() == fs::path(dir)) {
    std::string unread;
    int n = 0;
    for (const auto& f : find_foreign_files(dir))
      if (std::find(files.begin(), files.end(), f) == files.end() && ++n <= 4)
        unread += (unread.empty() ? "" : ", ") + folder_file_name(f);
    if (n > 0)
      notes->push_back(unread + (n > 4 ? " and " + std::to_string(n - 4) + " more" : std::string()) +
                       (n == 1 ? " is" : " are") +
                       " in the folder but not read: its trace is its rank<N>.sqlite files (open the other file on "
                       "its own)");
  }
}

// Rank files that are one Nsight Systems export copied under several names (rank0.sqlite and
// rank1.sqlite of one profile read as two ranks, issue 54): each copy is left out with a note.
// Ulysses rank files are not compared here: ranks killed before their first step leave
// byte-identical files that are no copy, and the rank check names real duplicates.
// (Copies under other names are refused by check_folder_inputs.)
static void drop_copied_exports(const std::string& dir, std::vector<std::string>& files,
                                std::vector<std::string>* notes) {
  if (files.size() < 2) return;
  const std::vector<std::string> own = find_rank_files(dir);
  std::error_code ec;
  auto is_ulysses = [](const std::string& f) {
    // A rank killed mid-run leaves its pages in the write-ahead log, which immutable=1 does not
    // read: its main file can then equal another rank's byte for byte without being a copy.
    std::error_code wal_ec;
    if (fs::file_size(f + "-wal", wal_ec) > 0 && !wal_ec) return true;
    try {
      sql::Db db(sqlite_uri(f) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI);
      return db.has_table("ULYSSES_RUN") || db.has_table("ULYSSES_RANKS");
    } catch (const std::exception&) {
      return true;  // unreadable: left to the reader, which names it
    }
  };
  std::vector<std::string> kept;
  for (const auto& f : files) {
    const std::string* original = nullptr;
    if (std::find(own.begin(), own.end(), f) != own.end() && detail::has_sqlite_header(f) && !is_ulysses(f))
      for (const auto& k : kept)
        if (fs::file_size(k, ec) == fs::file_size(f, ec) && same_file_content(k, f)) {
          original = &k;
          break;
        }
    if (!original) {
      kept.push_back(f);
      continue;
    }
    notes->push_back(folder_file_name(f) + " is a byte-for-byte copy of " + folder_file_name(*original) +
                     " (one Nsight Systems export under two names): left out, its processes would count as "
                     "another rank's");
  }
  files = kept;
}

std::vector<std::string> trace_input_files(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return {};
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files = find_rank_files(path);
  if (files.empty()) files = find_foreign_files(path);
  return files;
}

TraceModel load_trace(const std::string& path) { return load_trace(path, LoadOptions{}); }

TraceModel load_trace(const std::string& path, const LoadOptions& opts) {
  std::error_code ec;
  if (path.empty()) throw TraceError("no trace path given");
  if (!fs::exists(path, ec)) {
    throw TraceError("'" + path + "' does not exist (expected a run directory or a .sqlite trace)");
  }
  std::vector<std::string> files = trace_input_files(path);
  if (fs::is_directory(path, ec)) {
    if (files.empty()) {
      // The *.json files that were passed over, and why: "nor PyTorch profiler traces" next to
      // an empty rank0.json left the user guessing.
      std::vector<std::pair<std::string, bool>> jsons;    // name, empty
      if (!fs::exists(run_layout::run_record(path), ec))  // a run folder's config.json is no trace
        for (const auto& e : fs::directory_iterator(path, ec)) {
          const std::string name = e.path().filename().string();
          if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 && e.is_regular_file(ec))
            jsons.emplace_back(name, e.file_size(ec) == 0);
        }
      std::sort(jsons.begin(), jsons.end());
      std::string passed_over;
      for (size_t i = 0; i < jsons.size() && i < 4; ++i)
        passed_over += (i ? ", " : "") + jsons[i].first +
                       (jsons[i].second ? " is empty" : " is not a profiler trace (no traceEvents)");
      if (jsons.size() > 4) passed_over += ", and " + std::to_string(jsons.size() - 4) + " more";
      // A run folder says why, where it can: profiling off in its config.json, or a run that
      // ended before a rank wrote its trace (stopped at start-up: "was the run started with
      // profile.enabled = true?" when it was).
      std::string why = "was the run started with profile.enabled = true?";
      auto small_json = [&](const char* name) {
        const fs::path f = fs::path(path) / name;
        std::error_code e;
        if (!fs::is_regular_file(f, e) || fs::file_size(f, e) > (1u << 20)) return nlohmann::json();
        std::ifstream in(f, std::ios::binary);
        nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        return j.is_object() ? j : nlohmann::json();
      };
      const nlohmann::json cfg = small_json(run_layout::kConfig);
      const RunRecordFile rec = read_run_record_file(run_layout::run_record(path).string());
      const nlohmann::json* prof = cfg.contains("profile") && cfg["profile"].is_object() ? &cfg["profile"] : nullptr;
      if (prof && prof->contains("enabled") && (*prof)["enabled"] == false)
        why = "profiling was off: profile.enabled = false in its config.json";
      else if (rec.status_known && rec.record.status != RunStatus::Finished)
        why = "the run's status is " + to_string(rec.record.status) + ": it ended before a rank wrote its trace?";
      throw TraceError("'" + path + "' holds no trace files (expected " +
                       (run_layout::trace_dir(path) / "rank*.sqlite").string() + "; " + why +
                       "), nor Nsight Systems exports (*.sqlite) nor PyTorch profiler traces (*.json)" +
                       (passed_over.empty() ? std::string() : ": " + passed_over));
    }
  }
  Builder b;
  b.m.source = path;
  if (fs::is_directory(path, ec)) {
    drop_copied_exports(path, files, &b.m.notes);
    check_folder_inputs(path, files, &b.m.notes);
  }
  std::map<int32_t, std::string> claimed;  // rank -> the file that holds it
  const bool rank_folder = files.size() > 1 && fs::is_directory(path, ec) && !find_rank_files(path).empty();
  if (opts.stats) opts.stats->files += static_cast<int>(files.size());
  const bool parallel = !opts.legacy && rank_folder && read_rank_files_parallel(b, files, opts, claimed);
  if (!parallel) claimed.clear();
  for (size_t i = 0; i < files.size() && !parallel; ++i) {
    const size_t before = b.m.ranks.size();
    const size_t n_ranges = b.m.ranges.rows().size(), n_steps = b.m.steps.size(), n_mem = b.m.memory.size(),
                 n_rt = b.m.runtime.size(), n_clocks = b.m.clocks.size(), n_cat = b.m.memory_categories.size();
    read_file(b, files[i], static_cast<int32_t>(i), opts);
    if (opts.align_clocks) align_to_rank0(b.m, n_clocks, n_ranges, n_steps, n_mem, n_rt, n_cat);
    // A run folder must hold each rank once: two files claiming one rank, or a rank
    // without a file, is reported instead of read silently.
    if (b.m.format != "ulysses") continue;
    for (size_t k = before; k < b.m.ranks.size(); ++k) {
      const int32_t r = b.m.ranks[k].rank;
      auto [it, fresh] = claimed.emplace(r, files[i]);
      if (!fresh)
        throw TraceError("two trace files claim rank " + std::to_string(r) + ": " + it->second + " and " + files[i] +
                         "; remove the stray copy");
    }
  }
  if (b.m.format == "ulysses" && fs::is_directory(path, ec) && !claimed.empty()) {
    // A file named rank<N>.sqlite holds rank N: one claiming rank 5 was reported as "ranks 1-4
    // missing" (of 6), two that swapped their claims passed unnoticed.
    for (const auto& [r, file] : claimed) {
      if (const int32_t named = rank_in_file_name(file); named >= 0 && named != r)
        throw TraceError(describe(file) + " is named for rank " + std::to_string(named) + " but holds rank " +
                         std::to_string(r) +
                         " (ULYSSES_RANKS): renamed, or edited? Each rank<N>.sqlite must hold rank N");
    }
    const int64_t world = std::max<int64_t>(int64_t{b.m.sp_size} * b.m.dp_size, claimed.rbegin()->first + int64_t{1});
    std::string missing;
    int64_t n_missing = 0;
    for (int64_t r = 0; r < world && r < (int64_t{1} << 20); ++r)
      if (!claimed.count(static_cast<int32_t>(r)) && ++n_missing <= 8)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (n_missing > 0) {
      std::string left_out;  // files of another run, left out above: often the missing rank's
      for (const std::string& n : b.m.notes)
        if (n.find(kLeftOutOfAnotherRun) != std::string::npos) left_out += "; " + n;
      throw TraceError(path + ": the trace of rank(s) " + missing +
                       (n_missing > 8 ? " and " + std::to_string(n_missing - 8) + " more" : "") +
                       " is missing (the run had " + std::to_string(world) + " ranks; expected " +
                       (run_layout::trace_dir(path) / "rank<r>.sqlite").string() + " for each)" + left_out);
    }
    // The run folder's record of the run against its trace: a run.json of another world size
    // (another run's, or a trace copied in) was passed over unsaid.
    const fs::path record = run_layout::run_record(path);
    const RunRecordFile rec = read_run_record_file(record.string());
    if (rec.record.world_size > 0 && rec.record.world_size != world)
      b.m.notes.push_back(describe(record.string()) + " says world_size " + std::to_string(rec.record.world_size) +
                          ", but the trace files are of a run of " + std::to_string(world) +
                          " ranks: run.json is another run's, or the trace was copied in");
  }
  finish(b, opts);
  if (opts.seal) b.m.ranges.seal(opts.legacy ? 1 : opts.threads);
  return std::move(b.m);
}

}  // namespace ulysses::prof
