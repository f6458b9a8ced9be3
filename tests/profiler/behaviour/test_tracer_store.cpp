// Tracer -> SQLite -> load_trace round trip on a synthetic 2-rank x 2-layer x 2-step run,
// nsys column names of the shared tables, SIGKILL durability (synchronous writer, writer
// thread after flush, writer thread with steps still queued), and nsys-export loading.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/model_compare.hpp"
#include "profiler/test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/gpu_activity.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

using namespace ut;
using prof::Direction;
using prof::LaneKind;
using prof::Phase;

namespace {

std::vector<std::string> columns(sqlite3* db, const std::string& table) {
  std::vector<std::string> out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
  sqlite3_finalize(st);
  return out;
}

std::string query_text(sqlite3* db, const std::string& q) {
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, q.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, 0);
    out = t ? reinterpret_cast<const char*>(t) : "";
  }
  sqlite3_finalize(st);
  return out;
}

}  // namespace

TEST(TracerStore, RoundTripKeepsEveryRangeNestedWithBytes) {
  TempDir tmp;
  Synth s;
  record_run(tmp.path, s);
  prof::TraceModel m = prof::load_trace(tmp.path);

  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.sp_size, 2);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_FALSE(m.from_nsys);
  ASSERT_EQ(m.steps.size(), 4u);  // 2 ranks x 2 steps
  EXPECT_DOUBLE_EQ(m.steps[1].loss, 9.0);

  std::map<int, int> per_rank;
  std::map<std::pair<int, Phase>, int> per_phase;
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const auto& l = m.lanes[li];
    if (l.kind == LaneKind::HeadRange) continue;
    for (int64_t k = 0; k < l.count; ++k) {
      size_t i = static_cast<size_t>(l.first + k);
      const auto& r = m.ranges[i];
      EXPECT_EQ(r.lane, static_cast<int32_t>(li));
      EXPECT_EQ(r.rank, l.rank);
      EXPECT_LE(r.start_ns, r.end_ns);
      if (k > 0) {
        EXPECT_LE(m.ranges[i - 1].start_ns, r.start_ns) << "lane not sorted";
      }
      if (r.parent >= 0) {
        const auto& p = m.ranges[static_cast<size_t>(r.parent)];
        EXPECT_LE(p.start_ns, r.start_ns);
        EXPECT_GE(p.end_ns, r.end_ns);
        EXPECT_EQ(p.depth + 1, r.depth);
        EXPECT_EQ(p.lane, r.lane);
      } else {
        EXPECT_EQ(r.depth, 0);
      }
      ++per_rank[r.rank];
      ++per_phase[{r.rank, r.phase}];
      if (l.kind == LaneKind::HostThread) {
        // Main thread: the step range holds everything else of its step.
        if (r.phase == Phase::Step) {
          EXPECT_EQ(r.parent, -1);
        } else {
          ASSERT_GE(r.parent, 0);
          EXPECT_EQ(m.ranges[static_cast<size_t>(r.parent)].phase, Phase::Step);
        }
      }
      if (r.phase == Phase::A2ASeqToHead || r.phase == Phase::A2AHeadToSeq) {
        EXPECT_EQ(l.kind, LaneKind::Comm);
        EXPECT_EQ(m.extra(r).bytes_sent, Synth::bytes_sent(r.rank, r.layer));
        EXPECT_EQ(m.extra(r).bytes_recv, Synth::bytes_recv(r.rank, r.layer));
        EXPECT_EQ(r.head_begin, r.rank * 4);
        EXPECT_EQ(r.head_end, r.rank * 4 + 4);
      }
      if (r.phase == Phase::Attention) {
        EXPECT_EQ(r.head_begin, r.rank * 4);
      }
      EXPECT_GE(r.step, 0);
      EXPECT_LT(r.step, s.steps);
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(per_rank[r], s.steps * s.ranges_per_step()) << "rank " << r;
    EXPECT_EQ((per_phase[{r, Phase::Step}]), s.steps);
    EXPECT_EQ((per_phase[{r, Phase::A2ASeqToHead}]), s.steps * 2 * s.layers);
    EXPECT_EQ((per_phase[{r, Phase::Attention}]), s.steps * 2 * s.layers);
  }
  // Lanes: main + comm per rank, plus one head-range lane per rank ("heads 0-3", "heads 4-7").
  std::set<std::string> names;
  for (const auto& l : m.lanes) names.insert(std::to_string(l.rank) + ":" + l.name);
  EXPECT_TRUE(names.count("0:main"));
  EXPECT_TRUE(names.count("1:comm"));
  EXPECT_TRUE(names.count("0:heads 0-3"));
  EXPECT_TRUE(names.count("1:heads 4-7"));
  // Memory samples, one per step per rank, with a positive RSS.
  ASSERT_EQ(m.memory.size(), 4u);
  EXPECT_GT(m.memory[0].allocated, 0);
  EXPECT_EQ(m.strings[static_cast<size_t>(m.memory[0].label_id)], "after_step");

  // The layer table sees the recorded bytes: layer 1 fwd, 2 ranks x 2 steps x 2 a2a each.
  auto layers = prof::layer_table(m);
  ASSERT_EQ(layers.size(), 4u);  // 2 layers x {fwd, bwd}
  const auto& l1 = layers[2];
  EXPECT_EQ(l1.layer, 1);
  EXPECT_EQ(l1.dir, Direction::Forward);
  EXPECT_EQ(l1.a2a_bytes_sent, 2 * 2 * (Synth::bytes_sent(0, 1) + Synth::bytes_sent(1, 1)));
  EXPECT_EQ(l1.samples, 4);
}

