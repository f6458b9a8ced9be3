// The Tracer's writer thread (TracerOptions::writer_queue_steps): the file it writes equals
// the synchronous path's (every range, step, memory sample, metric, thread name, clock row)
// for a multi-thread, multi-step trace; a full queue makes end_step wait (nothing dropped, at
// most writer_queue_steps steps uncommitted); a write error on the writer thread is reported
// once by end_step/flush, as the synchronous path reports it; close drains the queue.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/tracer.hpp"

using namespace ut;
using prof::Direction;
using prof::Phase;

namespace {

// Every row of a query, columns joined with '|'.
std::vector<std::string> rows(sqlite3* db, const std::string& q) {
  std::vector<std::string> out;
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, q.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db) << "\n" << q;
  while (st && sqlite3_step(st) == SQLITE_ROW) {
    std::string line;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      if (c) line += '|';
      const unsigned char* t = sqlite3_column_text(st, c);
      line += t ? reinterpret_cast<const char*>(t) : "NULL";
    }
    out.push_back(line);
  }
  sqlite3_finalize(st);
  return out;
}

// The file's contents that do not depend on when or in which process it was recorded:
// host clock readings (push/pop range times, step start/end, sample times) only as "end >=
// start", thread ids by their names, string ids by their text, rows of a thread in order
// (the comm row, filled from several threads, by its ranges' given times).
struct Dump {
  std::vector<std::string> ranges, steps, memory, metrics, threads, clock;
  int64_t nvtx_rows = 0, range_rows = 0;
};

Dump dump(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  Dump d;
  d.ranges = rows(db,
                  "SELECT tname.value, r.step, r.phase, r.direction, r.layer, r.headBegin, r.headEnd, r.chunk, "
                  "r.bytesSent, r.bytesRecv, r.pgId, r.seq, n.eventType, n.category, n.color, txt.value, "
                  "CASE WHEN n.eventType = 60 THEN n.start END, CASE WHEN n.eventType = 60 THEN n.end END, "
                  "n.end >= n.start "
                  "FROM NVTX_EVENTS n JOIN ULYSSES_RANGES r ON r.eventId = n.rowid "
                  "LEFT JOIN ThreadNames tn ON tn.globalTid = n.globalTid "
                  "LEFT JOIN StringIds tname ON tname.id = tn.nameId "
                  "LEFT JOIN StringIds txt ON txt.id = n.textId "
                  // comm-lane ranges come from several threads' buffers: by their (given) times
                  "ORDER BY tname.value, r.step, CASE WHEN tname.value = 'comm' THEN n.start END, n.rowid");
  d.steps = rows(db,
                 "SELECT rank, step, loss, lr, gradNorm, tokens, tokensPerS, stepMs, maxMemBytes, end >= start "
                 "FROM ULYSSES_STEPS ORDER BY rank, step");
  d.memory = rows(db,
                  "SELECT m.rank, m.step, s.value, m.allocated, m.reserved, m.peak FROM ULYSSES_MEMORY m "
                  "JOIN StringIds s ON s.id = m.labelId ORDER BY m.rowid");
  d.metrics = rows(db, "SELECT name, value FROM ULYSSES_METRICS WHERE name NOT LIKE 'profiler.%' ORDER BY name");
  d.threads = rows(db, "SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId ORDER BY s.value");
  d.clock = rows(db, "SELECT rank, kind, offsetNs, errorNs, rttNs, rounds, measuredAt FROM ULYSSES_CLOCK");
  d.nvtx_rows = std::stoll(rows(db, "SELECT count(*) FROM NVTX_EVENTS")[0]);
  d.range_rows = std::stoll(rows(db, "SELECT count(*) FROM ULYSSES_RANGES")[0]);
  sqlite3_close(db);
  return d;
}

