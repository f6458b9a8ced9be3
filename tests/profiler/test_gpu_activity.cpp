// GPU path on CPU: the Tracer with a fake CUPTI source (tests/profiler/fake_gpu.hpp) ->
// SQLite -> loader -> analysis. Kernels are tied to the range that launched them through
// external correlation ids (traced ranges and ScopedCorrelation around an all-to-all issue);
// overlap and the per-layer / per-head tables use kernel intervals on GPU ranks (hand
// computed below); only kernels of profiled steps are written; the source stands down under
// Nsight Systems; files of the previous format version still load.
#include <optional>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <thread>

#include "fake_gpu.hpp"
#include "test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/cupti_setup.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;
using prof::Direction;
using prof::LaneKind;
using prof::Phase;

namespace {

constexpr int64_t kUs = 1000;

prof::TracerOptions gpu_options(const std::string& path, FakeCupti** fake, int rank = 0, int world = 1) {
  auto o = options_for(path, rank, world);
  o.device = "cuda:" + std::to_string(rank);
  o.gpu_source = fake_cupti_factory(fake);
  return o;
}

// (Copies: a loaded model's ranges are values, not objects to point at.)
std::vector<std::optional<prof::TraceRange>> kernels_named(const prof::TraceModel& m, const std::string& name) {
  std::vector<std::optional<prof::TraceRange>> out;
  for (const auto& r : m.ranges)
    if (r.is_kernel && m.strings[size_t(r.name_id)] == name) out.emplace_back(r);
  return out;
}

// Host ranges (thread or comm lanes) of one phase, by start.
std::vector<int32_t> host_ranges(const prof::TraceModel& m, Phase p) {
  std::vector<int32_t> out;
  for (const auto& l : m.lanes) {
    if (l.kind != LaneKind::HostThread && l.kind != LaneKind::Comm) continue;
    for (int64_t i = l.first; i < l.first + l.count; ++i)
      if (m.ranges[size_t(i)].phase == p) out.push_back(int32_t(i));
  }
  std::sort(out.begin(), out.end(),
            [&](int32_t a, int32_t b) { return m.ranges[size_t(a)].start_ns < m.ranges[size_t(b)].start_ns; });
  return out;
}

int64_t count_rows(const std::string& path, const std::string& q) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, q.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

struct EnvVar {  // sets a variable for the scope, restores the previous value
  std::string name;
  bool had;
  std::string old;
  EnvVar(const char* n, const char* v) : name(n) {
    const char* o = getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (v)
      setenv(n, v, 1);
    else
      unsetenv(n);
  }
  ~EnvVar() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

}  // namespace

TEST(GpuCorrelation, EachKernelCarriesTheStepLayerPhaseAndHeadsOfTheRangeThatLaunchedIt) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  const prof::RangeInfo att{Phase::Attention, Direction::Forward, 1, 2, 4, 0};
  const prof::RangeInfo a2a{Phase::A2ASeqToHead, Direction::Forward, 1, 2, 4, 0, 4096, 4096};
  {
    auto t = prof::Tracer::open(gpu_options(path, &fake));
    ASSERT_NE(fake, nullptr);
    ASSERT_TRUE(fake->started);
    t->begin_step(3);
    const int64_t t0 = prof::Tracer::now_ns();
    {
      prof::ScopedRange step(t.get(), {Phase::Step});
      {
        prof::ScopedRange r(t.get(), att);
        EXPECT_NE(fake->top(), 0u);
        fake->launch("flash_fwd_kernel", t0 + 10 * kUs, t0 + 20 * kUs, 7);
      }
      // The all-to-all: NCCL kernels launched at issue (q and k sent apart), the range
      // recorded later from the completion (as CommTimeline does).
      const int64_t issued = prof::Tracer::now_ns();
      {
        prof::ScopedCorrelation c(t.get(), a2a);
        fake->launch("ncclDevKernel_SendRecv", t0 + 30 * kUs, t0 + 40 * kUs, 13);
      }
      {
        prof::ScopedCorrelation c(t.get(), a2a);
        fake->launch("ncclDevKernel_SendRecv", t0 + 41 * kUs, t0 + 50 * kUs, 13);
      }
      EXPECT_NE(fake->top(), 0u) << "the step range's id is back on top";
      t->record_range(a2a, issued, prof::Tracer::now_ns() + 1000, prof::Tracer::kCommLane);
      // Two ranges with the same attributes: each kernel belongs to its own one.
      for (int i = 0; i < 2; ++i) {
        prof::ScopedRange n(t.get(), {Phase::Norm, Direction::Forward, 1});
        fake->launch("rms_norm_" + std::to_string(i), t0 + (60 + 10 * i) * kUs, t0 + (65 + 10 * i) * kUs, 7);
        spin_ns(2000);
      }
    }
    EXPECT_EQ(fake->top(), 0u) << "every push popped";
    fake->launch("stray_kernel", t0 + 90 * kUs, t0 + 95 * kUs, 7);  // no range open
    t->end_step(prof::StepRecord{3});
  }