TEST(TracerStore, StepWindowAndInactiveRangesAreNotRecorded) {
  TempDir tmp;
  auto o = options_for(tmp.path + "/rank0.sqlite", 0, 1);
  o.step_begin = 1;
  o.step_end = 1;
  auto t = prof::Tracer::open(o);
  Synth s;
  s.ranks = 1;
  for (int step = 0; step < 3; ++step) record_step(t.get(), 0, step, s);
  t->close();
  auto m = prof::load_trace(tmp.path + "/rank0.sqlite");
  ASSERT_EQ(m.steps.size(), 1u);
  EXPECT_EQ(m.steps[0].step, 1);
  for (const auto& r : m.ranges) EXPECT_EQ(r.step, 1);
}

TEST(TracerStore, NsysNamedTablesCarryNsysColumns) {
  // Column lists from the Nsight Systems "SQLite Export Schema Reference".
  const std::map<std::string, std::vector<std::string>> nsys = {
      {"StringIds", {"id", "value"}},
      {"ThreadNames", {"nameId", "priority", "globalTid"}},
      {"PROCESSES", {"globalPid", "pid", "name"}},
      {"META_DATA_EXPORT", {"name", "value"}},
      {"NVTX_EVENTS",
       {"start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid", "textId",
        "domainId", "uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value", "floatValue", "jsonTextId",
        "jsonText"}},
      {"CUPTI_ACTIVITY_KIND_KERNEL",
       {"start",
        "end",
        "deviceId",
        "contextId",
        "streamId",
        "correlationId",
        "globalPid",
        "demangledName",
        "shortName",
        "mangledName",
        "launchType",
        "cacheConfig",
        "registersPerThread",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
        "staticSharedMemory",
        "dynamicSharedMemory",
        "localMemoryPerThread",
        "localMemoryTotal",
        "gridId",
        "sharedMemoryExecuted",
        "graphNodeId",
        "sharedMemoryLimitConfig"}},
      {"CUPTI_ACTIVITY_KIND_MEMCPY",
       {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
        "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId", "srcContextId", "dstDeviceId", "dstContextId",
        "migrationCause", "graphNodeId", "virtualAddress"}},
      {"CUPTI_ACTIVITY_KIND_MEMSET",
       {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes",
        "graphNodeId", "memKind"}},
      {"CUPTI_ACTIVITY_KIND_RUNTIME",
       {"start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId"}},
      {"TARGET_INFO_GPU",
       {"vmId",
        "id",
        "name",
        "busLocation",
        "isDiscrete",
        "l2CacheSize",
        "totalMemory",
        "memoryBandwidth",
        "clockRate",
        "smCount",
        "pwGpuId",
        "uuid",
        "luid",
        "chipName",
        "cuDevice",
        "ctxswDevPath",
        "ctrlDevPath",
        "revision",
        "nodeMask",
        "constantMemory",
        "maxIPC",
        "maxRegistersPerBlock",
        "maxShmemPerBlock",
        "maxShmemPerBlockOptin",
        "maxShmemPerSm",
        "maxRegistersPerSm",
        "threadsPerWarp",
        "asyncEngines",
        "maxWarpsPerSm",
        "maxBlocksPerSm",
        "maxThreadsPerBlock",
        "maxBlockDimX",
        "maxBlockDimY",
        "maxBlockDimZ",
        "maxGridDimX",
        "maxGridDimY",
        "maxGridDimZ",
        "computeMajor",
        "computeMinor",
        "smMajor",
        "smMinor"}},
  };
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  prof::Tracer::open(options_for(path, 0, 1))->close();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (const auto& [table, cols] : nsys) {
    std::vector<std::string> got = columns(db, table);
    if (table == "NVTX_EVENTS" && got.size() > cols.size()) {
      // Format 4 appends the Ulysses attributes after nsys' columns, all named ulysses*.
      for (size_t c = cols.size(); c < got.size(); ++c) EXPECT_EQ(got[c].rfind("ulysses", 0), 0u) << got[c];
      EXPECT_EQ(got.size(), cols.size() + 10);
      got.resize(cols.size());
    }
    EXPECT_EQ(got, cols) << table;
  }
  EXPECT_EQ(query_text(db, "PRAGMA user_version"), std::to_string(prof::trace_schema_version()));
  // Closed, the trace is one self-contained file (rollback mode, no -wal or -shm beside it).
  EXPECT_EQ(query_text(db, "PRAGMA journal_mode"), "delete");
  sqlite3_close(db);
  EXPECT_FALSE(fs::exists(path + "-wal"));
  EXPECT_FALSE(fs::exists(path + "-shm"));
}

