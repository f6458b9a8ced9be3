// Writer of one rank's trace file: schema, run/rank rows, and batched prepared inserts.
#include "ulysses/profiler/trace_writer.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "ulysses/profiler/sqlite_db.hpp"
#include "ulysses/profiler/schema.hpp"

namespace ulysses::prof {

namespace {
// ARGB colors per phase for NVTX viewers (comm warm, compute cool).
uint32_t phase_color(Phase p) {
  switch (p) {
    case Phase::A2ASeqToHead:
      return 0xFFE4572E;
    case Phase::A2AHeadToSeq:
      return 0xFFF3A712;
    case Phase::GradAllReduce:
      return 0xFFA8201A;
    case Phase::RingStep:
      return 0xFFD81B60;
    case Phase::Attention:
      return 0xFF29335C;
    case Phase::QkvProj:
      return 0xFF4C9F70;
    case Phase::OutProj:
      return 0xFF1E91D6;
    case Phase::Mlp:
      return 0xFF8FC93A;
    default:
      return 0xFF9E9E9E;
  }
}

// Ranges are buffered and written kBatch at a time with multi-row INSERT statements: one
// sqlite3_step per kBatch rows instead of per row removes most per-statement VDBE overhead
// (open cursor, halt, reset). The buffer is always flushed before COMMIT, so a committed step
// holds all its ranges (crash safety is unchanged).
constexpr int kBatch = 32;
constexpr int kNvtxCols = 7;    // start, end, eventType, category, color, globalTid, textId
constexpr int kRangeCols = 11;  // step .. bytesRecv, pgId, seq (eventId: see flush_ranges)
constexpr int kRangePhase = 1;  // index of phase in Pending::range (format 4: it is `category`)

// Format 3's layout (TracerOptions::trace_format = 3): the schema's tables, less NVTX_EVENTS'
// ulysses* columns, and ULYSSES_RANGES as the table it was, written row for row beside it.
constexpr const char* kFormat3Sql =
    "DROP VIEW ULYSSES_RANGES;"
    "ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesStep; ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesDirection;"
    "ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesLayer; ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesHeadBegin;"
    "ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesHeadEnd; ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesChunk;"
    "ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesBytesSent; ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesBytesRecv;"
    "ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesPgId; ALTER TABLE NVTX_EVENTS DROP COLUMN ulyssesSeq;"
    "CREATE TABLE ULYSSES_RANGES (eventId INTEGER NOT NULL PRIMARY KEY, step INTEGER NOT NULL,"
    " phase INTEGER NOT NULL, direction INTEGER NOT NULL, layer INTEGER NOT NULL, headBegin INTEGER NOT NULL,"
    " headEnd INTEGER NOT NULL, chunk INTEGER NOT NULL, bytesSent INTEGER NOT NULL, bytesRecv INTEGER NOT NULL,"
    " pgId INTEGER NOT NULL DEFAULT -1, seq INTEGER NOT NULL DEFAULT -1);"
    "PRAGMA user_version = 3;";

std::string multi_row(const std::string& head, const char* row, int rows) {
  std::string sql = head;
  for (int i = 0; i < rows; ++i) {
    if (i) sql += ',';
    sql += row;
  }
  return sql;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

struct TraceWriter::Impl {
  sql::Db db;
  bool ring_rows_named[2] = {false, false};  // "ring kv", "ring dkv": named when first used
  bool zero_rows_named[2] = {false, false};  // "zero gather", "zero reduce-scatter": the same
  int64_t pid = 0;
  int32_t rank = 0;
  bool in_txn = false;
  std::unordered_map<std::string, int64_t> strings;
  int64_t next_string_id = 1;
  int64_t phase_string[static_cast<size_t>(Phase::Count)] = {};  // StringIds of phase names
  // A range waiting to be written: NVTX_EVENTS values (rowid first) then ULYSSES_RANGES values.
  struct Pending {
    int64_t nvtx[kNvtxCols];
    int64_t range[kRangeCols];
  };
  std::vector<Pending> pending;
  int64_t next_event_id = 1;  // NVTX_EVENTS rowid given explicitly (we are the only writer)
  bool format3 = false;       // also write ULYSSES_RANGES rows (format 3's layout)
  bool write_once = false;    // TracerOptions::write_once: rollback journal in memory, no fsync
  sql::Stmt ins_nvtx_batch, ins_range_batch;
  void flush_ranges();
  void prepare_inserts();
  void write_run_rows(const TracerOptions& opts);
  sql::Stmt ins_mem_cat, ins_peak_tensor;
  sql::Stmt ins_string, ins_nvtx, ins_range, ins_step, ins_mem, ins_kernel, ins_memcpy, ins_memset, ins_runtime,
      ins_metric, ins_thread, ins_ext_corr, ins_ext_id;
};

// The prepared INSERTs of every table the writer fills (format 3 or 4 layouts of NVTX_EVENTS).
void TraceWriter::Impl::prepare_inserts() {
  ins_string = sql::Stmt(db, "INSERT INTO StringIds(id, value) VALUES (?, ?)");
  // Format 4: one NVTX_EVENTS row per range, its Ulysses attributes in the ulysses* columns
  // (phase is `category`). Format 3: NVTX_EVENTS' nsys columns, then a ULYSSES_RANGES row.
  const std::string nvtx_head = format3 ? "INSERT INTO NVTX_EVENTS(start, end, eventType, category, color, globalTid, "
                                          "textId, domainId) VALUES "
                                        : "INSERT INTO NVTX_EVENTS(start, end, eventType, category, color, globalTid, "
                                          "textId, domainId, ulyssesStep, ulyssesDirection, ulyssesLayer, "
                                          "ulyssesHeadBegin, ulyssesHeadEnd, ulyssesChunk, ulyssesBytesSent, "
                                          "ulyssesBytesRecv, ulyssesPgId, ulyssesSeq) VALUES ";
  const char* nvtx_row = format3 ? "(?,?,?,?,?,?,?,0)" : "(?,?,?,?,?,?,?,0,?,?,?,?,?,?,?,?,?,?)";
  ins_nvtx = sql::Stmt(db, multi_row(nvtx_head, nvtx_row, 1));
  ins_nvtx_batch = sql::Stmt(db, multi_row(nvtx_head, nvtx_row, kBatch));
  if (format3) {
    const std::string range_head =
        "INSERT INTO ULYSSES_RANGES(eventId, step, phase, direction, layer, headBegin, headEnd, chunk, "
        "bytesSent, bytesRecv, pgId, seq) VALUES ";
    const char* range_row = "(NULL,?,?,?,?,?,?,?,?,?,?,?)";
    ins_range = sql::Stmt(db, multi_row(range_head, range_row, 1));
    ins_range_batch = sql::Stmt(db, multi_row(range_head, range_row, kBatch));
  }
  pending.reserve(kBatch);
  next_event_id = db.query_int("SELECT coalesce(max(rowid), 0) + 1 FROM NVTX_EVENTS");
  ins_step = sql::Stmt(db,
                       "INSERT OR REPLACE INTO ULYSSES_STEPS(rank, step, start, end, loss, lr, gradNorm, tokens, "
                       "tokensPerS, stepMs, maxMemBytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_mem = sql::Stmt(db,
                      "INSERT INTO ULYSSES_MEMORY(rank, timestamp, step, labelId, allocated, reserved, peak) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)");
  ins_mem_cat = sql::Stmt(db,
                          "INSERT INTO ULYSSES_MEMORY_CATEGORIES(rank, timestamp, step, edge, phase, layer, "
                          "parameters, gradients, optimizer, activations, logits, communication, other) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_peak_tensor = sql::Stmt(db,
                              "INSERT INTO ULYSSES_PEAK_TENSORS(rank, step, ord, name, category, dtype, shape, bytes, "
                              "blocks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_kernel =
      sql::Stmt(db,
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, "
                "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, "
                "blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0)");
  ins_memcpy =
      sql::Stmt(db,
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY(start, end, deviceId, contextId, streamId, correlationId, "
                "globalPid, bytes, copyKind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_memset =
      sql::Stmt(db,
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET(start, end, deviceId, contextId, streamId, correlationId, "
                "globalPid, value, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_runtime =
      sql::Stmt(db,
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, "
                "returnValue) VALUES (?, ?, 0, ?, ?, ?, ?)");
  ins_metric = sql::Stmt(db, "INSERT OR REPLACE INTO ULYSSES_METRICS(name, value) VALUES (?, ?)");
  ins_ext_corr = sql::Stmt(
      db,
      "INSERT INTO CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION(correlationId, externalKind, externalId, globalPid) "
      "VALUES (?, 3, ?, ?)");
  ins_ext_id = sql::Stmt(
      db,
      "INSERT OR REPLACE INTO ULYSSES_EXTERNAL_IDS(externalId, eventId, step, phase, direction, layer, headBegin, "
      "headEnd, chunk) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins_thread = sql::Stmt(db, "INSERT INTO ThreadNames(nameId, priority, globalTid) VALUES (?, 0, ?)");
}

// The run's own rows, written once: ULYSSES_RUN, ULYSSES_RANKS, ULYSSES_PHASES, PROCESSES and
// META_DATA_EXPORT.
void TraceWriter::Impl::write_run_rows(const TracerOptions& opts) {
  {
    sql::Stmt st(db,
                 "INSERT INTO ULYSSES_RUN(runId, configJson, worldSize, spSize, dpSize, clock, createdUtc) "
                 "VALUES (?, ?, ?, ?, ?, 'CLOCK_MONOTONIC', ?)");
    st.bind(1, opts.run_id);
    st.bind(2, opts.run_config_json);
    st.bind(3, static_cast<int64_t>(opts.world_size));
    st.bind(4, static_cast<int64_t>(opts.sp_size));
    st.bind(5, static_cast<int64_t>(opts.dp_size));
    st.bind(6, utc_now());
    st.run();
  }
  {
    sql::Stmt st(db,
                 "INSERT INTO ULYSSES_RANKS(rank, spRank, dpRank, device, hostname, pid, globalPid) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)");
    st.bind(1, static_cast<int64_t>(opts.rank));
    st.bind(2, static_cast<int64_t>(opts.sp_rank));
    st.bind(3, static_cast<int64_t>(opts.dp_rank));
    st.bind(4, opts.device);
    st.bind(5, opts.hostname);
    st.bind(6, pid);
    st.bind(7, make_global_pid(pid));
    st.run();
  }
  {
    sql::Stmt st(db, "INSERT INTO ULYSSES_PHASES(id, name, isComm) VALUES (?, ?, ?)");
    for (int p = 0; p < static_cast<int>(Phase::Count); ++p) {
      st.bind(1, static_cast<int64_t>(p));
      st.bind(2, std::string(phase_name(static_cast<Phase>(p))));
      st.bind(3, static_cast<int64_t>(phase_is_comm(static_cast<Phase>(p)) ? 1 : 0));
      st.run();
    }
  }
  {
    sql::Stmt st(db, "INSERT INTO PROCESSES(globalPid, pid, name) VALUES (?, ?, ?)");
    st.bind(1, make_global_pid(pid));
    st.bind(2, pid);
    st.bind(3, "rank " + std::to_string(opts.rank));
    st.run();
  }
  {
    sql::Stmt st(db, "INSERT INTO META_DATA_EXPORT(name, value) VALUES (?, ?)");
    const std::pair<const char*, std::string> meta[] = {
        {"EXPORT_PRODUCER", "ulysses-studio"},
        {"ULYSSES_SCHEMA_VERSION", std::to_string(trace_schema_version())},
        {"TIMESTAMP_CLOCK", "CLOCK_MONOTONIC"}};
    for (const auto& [k, v] : meta) {
      st.bind(1, std::string(k));
      st.bind(2, v);
      st.run();
    }
  }
}

TraceWriter::TraceWriter(const TracerOptions& opts, int64_t pid) : impl_(std::make_unique<Impl>()) {
  if (opts.trace_format != 0 && opts.trace_format != 3 && opts.trace_format != trace_schema_version()) {
    throw std::invalid_argument("trace_format " + std::to_string(opts.trace_format) + ": this build writes format " +
                                std::to_string(trace_schema_version()) + " or 3");
  }
  Impl& d = *impl_;
  d.pid = pid >= 0 ? pid : static_cast<int64_t>(::getpid());
  d.rank = opts.rank;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove(opts.path, ec);
  fs::remove(opts.path + "-wal", ec);
  fs::remove(opts.path + "-shm", ec);
  try {
    d.db = sql::Db(opts.path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot create trace file " + opts.path + ": " + e.what() +
                             " (does the directory exist and is it writable?)");
  }
  // WAL: readers (the studio) see every committed step while the run goes on; a killed
  // process keeps every committed transaction. synchronous=NORMAL: no fsync per commit
  // (durable against process death, which is what a crashing rank is).
  // write_once (simulated runs): neither, and no fsync at all (TracerOptions::write_once).
  d.write_once = opts.write_once;
  if (d.write_once) {
    d.db.exec("PRAGMA journal_mode=MEMORY");
    d.db.exec("PRAGMA synchronous=OFF");
  } else {
    d.db.exec("PRAGMA journal_mode=WAL");
    d.db.exec("PRAGMA synchronous=NORMAL");
    d.db.exec("PRAGMA wal_autocheckpoint=16384");  // checkpoint (and fsync) every ~64 MiB, not 4 MiB
  }
  d.db.exec("PRAGMA cache_size=-16384");
  d.db.exec("BEGIN");
  d.db.exec(trace_schema_sql());
  d.format3 = opts.trace_format == 3;
  if (d.format3) d.db.exec(kFormat3Sql);

  d.prepare_inserts();
  d.write_run_rows(opts);
  name_thread(kCommTid, "comm");  // the ring rows are named by their first range (write_range)
  d.db.exec("COMMIT");
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (...) {
  }
}

int64_t TraceWriter::pid() const { return impl_->pid; }

int64_t TraceWriter::string_id(const std::string& s) {
  Impl& d = *impl_;
  auto it = d.strings.find(s);
  if (it != d.strings.end()) return it->second;
  int64_t id = d.next_string_id++;
  d.ins_string.bind(1, id);
  d.ins_string.bind(2, s);
  d.ins_string.run();
  d.strings.emplace(s, id);
  return id;
}

void TraceWriter::name_thread(int64_t tid, const std::string& name) {
  Impl& d = *impl_;
  int64_t sid = string_id(name);
  d.ins_thread.bind(1, sid);
  d.ins_thread.bind(2, make_global_tid(d.pid, tid));
  d.ins_thread.run();
}

void TraceWriter::begin() {
  if (!impl_->in_txn && impl_->db.get()) {
    impl_->db.exec("BEGIN");
    impl_->in_txn = true;
  }
}

void TraceWriter::commit() {
  impl_->flush_ranges();
  if (impl_->in_txn) {
    impl_->db.exec("COMMIT");
    impl_->in_txn = false;
  }
}

// Rowids: NVTX_EVENTS is append-only and written only here, so SQLite's own rowid (max + 1,
// the cheap append path: no uniqueness probe as with an explicit key) is the id write_range
// returned; format 3's ULYSSES_RANGES is written row for row in the same order, so its eventId
// (its rowid) is too. Checked after every statement: a mismatch throws instead of mislinking rows.
void TraceWriter::Impl::flush_ranges() {
  if (pending.empty()) return;
  int64_t id = next_event_id - static_cast<int64_t>(pending.size());  // id of pending[0]
  sqlite3* h = db.get();
  auto check = [&](int64_t last, const char* table) {
    if (sqlite3_last_insert_rowid(h) != last) {
      throw std::runtime_error(std::string("trace writer: ") + table + " rowid " +
                               std::to_string(sqlite3_last_insert_rowid(h)) + " != expected " + std::to_string(last) +
                               " (was the trace file modified by another writer?)");
    }
  };
  // Binds pending range p as row r of statement n (and of u, format 3).
  const int row_params = format3 ? kNvtxCols : kNvtxCols + kRangeCols - 1;
  auto bind = [&](sqlite3_stmt* n, sqlite3_stmt* u, int r, const Pending& p) {
    int k = r * row_params + 1;
    for (int c = 0; c < kNvtxCols; ++c) sqlite3_bind_int64(n, k++, p.nvtx[c]);
    if (format3) {
      for (int c = 0; c < kRangeCols; ++c) sqlite3_bind_int64(u, r * kRangeCols + c + 1, p.range[c]);
    } else {
      for (int c = 0; c < kRangeCols; ++c)
        if (c != kRangePhase) sqlite3_bind_int64(n, k++, p.range[c]);
    }
  };
  size_t i = 0;
  try {
    // Full batches: one statement per kBatch rows in each table; the rest row by row.
    for (; i + kBatch <= pending.size(); i += kBatch, id += kBatch) {
      for (int r = 0; r < kBatch; ++r) bind(ins_nvtx_batch.get(), ins_range_batch.get(), r, pending[i + size_t(r)]);
      ins_nvtx_batch.run();
      check(id + kBatch - 1, "NVTX_EVENTS");
      if (format3) {
        ins_range_batch.run();
        check(id + kBatch - 1, "ULYSSES_RANGES");
      }
    }
    for (; i < pending.size(); ++i, ++id) {
      bind(ins_nvtx.get(), ins_range.get(), 0, pending[i]);
      ins_nvtx.run();
      check(id, "NVTX_EVENTS");
      if (format3) {
        ins_range.run();
        check(id, "ULYSSES_RANGES");
      }
    }
  } catch (...) {
    // The transaction is unusable for these rows; forget them and renumber from the file.
    pending.clear();
    try {
      next_event_id = db.query_int("SELECT coalesce(max(rowid), 0) + 1 FROM NVTX_EVENTS");
    } catch (...) {
    }
    throw;
  }
  pending.clear();
}

int64_t TraceWriter::write_range(const RangeRecord& r) {
  Impl& d = *impl_;
  const RangeInfo& i = r.info;
  size_t pi = static_cast<size_t>(i.phase) < static_cast<size_t>(Phase::Count) ? static_cast<size_t>(i.phase)
                                                                               : static_cast<size_t>(Phase::Other);
  if (d.phase_string[pi] == 0) d.phase_string[pi] = string_id(phase_name(static_cast<Phase>(pi)));
  if ((r.tid == kRingTid || r.tid == kRingGradTid) && !d.ring_rows_named[r.tid == kRingGradTid]) {
    d.ring_rows_named[r.tid == kRingGradTid] = true;
    name_thread(r.tid, r.tid == kRingTid ? "ring kv" : "ring dkv");
  }
  if ((r.tid == kZeroGatherTid || r.tid == kZeroReduceTid) && !d.zero_rows_named[r.tid == kZeroReduceTid]) {
    d.zero_rows_named[r.tid == kZeroReduceTid] = true;
    name_thread(r.tid, r.tid == kZeroGatherTid ? "zero gather" : "zero reduce-scatter");
  }
  const int64_t id = d.next_event_id++;
  d.pending.push_back(
      {{r.start_ns, r.end_ns, static_cast<int64_t>(r.push_pop ? kNvtxPushPopRange : kNvtxStartEndRange),
        static_cast<int64_t>(i.phase), static_cast<int64_t>(phase_color(i.phase)), make_global_tid(d.pid, r.tid),
        d.phase_string[pi]},
       {r.step, static_cast<int64_t>(i.phase), static_cast<int64_t>(i.dir), static_cast<int64_t>(i.layer),
        static_cast<int64_t>(i.head_begin), static_cast<int64_t>(i.head_end), static_cast<int64_t>(i.chunk),
        i.bytes_sent, i.bytes_recv, static_cast<int64_t>(i.pg), i.seq}});
  // Outside an explicit transaction every write is its own commit: write now.
  if (!d.in_txn || d.pending.size() >= static_cast<size_t>(kBatch)) d.flush_ranges();
  return id;
}

void TraceWriter::write_step(const StepRecord& rec, int64_t start_ns, int64_t end_ns) {
  auto& s = impl_->ins_step;
  s.bind(1, static_cast<int64_t>(impl_->rank));
  s.bind(2, rec.step);
  s.bind(3, start_ns);
  s.bind(4, end_ns);
  s.bind(5, rec.loss);
  s.bind(6, rec.lr);
  s.bind(7, rec.grad_norm);
  s.bind(8, rec.tokens);
  s.bind(9, rec.tokens_per_s);
  s.bind(10, rec.step_ms);
  s.bind(11, rec.max_mem_bytes);
  s.run();
}

void TraceWriter::write_memory(int64_t t_ns, int64_t step, const std::string& label, const MemorySample& m) {
  auto& s = impl_->ins_mem;
  int64_t lid = string_id(label);
  s.bind(1, static_cast<int64_t>(impl_->rank));
  s.bind(2, t_ns);
  s.bind(3, step);
  s.bind(4, lid);
  s.bind(5, m.allocated);
  s.bind(6, m.reserved);
  s.bind(7, m.peak);
  s.run();
}

void TraceWriter::write_memory_categories(int64_t t_ns, int64_t step, MemEdge edge, int32_t phase, int32_t layer,
                                          const MemoryCategories& c) {
  auto& s = impl_->ins_mem_cat;
  s.bind(1, static_cast<int64_t>(impl_->rank));
  s.bind(2, t_ns);
  s.bind(3, step);
  s.bind(4, static_cast<int64_t>(edge));
  s.bind(5, static_cast<int64_t>(phase));
  s.bind(6, static_cast<int64_t>(layer));
  for (int k = 0; k < kMemCategories; ++k) s.bind(7 + k, c.bytes[k]);
  s.run();
}

void TraceWriter::write_peak_tensors(int64_t step, const std::vector<PeakTensor>& rows) {
  auto& s = impl_->ins_peak_tensor;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PeakTensor& t = rows[i];
    s.bind(1, static_cast<int64_t>(impl_->rank));
    s.bind(2, step);
    s.bind(3, static_cast<int64_t>(i));
    s.bind(4, t.name);
    s.bind(5, t.category);
    s.bind(6, t.dtype);
    s.bind(7, t.shape);
    s.bind(8, t.bytes);
    s.bind(9, t.blocks);
    s.run();
  }
}

// Columns 1-7 shared by the kernel, memcpy and memset tables: start, end, deviceId,
// contextId, streamId, correlationId, globalPid.
template <class Record>
void bind_gpu_activity(sql::Stmt& s, const Record& r, int64_t global_pid) {
  s.bind(1, r.start_ns);
  s.bind(2, r.end_ns);
  s.bind(3, static_cast<int64_t>(r.device));
  s.bind(4, static_cast<int64_t>(r.context));
  s.bind(5, static_cast<int64_t>(r.stream));
  s.bind(6, r.correlation);
  s.bind(7, global_pid);
}

void TraceWriter::write_kernel(const KernelRecord& k) {
  Impl& d = *impl_;
  int64_t name = string_id(k.name);
  auto& s = d.ins_kernel;
  bind_gpu_activity(s, k, make_global_pid(d.pid));
  s.bind(8, name);
  s.bind(9, name);
  s.bind(10, static_cast<int64_t>(k.registers));
  for (int j = 0; j < 3; ++j) s.bind(11 + j, static_cast<int64_t>(k.grid[j]));
  for (int j = 0; j < 3; ++j) s.bind(14 + j, static_cast<int64_t>(k.block[j]));
  s.bind(17, static_cast<int64_t>(k.static_smem));
  s.bind(18, static_cast<int64_t>(k.dynamic_smem));
  s.run();
}

void TraceWriter::write_memcpy(const MemcpyRecord& m) {
  Impl& d = *impl_;
  auto& s = m.is_memset ? d.ins_memset : d.ins_memcpy;
  bind_gpu_activity(s, m, make_global_pid(d.pid));
  if (m.is_memset) {
    s.bind(8, static_cast<int64_t>(m.value));
    s.bind(9, m.bytes);
  } else {
    s.bind(8, m.bytes);
    s.bind(9, static_cast<int64_t>(m.copy_kind));
  }
  s.run();
}

void TraceWriter::write_runtime(const RuntimeRecord& r) {
  Impl& d = *impl_;
  int64_t name = string_id(r.name);
  auto& s = d.ins_runtime;
  s.bind(1, r.start_ns);
  s.bind(2, r.end_ns);
  s.bind(3, make_global_tid(d.pid, r.tid));
  s.bind(4, r.correlation);
  s.bind(5, name);
  s.bind(6, static_cast<int64_t>(r.return_value));
  s.run();
}

void TraceWriter::write_external_correlation(int64_t correlation, int64_t external_id) {
  Impl& d = *impl_;
  auto& s = d.ins_ext_corr;
  s.bind(1, correlation);
  s.bind(2, external_id);
  s.bind(3, make_global_pid(d.pid));
  s.run();
}

void TraceWriter::write_external_id(int64_t external_id, int64_t event_id, int64_t step, const RangeInfo& i) {
  auto& s = impl_->ins_ext_id;
  s.bind(1, external_id);
  if (event_id >= 0)
    s.bind(2, event_id);
  else
    s.bind_null(2);
  s.bind(3, step);
  s.bind(4, static_cast<int64_t>(i.phase));
  s.bind(5, static_cast<int64_t>(i.dir));
  s.bind(6, static_cast<int64_t>(i.layer));
  s.bind(7, static_cast<int64_t>(i.head_begin));
  s.bind(8, static_cast<int64_t>(i.head_end));
  s.bind(9, static_cast<int64_t>(i.chunk));
  s.run();
}

void TraceWriter::write_gpu_info(int32_t device, const std::string& name, int64_t total_memory, int32_t sm_count,
                                 int32_t cc_major, int32_t cc_minor) {
  sql::Stmt st(
      impl_->db,
      "INSERT INTO TARGET_INFO_GPU(vmId, id, name, totalMemory, smCount, cuDevice, computeMajor, computeMinor) "
      "VALUES (0, ?, ?, ?, ?, ?, ?, ?)");
  st.bind(1, static_cast<int64_t>(device));
  st.bind(2, name);
  st.bind(3, total_memory);
  st.bind(4, static_cast<int64_t>(sm_count));
  st.bind(5, static_cast<int64_t>(device));
  st.bind(6, static_cast<int64_t>(cc_major));
  st.bind(7, static_cast<int64_t>(cc_minor));
  st.run();
}

void TraceWriter::set_metric(const std::string& name, double value) {
  auto& s = impl_->ins_metric;
  s.bind(1, name);
  s.bind(2, value);
  s.run();
}

void TraceWriter::write_documents(const std::vector<DocumentShard>& rows) {
  sql::Stmt st(impl_->db,
               "INSERT INTO ULYSSES_DOCUMENTS(rank, step, sequence, packed, piece, shardBegin, shardEnd, document, "
               "docTokens, docOffset, begin, end) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const DocumentShard& d : rows) {
    st.bind(1, static_cast<int64_t>(impl_->rank));
    st.bind(2, d.step);
    st.bind(3, d.sequence);
    st.bind(4, d.packed);
    st.bind(5, static_cast<int64_t>(d.piece));
    st.bind(6, d.shard_begin);
    st.bind(7, d.shard_end);
    st.bind(8, d.document);
    st.bind(9, d.doc_tokens);
    st.bind(10, d.doc_offset);
    st.bind(11, d.begin);
    st.bind(12, d.end);
    st.run();
  }
}

void TraceWriter::write_clock(const std::string& kind, const ClockOffset& c) {
  sql::Stmt st(impl_->db,
               "INSERT INTO ULYSSES_CLOCK(rank, kind, offsetNs, errorNs, rttNs, rounds, measuredAt) VALUES (?, ?, ?, "
               "?, ?, ?, ?)");
  st.bind(1, static_cast<int64_t>(impl_->rank));
  st.bind(2, kind);
  st.bind(3, c.offset_ns);
  st.bind(4, c.error_ns);
  st.bind(5, c.rtt_ns);
  st.bind(6, static_cast<int64_t>(c.rounds));
  st.bind(7, c.measured_at_ns);
  st.run();
}

void TraceWriter::close() {
  Impl& d = *impl_;
  if (!d.db.get()) return;
  commit();
  d.ins_string = {};
  d.ins_nvtx = {};
  d.ins_range = {};
  d.ins_nvtx_batch = {};
  d.ins_range_batch = {};
  d.ins_step = {};
  d.ins_mem = {};
  d.ins_mem_cat = {};
  d.ins_kernel = {};
  d.ins_memcpy = {};
  d.ins_memset = {};
  d.ins_runtime = {};
  d.ins_metric = {};
  d.ins_thread = {};
  d.ins_ext_corr = {};
  d.ins_ext_id = {};
  if (d.write_once) {  // never in WAL mode: the file is already the finished rollback-mode file
    d.db.close();
    return;
  }
  try {
    d.db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  } catch (...) {
  }
  // A finished trace is one self-contained file in rollback mode: readers then need no -shm
  // or -wal beside it, so it opens from a read-only mount or a full disk (a WAL-mode file
  // could not: "unable to open database file", "disk I/O error"), and copying rank*.sqlite
  // alone copies all of it. A reader still attached (the studio following the run) keeps the
  // file in WAL mode: no wait for it (busy timeout 0), the file stays readable where it is.
  try {
    d.db.set_busy_timeout_ms(0);
    d.db.exec("PRAGMA journal_mode=DELETE");
  } catch (...) {
  }
  d.db.close();
}

}  // namespace ulysses::prof