  // Stored: correlation -> external id -> launcher, as the documented SQL joins them.
  EXPECT_EQ(count_rows(path,
                       "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                       "JOIN CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION x ON x.correlationId = k.correlationId "
                       "JOIN ULYSSES_EXTERNAL_IDS e ON e.externalId = x.externalId WHERE e.layer = 1 AND e.step = 3"),
            5);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM ULYSSES_EXTERNAL_IDS WHERE eventId IS NULL"), 2);  // the two issues

  auto m = prof::load_trace(path);
  const auto att_ranges = host_ranges(m, Phase::Attention);
  const auto comm_ranges = host_ranges(m, Phase::A2ASeqToHead);
  const auto norm_ranges = host_ranges(m, Phase::Norm);
  ASSERT_EQ(att_ranges.size(), 1u);
  ASSERT_EQ(comm_ranges.size(), 1u);
  ASSERT_EQ(norm_ranges.size(), 2u);
  EXPECT_EQ(m.lanes[size_t(m.ranges[size_t(comm_ranges[0])].lane)].kind, LaneKind::Comm);

  auto flash = kernels_named(m, "flash_fwd_kernel");
  ASSERT_EQ(flash.size(), 1u);
  EXPECT_EQ(flash[0]->step, 3);
  EXPECT_EQ(flash[0]->layer, 1);
  EXPECT_EQ(flash[0]->phase, Phase::Attention);
  EXPECT_EQ(flash[0]->dir, Direction::Forward);
  EXPECT_EQ(flash[0]->head_begin, 2);
  EXPECT_EQ(flash[0]->head_end, 4);
  EXPECT_EQ(flash[0]->chunk, 0);
  EXPECT_EQ(flash[0]->origin, att_ranges[0]);
  EXPECT_EQ(m.extra(*flash[0]).external_id, m.extra(m.ranges[size_t(att_ranges[0])]).external_id);
  EXPECT_NE(m.extra(*flash[0]).external_id, 0);

  auto nccl = kernels_named(m, "ncclDevKernel_SendRecv");
  ASSERT_EQ(nccl.size(), 2u);
  for (const auto& k : nccl) {
    EXPECT_EQ(k->phase, Phase::A2ASeqToHead);
    EXPECT_EQ(k->layer, 1);
    EXPECT_EQ(k->head_begin, 2);
    EXPECT_EQ(k->step, 3);
    EXPECT_EQ(k->origin, comm_ranges[0]) << "NCCL kernel of an all-to-all issue -> its comm range";
  }
  EXPECT_NE(m.extra(*nccl[0]).external_id, m.extra(*nccl[1]).external_id);

  for (int i = 0; i < 2; ++i) {
    auto n = kernels_named(m, "rms_norm_" + std::to_string(i));
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0]->origin, norm_ranges[size_t(i)]) << "kernel " << i << " belongs to its own norm range";
    EXPECT_EQ(n[0]->phase, Phase::Norm);
  }
  auto stray = kernels_named(m, "stray_kernel");
  ASSERT_EQ(stray.size(), 1u);  // inside the profiled step: kept, but attributed to nothing
  EXPECT_EQ(stray[0]->origin, -1);
  EXPECT_EQ(stray[0]->layer, -1);
  EXPECT_EQ(stray[0]->phase, Phase::Other);
  EXPECT_EQ(m.runtime.size(), 6u);  // one cudaLaunchKernel per kernel
}