constexpr int kWorkers = 3, kSteps = 5, kPerWorker = 1000;  // a worker fills more than one 4096-event chunk
// Per step: main: 1 step range + 2 record_range on its own row + 1 on the comm lane; each
// worker: kPerWorker push/pop ranges + 1 record_range on the comm lane.
constexpr int64_t kRangesPerStep = 4 + kWorkers * (kPerWorker + 1);

// A multi-thread, multi-step recording: persistent worker threads record their ranges while
// the main thread has a step open; then the main thread ends the step.
void record(const std::string& path, int32_t queue_steps) {
  prof::TracerOptions o = options_for(path, 1, 2);
  o.writer_queue_steps = queue_steps;
  auto t = prof::Tracer::open(o);
  std::mutex mu;
  std::condition_variable cv;
  int go_step = -1, done = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      t->set_thread_name("worker" + std::to_string(w));
      for (int step = 0; step < kSteps; ++step) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return go_step >= step; });
        }
        for (int i = 0; i < kPerWorker; ++i) {
          ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, i % 7, w, w + 1, i % 3);
        }
        prof::RangeInfo a2a{Phase::A2ASeqToHead, Direction::Backward, step, 0, 8, -1, 1000 + w, 2000 + w, 1, step};
        t->record_range(a2a, 1'000'000 * step + w, 1'000'000 * step + w + 500);
        std::lock_guard<std::mutex> lk(mu);
        ++done;
        cv.notify_all();
      }
    });
  }
  t->record_clock("start", prof::ClockOffset{123, 4, 56, 7, 890});
  for (int step = 0; step < kSteps; ++step) {
    t->begin_step(step);
    {
      prof::ScopedRange st(t.get(), {Phase::Step});
      {
        std::lock_guard<std::mutex> lk(mu);
        go_step = step;
        cv.notify_all();
      }
      t->record_range({Phase::Mlp, Direction::Forward, step}, 5000 * step + 10, 5000 * step + 20, /*lane=*/0);
      t->record_range({Phase::Norm, Direction::Forward, step}, 5000 * step + 30, 5000 * step + 40, /*lane=*/0);
      t->record_range({Phase::GradAllReduce, Direction::None, -1, -1, -1, -1, 77, 88, 0, 100 + step}, 5000 * step + 50,
                      5000 * step + 60);
      t->sample_memory("mid", prof::MemorySample{100 + step, 200 + step, 300 + step});
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return done == kWorkers * (step + 1); });
    }
    t->sample_memory("end", prof::MemorySample{400 + step, 500 + step, 600 + step});
    prof::StepRecord rec;
    rec.step = step;
    rec.loss = 10.5 - step;
    rec.lr = 0.25 * step;
    rec.grad_norm = 1.5 + step;
    rec.tokens = 4096 * (step + 1);
    rec.tokens_per_s = 1e6 + step;
    rec.step_ms = 12.5 + step;
    rec.max_mem_bytes = 1 << (10 + step);
    t->end_step(rec);
    t->set_metric("metric_after_step" + std::to_string(step), 0.5 * step);
  }
  for (auto& w : workers) w.join();
  t->close();
}

}  // namespace