TEST(TracerStore, GlobalTidEncodesPidAndTidAsNsys) {
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  {
    auto t = prof::Tracer::open(options_for(path, 0, 1));
    Synth s;
    s.ranks = 1;
    record_step(t.get(), 0, 0, s);
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  // nsys recipe: PID = globalTid / 0x1000000 % 0x1000000, TID = globalTid % 0x1000000.
  EXPECT_EQ(query_text(db, "SELECT DISTINCT globalTid / 16777216 % 16777216 FROM NVTX_EVENTS"),
            std::to_string(getpid()));
  EXPECT_EQ(query_text(db,
                       "SELECT value FROM StringIds s JOIN ThreadNames t ON t.nameId = s.id "
                       "WHERE t.globalTid % 16777216 = " +
                           std::to_string(prof::kCommTid)),
            "comm");
  EXPECT_EQ(query_text(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59"), "13");  // 1 + 2*2*3
  EXPECT_EQ(query_text(db, "SELECT count(*) FROM NVTX_EVENTS n JOIN ULYSSES_RANGES u ON u.eventId = n.rowid"), "21");
  sqlite3_close(db);
}

// The writer buffers ranges and inserts them 32 rows per statement: the ids write_range
// returns must stay the NVTX_EVENTS rowids / ULYSSES_RANGES eventIds across full batches,
// remainders, writes outside a transaction, and every commit must carry all its ranges.
TEST(TracerStore, WriterBatchesKeepIdsLinkedAndCommitsEveryRange) {
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  prof::TraceWriter w(options_for(path, 0, 1), 4242);
  std::vector<int64_t> ids;
  auto write = [&](int i) {
    prof::RangeRecord r;
    r.start_ns = 1000LL * i;
    r.end_ns = 1000LL * i + 500 + i;
    r.tid = i % 3 == 0 ? prof::kCommTid : 7;
    r.push_pop = i % 3 != 0;
    r.step = i / 10;
    r.info.phase = i % 2 ? Phase::Attention : Phase::QkvProj;
    r.info.layer = i;
    r.info.bytes_sent = 100LL * i;
    ids.push_back(w.write_range(r));
  };
  auto count_from_other_connection = [&](const char* q) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    std::string v = query_text(db, q);
    sqlite3_close(db);
    return v;
  };
  w.begin();
  for (int i = 0; i < 70; ++i) write(i);  // 2 full batches + 6
  w.commit();
  // Committed = visible to a reader (the studio, or whoever opens the file after SIGKILL).
  EXPECT_EQ(count_from_other_connection("SELECT count(*) FROM ULYSSES_RANGES"), "70");
  EXPECT_EQ(count_from_other_connection("SELECT count(*) FROM NVTX_EVENTS"), "70");
  for (int i = 70; i < 73; ++i) write(i);  // outside a transaction: written at once
  EXPECT_EQ(count_from_other_connection("SELECT count(*) FROM NVTX_EVENTS"), "73");
  w.begin();
  for (int i = 73; i < 140; ++i) write(i);
  w.commit();
  w.close();
  ASSERT_EQ(ids.size(), 140u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<int64_t>(i) + 1);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(query_text(db,
                       "SELECT count(*) FROM NVTX_EVENTS n JOIN ULYSSES_RANGES u ON u.eventId = n.rowid "
                       "WHERE n.start = 1000 * u.layer AND n.end = n.start + 500 + u.layer "
                       "AND u.bytesSent = 100 * u.layer AND u.step = u.layer / 10 "
                       "AND n.rowid = u.layer + 1 AND n.eventType = (CASE WHEN u.layer % 3 = 0 THEN 60 ELSE 59 END)"),
            "140");
  EXPECT_EQ(query_text(db, "PRAGMA integrity_check"), "ok");
  sqlite3_close(db);

  prof::LoadOptions lo;
  lo.head_lanes = false;
  auto m = prof::load_trace(path, lo);
  ASSERT_EQ(m.ranges.size(), 140u);
  std::set<int32_t> layers;
  for (const auto& r : m.ranges) {
    EXPECT_EQ(r.start_ns, 1000LL * r.layer);
    EXPECT_EQ(m.extra(r).bytes_sent, 100LL * r.layer);
    EXPECT_EQ(r.phase, r.layer % 2 ? Phase::Attention : Phase::QkvProj);
    layers.insert(r.layer);
  }
  EXPECT_EQ(layers.size(), 140u);
}

namespace {

// Every row of q, cells joined by '|', rows by '\n'.
std::string query_rows(sqlite3* db, const std::string& q) {
  sqlite3_stmt* st = nullptr;
  std::string out;
  EXPECT_EQ(sqlite3_prepare_v2(db, q.c_str(), -1, &st, nullptr), SQLITE_OK) << q;
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      const unsigned char* t = sqlite3_column_text(st, c);
      out += (c ? "|" : "") + std::string(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    out += '\n';
  }
  sqlite3_finalize(st);
  return out;
}

// Writes 75 ranges (two full batches of 32 and 11 more) with every attribute varied.
void write_varied_ranges(const std::string& path, int format) {
  auto o = options_for(path, 0, 1);
  o.trace_format = format;
  prof::TraceWriter w(o, 4242);
  w.begin();
  for (int i = 0; i < 75; ++i) {
    prof::RangeRecord r;
    r.start_ns = 1000LL * i;
    r.end_ns = r.start_ns + 500 + i;
    r.tid = i % 3 == 0 ? prof::kCommTid : 7;
    r.push_pop = i % 3 != 0;
    r.step = i / 10;
    r.info.phase = i % 3 == 0 ? Phase::A2ASeqToHead : i % 2 ? Phase::Attention : Phase::QkvProj;
    r.info.dir = i % 2 ? Direction::Backward : Direction::Forward;
    r.info.layer = i % 4;
    r.info.head_begin = i % 8;
    r.info.head_end = i % 8 + 2;
    r.info.chunk = i % 2;
    r.info.bytes_sent = 100LL * i;
    r.info.bytes_recv = 7LL * i + (1LL << 40);
    if (i % 3 == 0) {
      r.info.pg = 1;
      r.info.seq = i;
    }
    w.write_range(r);
  }
  w.commit();
  w.close();
}

}  // namespace

// Format 4 keeps a range's Ulysses attributes in its NVTX_EVENTS row; format 3 kept them in a
// ULYSSES_RANGES table beside it. The same records give the same rows under the name
// ULYSSES_RANGES (a view in format 4) and the same model through both readers.
TEST(TracerStore, FormatFourAndFormatThreeFilesHoldTheSameRanges) {
  TempDir tmp;
  const std::string f3 = tmp.path + "/f3.sqlite", f4 = tmp.path + "/f4.sqlite";
  write_varied_ranges(f3, 3);
  write_varied_ranges(f4, 0);
  sqlite3 *d3 = nullptr, *d4 = nullptr;
  ASSERT_EQ(sqlite3_open(f3.c_str(), &d3), SQLITE_OK);
  ASSERT_EQ(sqlite3_open(f4.c_str(), &d4), SQLITE_OK);
  EXPECT_EQ(query_text(d3, "PRAGMA user_version"), "3");
  EXPECT_EQ(query_text(d4, "PRAGMA user_version"), std::to_string(prof::trace_schema_version()));
  EXPECT_EQ(query_text(d3, "SELECT type FROM sqlite_master WHERE name = 'ULYSSES_RANGES'"), "table");
  EXPECT_EQ(query_text(d4, "SELECT type FROM sqlite_master WHERE name = 'ULYSSES_RANGES'"), "view");
  EXPECT_EQ(columns(d3, "NVTX_EVENTS").size(), 19u);
  EXPECT_EQ(columns(d3, "ULYSSES_RANGES"), columns(d4, "ULYSSES_RANGES"));
  const std::string q =
      "SELECT n.rowid, n.start, n.end, n.eventType, n.category, n.globalTid, u.* FROM NVTX_EVENTS n "
      "JOIN ULYSSES_RANGES u ON u.eventId = n.rowid ORDER BY n.rowid";
  const std::string rows3 = query_rows(d3, q);
  EXPECT_EQ(std::count(rows3.begin(), rows3.end(), '\n'), 75);
  EXPECT_EQ(rows3, query_rows(d4, q));
  EXPECT_EQ(query_text(d4, "SELECT count(*) FROM ULYSSES_RANGES WHERE pgId = 1 AND seq % 3 = 0"), "25");
  EXPECT_EQ(query_text(d4, "PRAGMA integrity_check"), "ok");
  sqlite3_close(d3);
  sqlite3_close(d4);

  prof::LoadOptions lo;
  lo.head_lanes = false;
  const auto m3 = prof::load_trace(f3, lo), m4 = prof::load_trace(f4, lo);
  ASSERT_EQ(m3.ranges.size(), 75u);
  ulysses::test::expect_same_model(m3, m4);
  int collectives = 0;
  for (const auto& r : m4.ranges) collectives += m4.extra(r).pg == 1 && m4.extra(r).seq >= 0;
  EXPECT_EQ(collectives, 25);
}

TEST(TracerStore, AnUnknownTraceFormatIsRefusedBeforeTheFileIsTouched) {
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  { std::ofstream(path) << "keep me"; }
  auto o = options_for(path, 0, 1);
  o.trace_format = 2;
  EXPECT_THROW(prof::TraceWriter(o, 1), std::invalid_argument);
  std::ifstream in(path);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
}

namespace {

// Runs `record` in a forked child that SIGKILLs itself mid-step 3 (no close(), no destructor).
void record_then_sigkill(const std::function<std::unique_ptr<prof::Tracer>()>& record) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto t = record();
    t->begin_step(3);
    t->push({Phase::Step});
    t->push({Phase::Attention, Direction::Forward, 0});
    t->record_range({Phase::A2ASeqToHead}, prof::Tracer::now_ns() - 10, prof::Tracer::now_ns());
    t->pop();
    kill(getpid(), SIGKILL);  // mid-step, no close(), no destructor
    _exit(3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

// The file is intact and holds exactly steps 0..steps-1, each with all its ranges.
void expect_steps_kept(const std::string& path, int steps, const Synth& s) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(query_text(db, "PRAGMA integrity_check"), "ok");
  sqlite3_close(db);

  prof::LoadOptions lo;
  lo.head_lanes = false;
  auto m = prof::load_trace(path, lo);
  ASSERT_EQ(m.steps.size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) EXPECT_EQ(m.steps[static_cast<size_t>(i)].step, i);
  std::map<int64_t, int64_t> per_step;
  for (const auto& r : m.ranges) {
    EXPECT_LT(r.step, steps) << "a range of a step that is not kept was committed";
    ++per_step[r.step];
  }
  for (int i = 0; i < steps; ++i) EXPECT_EQ(per_step[i], s.ranges_per_step()) << "step " << i;
}

}  // namespace

// Synchronous writing (writer_queue_steps = 0): every ended step is committed.
TEST(TracerStore, SigkilledRankKeepsEveryFinishedStep) {
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  Synth s;
  s.ranks = 1;
  record_then_sigkill([&] {
    auto o = options_for(path, 0, 1);
    o.writer_queue_steps = 0;
    auto t = prof::Tracer::open(o);
    for (int step = 0; step < 3; ++step) record_step(t.get(), 0, step, s);
    return t;
  });
  expect_steps_kept(path, 3, s);
}

// Writer thread: once flush() has returned, every ended step is committed.
TEST(TracerStore, SigkilledRankKeepsEveryStepEndedBeforeFlush) {
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  Synth s;
  s.ranks = 1;
  record_then_sigkill([&] {
    auto o = options_for(path, 0, 1);
    o.writer_queue_steps = 2;
    auto t = prof::Tracer::open(o);
    for (int step = 0; step < 3; ++step) record_step(t.get(), 0, step, s);
    t->flush();
    return t;
  });
  expect_steps_kept(path, 3, s);
}

// Writer thread without flush: at most writer_queue_steps ended steps are uncommitted. The
// writer is slow on step 1 and stalls for good on step 2; end_step(3) can only have returned
// once step 1 was committed, so exactly steps 0 and 1 are kept (4 ended - 2 queued).
TEST(TracerStore, SigkilledRankLosesAtMostTheQueuedSteps) {
  TempDir tmp;
  std::string path = tmp.path + "/rank0.sqlite";
  Synth s;
  s.ranks = 1;
  record_then_sigkill([&] {
    auto o = options_for(path, 0, 1);
    o.writer_queue_steps = 2;
    o.writer_test_before_commit = [](int64_t step) {
      if (step == 1) spin_ns(500'000'000);  // a writer that lets more than 2 steps queue loses step 1
      while (step == 2) std::this_thread::sleep_for(std::chrono::seconds(1));
    };
    auto t = prof::Tracer::open(o);
    for (int step = 0; step < 4; ++step) record_step(t.get(), 0, step, s);
    return t;
  });
  expect_steps_kept(path, 2, s);
}

TEST(TracerStore, LoadsAnNsysExportWithKernels) {
  // A small file shaped like `nsys export --type sqlite`: nsys tables only, NVTX text inline.
  TempDir tmp;
  std::string path = tmp.path + "/report.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* sql = R"(
    CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
    CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
      category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
      domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
      int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
      contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
      demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);
    INSERT INTO StringIds VALUES (1, 'flash_fwd_kernel'), (2, 'ncclDevKernel_SendRecv'), (3, 'step');
    INSERT INTO PROCESSES VALUES (4242 * 16777216, 4242, 'python');
    -- push/pop ranges on thread 7: 'step' [0,1000) holding 'attention' [100,400)
    INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (0, 1000, 59, 'step', 4242 * 16777216 + 7);
    INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (100, 400, 59, 'attention', 4242 * 16777216 + 7);
    INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (5, 5, 34, 'a marker', 4242 * 16777216 + 7);
    -- compute kernel [100,500) on stream 7, NCCL [400,600) on stream 13: overlap 100 of 200
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 500, 0, 1, 7, 1, 4242 * 16777216, 1, 1, NULL);
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (400, 600, 0, 1, 13, 2, 4242 * 16777216, 2, 2, NULL);
  )";
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);

  auto m = prof::load_trace(path);
  EXPECT_TRUE(m.from_nsys);
  ASSERT_EQ(m.ranks.size(), 1u);
  EXPECT_EQ(m.ranks[0].pid, 4242);
  ASSERT_EQ(m.ranges.size(), 4u);  // 2 NVTX ranges (marker skipped) + 2 kernels
  auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_TRUE(s.steps[0].gpu);
  EXPECT_EQ(s.steps[0].compute_ns, 400);
  EXPECT_EQ(s.steps[0].comm_ns, 200);
  EXPECT_EQ(s.steps[0].overlap_ns, 100);
  EXPECT_DOUBLE_EQ(s.steps[0].overlap_ratio, 0.5);
  EXPECT_EQ(s.num_kernels, 2);
  bool saw_attention = false;
  for (const auto& r : m.ranges) saw_attention |= !r.is_kernel && r.phase == Phase::Attention && r.depth == 1;
  EXPECT_TRUE(saw_attention);
}