// Hand-computed intervals (offsets from the step start T, in us):
//   compute kernels  flash [100,500) stream 7 (attention), gemm [950,1200) stream 7 (qkv_proj)
//   NCCL kernels     s2h   [300,700) stream 13,           h2s  [900,1000) stream 13
//   compute = 400 + 250 = 650, comm = 400 + 100 = 500,
//   overlap = [300,500) + [950,1000) = 200 + 50 = 250, ratio = 0.5.
// The host ranges around them last ~20 us each and the comm ranges are recorded at other
// times, so tables built from host ranges would give other numbers.
TEST(GpuCorrelation, OverlapLayerAndHeadTablesUseKernelIntervalsOnGpuRanks) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  const prof::RangeInfo s2h{Phase::A2ASeqToHead, Direction::Forward, 0, 0, 4, -1, 100, 100};
  const prof::RangeInfo h2s{Phase::A2AHeadToSeq, Direction::Forward, 0, 0, 4, -1, 100, 100};
  {
    auto t = prof::Tracer::open(gpu_options(path, &fake));
    t->begin_step(0);
    const int64_t T = prof::Tracer::now_ns();
    {
      prof::ScopedRange st(t.get(), {Phase::Step});
      {
        ULYSSES_RANGE(t.get(), Phase::QkvProj, Direction::Forward, 0);
        fake->launch("sm90_gemm", T + 950 * kUs, T + 1200 * kUs, 7);
        spin_ns(20 * kUs);
      }
      const int64_t c0 = prof::Tracer::now_ns();
      {
        prof::ScopedCorrelation c(t.get(), s2h);
        fake->launch("ncclDevKernel_SendRecv", T + 300 * kUs, T + 700 * kUs, 13);
      }
      t->record_range(s2h, c0, c0 + 5 * kUs);
      {
        ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0, 0, 4);
        fake->launch("flash_fwd_kernel", T + 100 * kUs, T + 500 * kUs, 7);
        spin_ns(20 * kUs);
      }
      const int64_t c1 = prof::Tracer::now_ns();
      {
        prof::ScopedCorrelation c(t.get(), h2s);
        fake->launch("ncclDevKernel_SendRecv", T + 900 * kUs, T + 1000 * kUs, 13);
      }
      t->record_range(h2s, c1, c1 + 5 * kUs);
      spin_ns(1300 * kUs);  // the step outlasts the kernels
    }
    t->end_step(prof::StepRecord{0});
  }
  auto m = prof::load_trace(path);
  auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 1u);
  const auto& b = s.steps[0];
  EXPECT_TRUE(b.gpu);
  EXPECT_EQ(b.compute_ns, 650 * kUs);
  EXPECT_EQ(b.comm_ns, 500 * kUs);
  EXPECT_EQ(b.overlap_ns, 250 * kUs);
  EXPECT_DOUBLE_EQ(b.overlap_ratio, 0.5);

  ASSERT_EQ(s.layers.size(), 1u);
  const auto& l = s.layers[0];
  EXPECT_EQ(l.layer, 0);
  EXPECT_EQ(l.dir, Direction::Forward);
  EXPECT_EQ(l.qkv_proj_ns, 250 * kUs);
  EXPECT_EQ(l.attention_ns, 400 * kUs);
  EXPECT_EQ(l.a2a_seq_to_head_ns, 400 * kUs);
  EXPECT_EQ(l.a2a_head_to_seq_ns, 100 * kUs);
  EXPECT_EQ(l.a2a_bytes_sent, 200);  // bytes still come from the host comm ranges
  EXPECT_EQ(l.samples, 1);

  ASSERT_EQ(s.heads.size(), 1u);
  EXPECT_EQ(s.heads[0].head_begin, 0);
  EXPECT_EQ(s.heads[0].head_end, 4);
  EXPECT_EQ(s.heads[0].attention_ns, 400 * kUs);
  EXPECT_EQ(s.heads[0].a2a_seq_to_head_ns, 400 * kUs);
  EXPECT_EQ(s.heads[0].a2a_head_to_seq_ns, 100 * kUs);
  EXPECT_EQ(s.heads[0].count, 3);  // kernels
  EXPECT_EQ(s.heads[0].bytes_sent, 200);

  // The same trace without its kernels is a CPU rank: host ranges again.
  prof::LoadOptions host_only;
  host_only.gpu_activity = false;
  auto mh = prof::load_trace(path, host_only);
  auto sh = prof::analyze(mh);
  ASSERT_EQ(sh.layers.size(), 1u);
  EXPECT_FALSE(sh.steps[0].gpu);
  EXPECT_EQ(sh.layers[0].a2a_seq_to_head_ns, 5 * kUs);
  // The host attention range's own duration (at least its 20 us spin; how much more depends on
  // the machine's load, so it is read from the trace, not bounded), not the kernel's 400 us.
  int64_t host_attention = -1;
  for (const auto& r : mh.ranges)
    if (r.phase == Phase::Attention && !r.is_kernel) host_attention = r.duration();
  ASSERT_GE(host_attention, 20 * kUs);
  EXPECT_EQ(sh.layers[0].attention_ns, host_attention);
  EXPECT_NE(sh.layers[0].attention_ns, 400 * kUs);
}