TEST(TraceWriterThread, FileEqualsTheSynchronousWritersForAMultiThreadTrace) {
  TempDir tmp;
  record(tmp.path + "/sync.sqlite", 0);
  const Dump ref = dump(tmp.path + "/sync.sqlite");
  // The reference itself, against counts computed here.
  ASSERT_EQ(ref.ranges.size(), static_cast<size_t>(kSteps * kRangesPerStep));
  EXPECT_EQ(ref.nvtx_rows, kSteps * kRangesPerStep);
  EXPECT_EQ(ref.range_rows, kSteps * kRangesPerStep);
  ASSERT_EQ(ref.steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(ref.steps[2], "1|2|8.5|0.5|3.5|12288|1000002.0|14.5|4096|1");
  ASSERT_EQ(ref.memory.size(), static_cast<size_t>(2 * kSteps));
  EXPECT_EQ(ref.memory[3], "1|1|end|401|501|601");
  EXPECT_EQ(ref.metrics.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(ref.threads, (std::vector<std::string>{"comm", "main", "worker0", "worker1", "worker2"}));
  ASSERT_EQ(ref.clock.size(), 1u);
  EXPECT_EQ(ref.clock[0], "1|start|123|4|56|7|890");

  for (int32_t q : {1, 3}) {
    SCOPED_TRACE("writer_queue_steps = " + std::to_string(q));
    const std::string path = tmp.path + "/async" + std::to_string(q) + ".sqlite";
    record(path, q);
    const Dump d = dump(path);
    EXPECT_EQ(d.nvtx_rows, ref.nvtx_rows);
    EXPECT_EQ(d.range_rows, ref.range_rows);
    ASSERT_EQ(d.ranges.size(), ref.ranges.size());
    for (size_t i = 0; i < d.ranges.size(); ++i) ASSERT_EQ(d.ranges[i], ref.ranges[i]) << "range " << i;
    EXPECT_EQ(d.steps, ref.steps);
    EXPECT_EQ(d.memory, ref.memory);
    EXPECT_EQ(d.metrics, ref.metrics);
    EXPECT_EQ(d.threads, ref.threads);
    EXPECT_EQ(d.clock, ref.clock);
  }
}

// writer_queue_steps = Q, N steps, a writer that commits step k only once end_step(k + Q) has
// found the queue full: each end_step from step Q on must wait (exactly N - Q waits), and
// while step k is uncommitted at most k + Q end_steps have returned. All N steps are kept.
// (close's own last batch does not wait for room.)
TEST(TraceWriterThread, FullQueueMakesEndStepWaitAndLosesNothing) {
  TempDir tmp;
  constexpr int kQ = 2, kN = 9, kRanges = 50;
  const std::string path = tmp.path + "/full.sqlite";
  std::mutex mu;
  std::condition_variable cv;
  int full = 0, returned = 0, batches = 0;
  std::vector<std::string> violations;
  prof::TracerOptions o = options_for(path, 0, 1);
  o.writer_queue_steps = kQ;
  o.writer_test_on_full = [&] {
    std::lock_guard<std::mutex> lk(mu);
    ++full;
    cv.notify_all();
  };
  o.writer_test_before_commit = [&](int64_t) {
    std::unique_lock<std::mutex> lk(mu);
    const int k = batches++;
    if (k >= kN) return;  // close's batch
    if (returned > k + kQ)
      violations.push_back("step " + std::to_string(k) + " uncommitted but " + std::to_string(returned) +
                           " end_steps returned");
    // Hold step k until end_step(k + Q) waits (or every end_step has returned: no wait came).
    if (k < kN - kQ) cv.wait(lk, [&] { return full >= k + 1 || returned == kN; });
  };
  {
    auto t = prof::Tracer::open(o);
    for (int step = 0; step < kN; ++step) {
      t->begin_step(step);
      for (int i = 0; i < kRanges; ++i) ULYSSES_RANGE(t.get(), Phase::Mlp, Direction::Forward, i);
      t->end_step(prof::StepRecord{step});
      std::lock_guard<std::mutex> lk(mu);
      ++returned;
      cv.notify_all();
    }
    t->close();
  }
  EXPECT_TRUE(violations.empty()) << violations.front();
  EXPECT_EQ(full, kN - kQ);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(rows(db, "SELECT count(*) FROM ULYSSES_STEPS")[0], std::to_string(kN));
  EXPECT_EQ(rows(db, "SELECT count(*) FROM ULYSSES_RANGES")[0], std::to_string(kN * kRanges));
  EXPECT_EQ(rows(db, "SELECT count(DISTINCT step) FROM ULYSSES_RANGES")[0], std::to_string(kN));
  EXPECT_EQ(rows(db, "SELECT value FROM ULYSSES_METRICS WHERE name = 'profiler.writer_waits'")[0],
            std::to_string(kN - kQ) + ".0");
  sqlite3_close(db);
}

// Close hands over the last batch and drains the queue: here nothing is written before close
// is called, so every step in the file was written by close's drain.
TEST(TraceWriterThread, CloseDrainsTheQueue) {
  TempDir tmp;
  constexpr int kN = 4, kRanges = 300;
  const std::string path = tmp.path + "/drain.sqlite";
  std::atomic<bool> closing{false};
  std::atomic<int> written_before_close{0};
  prof::TracerOptions o = options_for(path, 0, 1);
  o.writer_queue_steps = kN;  // room for every step: nothing waits
  o.writer_test_before_commit = [&](int64_t) {
    while (!closing.load()) std::this_thread::yield();
  };
  auto t = prof::Tracer::open(o);
  for (int step = 0; step < kN; ++step) {
    t->begin_step(step);
    for (int i = 0; i < kRanges; ++i) ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Backward, i);
    t->sample_memory("m", prof::MemorySample{step, step, step});
    t->end_step(prof::StepRecord{step});
  }
  {
    // Nothing is committed yet: the writer holds step 0.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    written_before_close = std::stoi(rows(db, "SELECT count(*) FROM ULYSSES_STEPS")[0]);
    sqlite3_close(db);
  }
  closing = true;
  t->close();
  EXPECT_EQ(written_before_close.load(), 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(rows(db, "SELECT group_concat(step) FROM (SELECT step FROM ULYSSES_STEPS ORDER BY step)")[0], "0,1,2,3");
  EXPECT_EQ(rows(db, "SELECT count(*) FROM ULYSSES_RANGES")[0], std::to_string(kN * kRanges));
  EXPECT_EQ(rows(db, "SELECT count(*) FROM ULYSSES_MEMORY")[0], std::to_string(kN));
  sqlite3_close(db);
}

// A real SQLite-level write error (another connection appended to NVTX_EVENTS, so the
// writer's rowid check fails) while step 1 is written: the synchronous path throws it from
// end_step(1); the writer thread's error comes out of end_step(1) or, at the latest, flush(),
// with the same message naming the file, once (close afterwards does not throw it again).
TEST(TraceWriterThread, WriteErrorOnTheWriterThreadIsReported) {
  TempDir tmp;
  std::string sync_msg;
  for (int32_t q : {0, 2}) {
    SCOPED_TRACE("writer_queue_steps = " + std::to_string(q));
    const std::string path = tmp.path + "/err" + std::to_string(q) + ".sqlite";
    prof::TracerOptions o = options_for(path, 0, 1);
    o.writer_queue_steps = q;
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    { ULYSSES_RANGE(t.get(), Phase::Mlp); }
    t->end_step(prof::StepRecord{0});
    t->flush();
    {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      sqlite3_busy_timeout(db, 10000);
      ASSERT_EQ(sqlite3_exec(db, "INSERT INTO NVTX_EVENTS(start, end, eventType) VALUES (1, 2, 59)", nullptr, nullptr,
                             nullptr),
                SQLITE_OK)
          << sqlite3_errmsg(db);
      sqlite3_close(db);
    }
    t->begin_step(1);
    { ULYSSES_RANGE(t.get(), Phase::Mlp); }
    std::vector<std::string> errors;
    try {
      t->end_step(prof::StepRecord{1});
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    try {
      t->flush();
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].find("NVTX_EVENTS rowid"), std::string::npos) << errors[0];
    EXPECT_EQ(errors[0].rfind("writing the trace " + path + ": ", 0), 0u) << errors[0];  // names its file
    const std::string msg = errors[0].substr(errors[0].find(path) + path.size());
    if (q == 0)
      sync_msg = msg;
    else
      EXPECT_EQ(msg, sync_msg);
    EXPECT_NO_THROW(t->close());
  }
}