namespace {
// Stands in for CUPTI: each flush delivers one kernel per call of launch().
class FakeGpu final : public prof::GpuActivitySource {
 public:
  explicit FakeGpu(prof::GpuActivitySink* s) : sink_(s) {}
  bool start(std::string*) override { return started_ = true; }
  void flush() override {
    for (auto& k : pending_) sink_->on_kernel(k);
    pending_.clear();
  }
  void stop() override { started_ = false; }
  void push_external_id(uint64_t) override {}
  void pop_external_id() override {}
  void launch(const std::string& name, int64_t t0, int64_t t1, int stream) {
    prof::KernelRecord k;
    k.start_ns = t0;
    k.end_ns = t1;
    k.stream = stream;
    k.name = name;
    pending_.push_back(k);
  }
  bool started_ = false;

 private:
  prof::GpuActivitySink* sink_;
  std::vector<prof::KernelRecord> pending_;
};
}  // namespace

TEST(TracerStore, GpuActivityFromTheSourceIsWrittenWithEachStep) {
  TempDir dir;
  const std::string path = dir.path + "/rank0.sqlite";
  auto opts = options_for(path, 0, 1);
  FakeGpu* fake = nullptr;
  opts.gpu_source = [&](prof::GpuActivitySink* s) {
    auto g = std::make_unique<FakeGpu>(s);
    fake = g.get();
    return std::unique_ptr<prof::GpuActivitySource>(std::move(g));
  };
  {
    auto t = prof::Tracer::open(opts);
    ASSERT_NE(fake, nullptr);
    EXPECT_TRUE(fake->started_);
    t->begin_step(0);
    const int64_t t0 = prof::Tracer::now_ns();
    fake->launch("ampere_sgemm", t0 + 1000, t0 + 5000, 7);
    fake->launch("ncclDevKernel_SendRecv", t0 + 2000, t0 + 9000, 13);
    // The kernels carry no correlation, so they are kept by their start lying inside the
    // step: end the step only after both have started (a fast machine gets here in <2 us).
    spin_ns(20000);
    prof::StepRecord r;
    t->end_step(r);
  }
  auto m = prof::load_trace(path);
  int kernels = 0;
  std::set<std::string> names;
  for (const auto& r : m.ranges)
    if (r.is_kernel) {
      ++kernels;
      names.insert(m.strings[r.name_id]);
      EXPECT_EQ(r.duration(), m.strings[r.name_id] == "ampere_sgemm" ? 4000 : 7000);
    }
  EXPECT_EQ(kernels, 2);
  EXPECT_TRUE(names.count("ncclDevKernel_SendRecv"));
}