TEST(GpuCorrelation, OnlyKernelsOfProfiledStepsAreWritten) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.step_begin = 1;
  o.step_end = 1;
  {
    auto t = prof::Tracer::open(o);
    for (int step = 0; step < 3; ++step) {
      t->begin_step(step);
      const int64_t now = prof::Tracer::now_ns();
      {
        ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, step);
        fake->launch("k_step" + std::to_string(step), now + 1000, now + 2000, 7);
        // Step 1's second kernel reaches the sink only at step 2's flush, runs after
        // end_step(1) (GPU behind the host) and has no runtime record: only its external id
        // says it belongs to step 1.
        if (step == 1)
          fake->launch("k_step1_late", now + 50 * 1000 * kUs, now + 51 * 1000 * kUs, 7, /*hold=*/1, /*api=*/false);
      }
      // A kernel launched outside any range: attributed by its launch time.
      fake->launch("k_loose" + std::to_string(step), now + 3000, now + 4000, 7);
      spin_ns(10 * kUs);
      t->end_step(prof::StepRecord{step});
    }
  }
  auto m = prof::load_trace(path);
  std::set<std::string> names;
  for (const auto& r : m.ranges)
    if (r.is_kernel) names.insert(m.strings[size_t(r.name_id)]);
  EXPECT_EQ(names, (std::set<std::string>{"k_step1", "k_step1_late", "k_loose1"}));
  auto late = kernels_named(m, "k_step1_late");
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0]->step, 1);
  EXPECT_EQ(late[0]->layer, 1);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"), 2);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 3);
}

TEST(GpuCorrelation, StandsDownWithAMessageUnderNsightSystems) {
  TempDir tmp;
  for (const char* var : {"NSYS_PROFILING_SESSION_ID", "CUDA_INJECTION64_PATH"}) {
    EnvVar clear1("NSYS_PROFILING_SESSION_ID", nullptr), clear2("CUDA_INJECTION64_PATH", nullptr);
    EnvVar set(var,
               std::string(var) == "CUDA_INJECTION64_PATH" ? "/opt/nvidia/nsight-systems/libToolsInjection64.so" : "7");
    FakeCupti* fake = nullptr;
    const std::string path = tmp.path + "/" + var + ".sqlite";
    testing::internal::CaptureStderr();
    {
      auto t = prof::Tracer::open(gpu_options(path, &fake));
      EXPECT_EQ(fake, nullptr) << var << ": the GPU source must not even be built";
      t->begin_step(0);
      { ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0); }
      t->end_step(prof::StepRecord{0});
    }
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("stands down"), std::string::npos) << err;
    EXPECT_NE(err.find(var), std::string::npos) << err;
    auto m = prof::load_trace(path);
    EXPECT_EQ(host_ranges(m, Phase::Attention).size(), 1u) << "host ranges are still recorded";
  }
  // Without the variables the same options start the source.
  EnvVar clear1("NSYS_PROFILING_SESSION_ID", nullptr), clear2("CUDA_INJECTION64_PATH", nullptr);
  FakeCupti* fake = nullptr;
  auto t = prof::Tracer::open(gpu_options(tmp.path + "/plain.sqlite", &fake));
  ASSERT_NE(fake, nullptr);
  EXPECT_TRUE(fake->started);
}

TEST(GpuCorrelation, CpuRanksPushNoIdsAndOlderFilesStillLoad) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  record_run(tmp.path);  // CPU ranks: no GPU source
  const std::string r0 = tmp.path + "/trace/rank0.sqlite";
  EXPECT_EQ(count_rows(r0, "SELECT count(*) FROM ULYSSES_EXTERNAL_IDS"), 0);
  // A format-1 file (before the correlation tables) loads as before.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(r0.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE ULYSSES_EXTERNAL_IDS; DROP TABLE CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION; "
                         "PRAGMA user_version = 1;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto m = prof::load_trace(r0);
  EXPECT_EQ(m.steps.size(), 2u);
  for (const auto& r : m.ranges) EXPECT_EQ(m.extra(r).external_id, 0);
}

TEST(GpuCorrelation, ExportsWithoutCorrelationColumnsStillLoad) {
  // A minimal nsys-shaped file whose kernel and runtime tables lack correlationId.
  TempDir tmp;
  const std::string path = tmp.path + "/old.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, R"(
    CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
      streamId INTEGER NOT NULL, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, nameId INTEGER NOT NULL);
    INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'cudaLaunchKernel');
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 42 * 16777216, 1, 1);
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (90, 95, 2);
  )",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto m = prof::load_trace(path);
  auto k = kernels_named(m, "gemm");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(m.extra(*k[0]).correlation, 0u);
  EXPECT_TRUE(m.runtime.empty());
}

// ---- Records as a GPU gives them (docs/GPU.md): FakeCupti playing CUPTI 13.0 Update 1 -------
// Each test below fails without the code it guards (checked by hand): system thread ids
// (cupti_setup: system_thread_ids), the DRIVER kind (driver_api), calibration instead of the
// timestamp callback before 13.1 (timestamp_callback), the forced flush before the last batch
// (HostTracer::close), the time attribution (attribute_kernels_by_time).

namespace {

constexpr uint32_t kCuda130u1 = 130001;

// Index of the kernel named `name` in m.ranges (-1: none, -2: several).
int64_t kernel_index(const prof::TraceModel& m, const std::string& name) {
  int64_t found = -1;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const auto r = m.ranges[i];
    if (r.is_kernel && m.strings[size_t(r.name_id)] == name) found = found == -1 ? int64_t(i) : -2;
  }
  return found;
}

// The host lane (thread row) of rank 0 named `name`.
const prof::Lane* lane_named(const prof::TraceModel& m, const std::string& name) {
  for (const auto& l : m.lanes)
    if (l.kind == LaneKind::HostThread && l.name == name) return &l;
  return nullptr;
}

}  // namespace

TEST(GpuRecords, CuptiVersionsPickTheRecordLayoutsAndTheSetup) {
  struct Row {
    uint32_t api;
    int kernel, memcpy, memset;
    bool callback;
  };
  // 19 = 12.0, 24 = 12.6, 26 = 12.8, 28 = 12.9u1, 130000 = 13.0, 130001 = 13.0u1, 130100 = 13.1.
  const Row rows[] = {{18, 0, 0, 0, true},       {19, 9, 5, 4, true},       {23, 9, 5, 4, true},
                      {24, 9, 5, 4, false},      {26, 9, 6, 4, false},      {28, 9, 6, 4, false},
                      {130000, 10, 6, 4, false}, {130001, 10, 6, 4, false}, {130100, 10, 6, 4, true},
                      {130200, 10, 6, 4, true}};
  for (const Row& r : rows) {
    const auto v = prof::cupti_record_versions(r.api);
    EXPECT_EQ(v.kernel, r.kernel) << r.api;
    EXPECT_EQ(v.memcpy, r.memcpy) << r.api;
    EXPECT_EQ(v.memset, r.memset) << r.api;
    const auto s = prof::cupti_setup(r.api);
    EXPECT_EQ(s.timestamp_callback, r.callback) << r.api;
    EXPECT_TRUE(s.system_thread_ids && s.runtime_api && s.driver_api) << r.api;
  }
  // The macros the decoder's #if reads agree with the function.
  static_assert(ULYSSES_CUPTI_KERNEL_RECORD(130001) == 10 && ULYSSES_CUPTI_MEMCPY_RECORD(26) == 6 &&
                    ULYSSES_CUPTI_MEMCPY_RECORD(24) == 5 && ULYSSES_CUPTI_KERNEL_RECORD(28) == 9,
                "record layouts by CUPTI_API_VERSION");
}

// Launch records carry the launching thread's OS id (gettid), the id of its row: the runtime
// call of a kernel launched on a second thread (autograd's backward thread) sits on that
// thread's row, the main thread's on "main".
TEST(GpuRecords, LaunchRecordsCarryTheThreadIdsOfTheRangesRows) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.gpu_source = fake_cupti_factory(&fake, kCuda130u1);
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    const int64_t T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0);
      fake->launch("k_main", T + 10 * kUs, T + 20 * kUs, 7);
    }
    std::thread bw([&] {
      t->set_thread_name("autograd");
      ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Recompute, 0);
      fake->launch("k_autograd", T + 30 * kUs, T + 40 * kUs, 7);
    });
    bw.join();
    t->end_step(prof::StepRecord{0});
  }
  auto m = prof::load_trace(path);
  const prof::Lane* main_lane = lane_named(m, "main");
  const prof::Lane* bw_lane = lane_named(m, "autograd");
  ASSERT_NE(main_lane, nullptr);
  ASSERT_NE(bw_lane, nullptr);
  ASSERT_EQ(m.runtime.size(), 2u);
  std::map<int64_t, int64_t> tid_of_corr;
  for (const auto& c : m.runtime) tid_of_corr[c.correlation] = c.tid;
  const auto km = m.ranges[size_t(kernel_index(m, "k_main"))];
  const auto ka = m.ranges[size_t(kernel_index(m, "k_autograd"))];
  EXPECT_EQ(tid_of_corr[m.extra(km).correlation], main_lane->tid_or_stream) << "cudaLaunchKernel on main's row";
  EXPECT_EQ(tid_of_corr[m.extra(ka).correlation], bw_lane->tid_or_stream) << "cudaLaunchKernel on autograd's row";
  EXPECT_EQ(ka.dir, Direction::Recompute);
  ASSERT_GE(ka.origin, 0);
  EXPECT_EQ(m.lanes[size_t(m.ranges[size_t(ka.origin)].lane)].name, "autograd");
}

// A backward kernel autograd's thread launched with no range of its own open: tied by time to
// the innermost range of the stepping thread open at its launch (the per-layer backward range
// the engine records from its markers), marked as such; kernels with an external id are not.
TEST(GpuRecords, AKernelWithNoLaunchingRangeGoesByTimeToTheSteppingThreadsRange) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.gpu_source = fake_cupti_factory(&fake, kCuda130u1);
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(5);
    const int64_t T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Backward, Direction::Backward);
      spin_ns(5 * kUs);
      const int64_t mlp0 = prof::Tracer::now_ns();
      std::thread bw([&] {
        spin_ns(5 * kUs);
        fake->launch("mlp_backward_gemm", T + 100 * kUs, T + 200 * kUs, 7);
        spin_ns(5 * kUs);
      });
      bw.join();
      const int64_t mlp1 = prof::Tracer::now_ns();
      prof::RangeInfo r{Phase::Mlp, Direction::Backward, 3};
      t->record_range(r, mlp0, mlp1, 0);  // the stepping thread's row, as Trainer::record_backward_marks
      std::thread bw2([&] { fake->launch("loose_backward_kernel", T + 300 * kUs, T + 310 * kUs, 7); });
      bw2.join();
      {
        ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 3);
        fake->launch("tied_kernel", T + 400 * kUs, T + 410 * kUs, 7);
      }
    }
    t->end_step(prof::StepRecord{5});
  }
  auto m = prof::load_trace(path);
  const int64_t g = kernel_index(m, "mlp_backward_gemm");
  const int64_t l = kernel_index(m, "loose_backward_kernel");
  const int64_t k = kernel_index(m, "tied_kernel");
  ASSERT_GE(g, 0);
  ASSERT_GE(l, 0);
  ASSERT_GE(k, 0);
  const auto gr = m.ranges[size_t(g)];
  ASSERT_GE(gr.origin, 0) << "the backward kernel is attributed";
  EXPECT_TRUE(m.attributed_by_time(int32_t(g)));
  EXPECT_EQ(gr.phase, Phase::Mlp);
  EXPECT_EQ(gr.dir, Direction::Backward);
  EXPECT_EQ(gr.layer, 3);
  EXPECT_EQ(gr.step, 5);
  EXPECT_EQ(m.ranges[size_t(gr.origin)].phase, Phase::Mlp);
  const auto lr = m.ranges[size_t(l)];
  ASSERT_GE(lr.origin, 0);
  EXPECT_TRUE(m.attributed_by_time(int32_t(l)));
  EXPECT_EQ(lr.phase, Phase::Backward) << "after the layer's range: the enclosing backward range";
  EXPECT_EQ(lr.layer, -1);
  EXPECT_FALSE(m.attributed_by_time(int32_t(k)));
  EXPECT_EQ(m.ranges[size_t(k)].phase, Phase::Attention);
  auto s = prof::analyze(m);
  EXPECT_EQ(s.num_kernels, 3);
  EXPECT_EQ(s.kernels_by_launch, 1);
  EXPECT_EQ(s.kernels_by_time, 2);
  const auto j = prof::summary_to_json(m, s);
  EXPECT_EQ(j["kernel_attribution"]["none"], 0);
  EXPECT_DOUBLE_EQ(j["kernel_attribution"]["fraction"].get<double>(), 1.0);
}

// NCCL launches its kernels through the driver API (cuLaunchKernel): with the DRIVER kind on,
// the launch has an API record and the kernel the external id of the all-to-all issue.
TEST(GpuRecords, ADriverApiLaunchIsTiedToItsRangeByExternalId) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.gpu_source = fake_cupti_factory(&fake, kCuda130u1);
  const prof::RangeInfo a2a{Phase::A2ASeqToHead, Direction::Forward, 2, 0, 4, -1, 64, 64};
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    const int64_t T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Step);
      const int64_t c0 = prof::Tracer::now_ns();
      {
        prof::ScopedCorrelation c(t.get(), a2a);
        fake->launch_via(LaunchApi::Driver, "ncclDevKernel_SendRecv", T + 50 * kUs, T + 90 * kUs, 13);
      }
      t->record_range(a2a, c0, prof::Tracer::now_ns() + 1000);
    }
    t->end_step(prof::StepRecord{0});
  }
  auto m = prof::load_trace(path);
  const int64_t k = kernel_index(m, "ncclDevKernel_SendRecv");
  ASSERT_GE(k, 0);
  const auto kr = m.ranges[size_t(k)];
  EXPECT_NE(m.extra(kr).external_id, 0) << "the driver launch carries the issue's external id";
  EXPECT_FALSE(m.attributed_by_time(int32_t(k)));
  EXPECT_EQ(kr.phase, Phase::A2ASeqToHead);
  EXPECT_EQ(kr.layer, 2);
  const auto comm = host_ranges(m, Phase::A2ASeqToHead);
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_EQ(kr.origin, comm[0]);
  ASSERT_EQ(m.runtime.size(), 1u);
  EXPECT_EQ(m.strings[size_t(m.runtime[0].name_id)], "cuLaunchKernel");
}

// CUPTI 13.0 with the timestamp callback registered may report zero kernel times: the source
// calibrates CUPTI's clock instead, and kernels keep the times they ran (CUPTI's clock runs
// 7 s ahead of the host's in the fake: only a calibration puts them back).
TEST(GpuRecords, KernelTimesOnCupti130AreTheDevicesCalibratedOntoTheHostClock) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.gpu_source = fake_cupti_factory(&fake, kCuda130u1);
  int64_t T = 0;
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0);
      fake->launch("flash_fwd_kernel", T + 100 * kUs, T + 350 * kUs, 7);
    }
    spin_ns(400 * kUs);
    t->end_step(prof::StepRecord{0});
  }
  auto m = prof::load_trace(path);
  const int64_t k = kernel_index(m, "flash_fwd_kernel");
  ASSERT_GE(k, 0);
  const auto kr = m.ranges[size_t(k)];
  EXPECT_NE(kr.start_ns, 0);
  EXPECT_EQ(kr.duration(), 250 * kUs);
  EXPECT_NEAR(double(kr.start_ns), double(T + 100 * kUs), 50.0 * kUs) << "calibration error beyond 50 us";
  auto s = prof::analyze(m);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].attention_ns, 250 * kUs);
}

// The GPU clock drifts against the host's: CUPTI's clock is calibrated again at every step, and
// a record takes the offset of when it ran, interpolated between calibrations, even when it is
// delivered steps later. The fake's clock runs 1% fast (exaggerated: real drift is tens of ppm)
// and 40 ms pass between the tracer's start and step 1: one calibration at start would put
// step 1's kernel 400 us late; per step, a few us.
TEST(GpuRecords, CuptiClockIsRecalibratedEveryStep) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  auto factory = fake_cupti_factory(&fake, kCuda130u1);  // no timestamp callback: calibration
  o.gpu_source = [&](prof::GpuActivitySink* s) {
    auto g = factory(s);
    fake->drift = 0.01;
    return g;
  };
  int64_t T0 = 0, T1 = 0;
  {
    auto t = prof::Tracer::open(o);
    spin_ns(20'000 * kUs);
    t->begin_step(0);
    T0 = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0);
      // Still in CUPTI's buffers after step 0's flush and step 1's calibration.
      fake->launch("held_kernel", T0 + 100 * kUs, T0 + 200 * kUs, 7, /*hold=*/1);
    }
    spin_ns(300 * kUs);
    t->end_step(prof::StepRecord{0});
    spin_ns(20'000 * kUs);
    t->begin_step(1);
    T1 = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Attention, Direction::Forward, 0);
      fake->launch("flash_fwd_kernel", T1 + 100 * kUs, T1 + 350 * kUs, 7);
    }
    spin_ns(400 * kUs);
    t->end_step(prof::StepRecord{1});
    EXPECT_EQ(fake->recalibrations, 2);  // one per begin_step (read here: the tracer owns the fake)
  }
  auto m = prof::load_trace(path);
  const int64_t k = kernel_index(m, "flash_fwd_kernel"), h = kernel_index(m, "held_kernel");
  ASSERT_GE(k, 0);
  ASSERT_GE(h, 0);
  EXPECT_NEAR(double(m.ranges[size_t(k)].start_ns), double(T1 + 100 * kUs), 20.0 * kUs)
      << "step 1's kernel converted with a stale calibration";
  EXPECT_NEAR(double(m.ranges[size_t(h)].start_ns), double(T0 + 100 * kUs), 20.0 * kUs)
      << "a record delivered a step late converted with the newer calibration";
}

// The last step's records still in CUPTI's buffers at close (not yet complete: held back by
// every plain flush) reach the file: the forced flush comes before the writer stops.
TEST(GpuRecords, RecordsStillInCuptiBuffersAtCloseAreWritten) {
  EnvVar e1("NSYS_PROFILING_SESSION_ID", nullptr), e2("CUDA_INJECTION64_PATH", nullptr);
  TempDir tmp;
  const std::string path = tmp.path + "/rank0.sqlite";
  FakeCupti* fake = nullptr;
  auto o = gpu_options(path, &fake);
  o.gpu_source = fake_cupti_factory(&fake, kCuda130u1);
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(0);
    const int64_t T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Optimizer, Direction::None);
      fake->launch("adamw_last_kernel", T + 10 * kUs, T + 20 * kUs, 7, /*hold=*/5);
    }
    t->end_step(prof::StepRecord{0});
    t->close();
  }
  auto m = prof::load_trace(path);
  const int64_t k = kernel_index(m, "adamw_last_kernel");
  ASSERT_GE(k, 0) << "the kernel in the buffer CUPTI had not completed is in the file";
  EXPECT_EQ(m.ranges[size_t(k)].phase, Phase::Optimizer);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"), 1);
}
