// bench_profiler: (1) ranges written per second into SQLite through TraceWriter (batched:
// 32 rows per INSERT, one transaction per step; wall and CPU time, ranges and rows) beside
// (1b) what plain SQLite inserts of rows that wide reach on this machine (its ceiling), (2) Tracer cost per ScopedRange
// push/pop (active, inactive) and per end_step flush, (3) load_trace + analyze time on a generated trace of --ranges
// ranges (default 10 million, two ranks) in a temporary directory.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <sqlite3.h>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

#include "testdata/rank_files.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

// Process CPU seconds (the build machine is shared: CPU time shows what the code costs).
double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using ulysses::testdata::generate_rank;  // testdata/rank_files.hpp

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Profiler benchmarks: SQLite write rate, tracer overhead, summary time"};
  int64_t ranges = 10'000'000, write_ranges = 1'000'000, pushes = 1'000'000;
  std::string dir, load_dir;
  app.add_option("--ranges", ranges, "ranges in the generated trace for the summary benchmark (all ranks)");
  app.add_option("--write-ranges", write_ranges, "ranges for the write-rate benchmark");
  app.add_option("--pushes", pushes, "push/pop pairs for the tracer overhead benchmark");
  app.add_option("--dir", dir, "work directory (default: a new temporary directory, removed at exit)");
  app.add_option("--load-dir", load_dir,
                 "only time load + analysis of this existing run directory (e.g. one kept with --dir DIR: "
                 "DIR/run), skipping the write and tracer benchmarks")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);
  if (!load_dir.empty()) {
    double c0 = cpu_now();
    auto t1 = std::chrono::steady_clock::now();
    prof::LoadOptions lo;
    lo.head_lanes = false;
    prof::TraceModel m = prof::load_trace(load_dir, lo);
    double load = seconds_since(t1), load_cpu = cpu_now() - c0;
    auto t2 = std::chrono::steady_clock::now();
    prof::Summary s = prof::analyze(m);
    double an = seconds_since(t2);
    const double n = static_cast<double>(m.ranges.size());
    std::printf(
        "load:     %.0f ranges from %s: load %.2f s wall (%.2f M ranges/s), CPU %.2f s (%.2f M ranges/s); "
        "analysis %.2f s; %zu step rows\n",
        n, load_dir.c_str(), load, n / load / 1e6, load_cpu, n / load_cpu / 1e6, an, s.steps.size());
    return 0;
  }
  bool own_dir = dir.empty();
  if (own_dir) {
    std::string tmpl = (fs::temp_directory_path() / "ulysses-bench-XXXXXX").string();
    dir = mkdtemp(tmpl.data());
  }
  fs::create_directories(dir);

  // (1) SQLite write rate and one-file load time, format 4 (one NVTX_EVENTS row per range)
  // against format 3 (NVTX_EVENTS + ULYSSES_RANGES rows), interleaved so both see the same
  // machine; each figure is the best of the rounds (the least disturbed by other load).
  {
    struct Fig {
      double write_cpu = 1e30, write_wall = 1e30, load_cpu = 1e30;
      int64_t n = 0;
      uint64_t bytes = 0;
    } fig[2];  // [0] = format 3, [1] = format 4
    const int rounds = 3;
    for (int round = 0; round < rounds; ++round) {
      for (int f = 0; f < 2; ++f) {
        const std::string path = dir + "/write.sqlite";
        auto t0 = std::chrono::steady_clock::now();
        double c0 = cpu_now();
        fig[f].n = generate_rank(path, 0, 1, write_ranges, 32, f == 0 ? 3 : 0);
        fig[f].write_wall = std::min(fig[f].write_wall, seconds_since(t0));
        fig[f].write_cpu = std::min(fig[f].write_cpu, cpu_now() - c0);
        fig[f].bytes = fs::file_size(path);
        prof::LoadOptions lo;
        lo.head_lanes = false;
        c0 = cpu_now();
        const size_t loaded = prof::load_trace(path, lo).ranges.size();
        fig[f].load_cpu = std::min(fig[f].load_cpu, cpu_now() - c0);
        if (static_cast<int64_t>(loaded) != fig[f].n) {
          std::fprintf(stderr, "bench_profiler: format %d wrote %lld ranges but %zu loaded\n", f == 0 ? 3 : 4,
                       static_cast<long long>(fig[f].n), loaded);
          return 1;
        }
        fs::remove(path);
      }
    }
    for (int f = 0; f < 2; ++f) {
      const double n = static_cast<double>(fig[f].n);
      std::printf(
          "write:    format %d (%s): %.0f ranges, best of %d: CPU %.2f s = %.2f M ranges/s, wall %.2f s; "
          "file %.0f bytes/range; load CPU %.2f s = %.2f M ranges/s\n",
          f == 0 ? 3 : 4, f == 0 ? "NVTX_EVENTS + ULYSSES_RANGES rows" : "one NVTX_EVENTS row per range", n, rounds,
          fig[f].write_cpu, n / fig[f].write_cpu / 1e6, fig[f].write_wall, static_cast<double>(fig[f].bytes) / n,
          fig[f].load_cpu, n / fig[f].load_cpu / 1e6);
    }
    std::printf(
        "          format 4 / format 3: write rate %.2fx, file size %.2fx, load rate %.2fx "
        "(one transaction per step, 32-row inserts, synchronous writer)\n",
        fig[0].write_cpu / fig[1].write_cpu, static_cast<double>(fig[1].bytes) / static_cast<double>(fig[0].bytes),
        fig[0].load_cpu / fig[1].load_cpu);
  }

  // (1b) SQLite's own ceiling on this machine, beside (1): rows of a plain table as wide as
  // format 4's NVTX_EVENTS (29 columns), binding as many values per row as the writer does (17),
  // as nsys' columns alone need (7) and nearly none (2); 32-row INSERTs, the writer's settings
  // (WAL, synchronous=NORMAL) and, for comparison, no journal at all (not crash-safe). No
  // TraceWriter code: what any writer of such rows could reach here.
  {
    const int rows = static_cast<int>(std::min<int64_t>(write_ranges, 2'000'000));
    std::printf("ceiling:  plain SQLite, %d rows of 29 integer columns, 32-row INSERTs, CPU best of 3:\n", rows);
    for (int bound : {17, 7, 2}) {
      double rate[2] = {0, 0};
      for (int wal = 1; wal >= 0; --wal) {
        for (int round = 0; round < 3; ++round) {
          const std::string path = dir + "/ceiling.sqlite";
          fs::remove(path);
          fs::remove(path + "-wal");
          sqlite3* db = nullptr;
          if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                              nullptr) != SQLITE_OK) {
            std::fprintf(stderr, "bench_profiler: cannot open %s\n", path.c_str());
            return 1;
          }
          sqlite3_exec(db,
                       wal ? "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"
                           : "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF",
                       nullptr, nullptr, nullptr);
          std::string create = "CREATE TABLE t(", cols, row = "(";
          for (int c = 0; c < 29; ++c) create += (c ? ", c" : "c") + std::to_string(c) + " INTEGER";
          sqlite3_exec(db, (create + ")").c_str(), nullptr, nullptr, nullptr);
          for (int c = 0; c < bound; ++c) {
            cols += (c ? ", c" : "c") + std::to_string(c);
            row += c ? ", ?" : "?";
          }
          std::string insert = "INSERT INTO t(" + cols + ") VALUES ";
          for (int r = 0; r < 32; ++r) insert += (r ? ", " : "") + row + ")";
          sqlite3_stmt* st = nullptr;
          bool ok = sqlite3_prepare_v2(db, insert.c_str(), -1, &st, nullptr) == SQLITE_OK;
          const double c0 = cpu_now();
          ok = ok && sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK;
          int64_t t = 1'000'000'000'000;
          for (int i = 0; ok && i + 32 <= rows; i += 32) {
            int k = 1;
            for (int r = 0; r < 32; ++r)
              for (int c = 0; c < bound; ++c) sqlite3_bind_int64(st, k++, c < 2 ? (t += 137) : (c % 3 ? -1 : c * 5));
            ok = sqlite3_step(st) == SQLITE_DONE;
            sqlite3_reset(st);
            if (ok && i % 65536 == 0 && i > 0)
              ok = sqlite3_exec(db, "COMMIT; BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK;
          }
          ok = ok && sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
          const double cpu = cpu_now() - c0;
          sqlite3_finalize(st);
          // Every row must be there, or the rate means nothing.
          sqlite3_stmt* count = nullptr;
          int64_t stored = -1;
          if (ok && sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &count, nullptr) == SQLITE_OK &&
              sqlite3_step(count) == SQLITE_ROW)
            stored = sqlite3_column_int64(count, 0);
          sqlite3_finalize(count);
          if (!ok || stored != rows / 32 * 32) {
            std::fprintf(stderr, "bench_profiler: the SQLite ceiling run failed (%s; %lld rows stored)\n",
                         sqlite3_errmsg(db), static_cast<long long>(stored));
            sqlite3_close(db);
            return 1;
          }
          sqlite3_close(db);
          fs::remove(path);
          fs::remove(path + "-wal");
          rate[wal] = std::max(rate[wal], static_cast<double>(rows / 32 * 32) / cpu / 1e6);
        }
      }
      std::printf(
          "          %2d values bound per row: WAL, synchronous=NORMAL %.2f M rows/s; no journal %.2f M rows/s\n",
          bound, rate[1], rate[0]);
    }
  }

  // (2) Tracer overhead per push/pop.
  {
    prof::TracerOptions o;
    o.path = dir + "/overhead.sqlite";
    o.writer_queue_steps = 0;  // end_step writes here: its time is the write (writer thread: bench_trace_load)
    auto tr = prof::Tracer::open(o);
    tr->begin_step(0);
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < pushes; ++i) {
      prof::ScopedRange r(tr.get(), {prof::Phase::Attention, prof::Direction::Forward, static_cast<int32_t>(i & 31)});
    }
    double active = seconds_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    tr->end_step({});
    double flush = seconds_since(t1);
    tr->begin_step(1);  // a step outside no window is still active; make one inactive:
    prof::TracerOptions o2 = o;
    o2.path = dir + "/overhead2.sqlite";
    o2.step_begin = 100;
    auto tr2 = prof::Tracer::open(o2);
    tr2->begin_step(0);
    auto t2 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < pushes; ++i) {
      prof::ScopedRange r(tr2.get(), {prof::Phase::Attention, prof::Direction::Forward, static_cast<int32_t>(i & 31)});
    }
    double inactive = seconds_since(t2);
    auto t3 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < pushes; ++i) {
      prof::ScopedRange r(nullptr, {prof::Phase::Attention});
    }
    double null_tracer = seconds_since(t3);
    int64_t clock_cost_t0 = prof::Tracer::now_ns();
    for (int64_t i = 0; i < pushes; ++i) (void)prof::Tracer::now_ns();
    double clock_ns = static_cast<double>(prof::Tracer::now_ns() - clock_cost_t0) / static_cast<double>(pushes);
    std::printf(
        "tracer:   push+pop %.1f ns (recording)  |  %.1f ns (step outside window)  |  %.1f ns (null tracer)"
        "  |  clock read %.1f ns\n",
        active * 1e9 / pushes, inactive * 1e9 / pushes, null_tracer * 1e9 / pushes, clock_ns);
    std::printf("          end_step flush of %lld ranges: %.3f s = %.2f M ranges/s\n", static_cast<long long>(pushes),
                flush, pushes / flush / 1e6);
  }

  // (3) Summary (load + analysis) on a generated trace.
  {
    fs::create_directories(dir + "/run/trace");
    auto t0 = std::chrono::steady_clock::now();
    int64_t n = 0;
    for (int r = 0; r < 2; ++r) {
      n += generate_rank(dir + "/run/trace/rank" + std::to_string(r) + ".sqlite", r, 2, ranges / 2, 32);
    }
    double gen = seconds_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    double c1 = cpu_now();
    prof::LoadOptions lo;
    lo.head_lanes = false;  // as ulysses-trace summary loads
    prof::TraceModel m = prof::load_trace(dir + "/run", lo);
    double load = seconds_since(t1), load_cpu = cpu_now() - c1;
    auto t2 = std::chrono::steady_clock::now();
    prof::Summary s = prof::analyze(m);
    double an = seconds_since(t2);
    std::printf(
        "summary:  %lld ranges, 2 ranks (generated in %.1f s = %.2f M/s): load %.2f s wall (%.2f M ranges/s), "
        "CPU %.2f s; analysis %.2f s, total %.2f s; overlap %.3f, %zu step rows\n",
        static_cast<long long>(n), gen, n / gen / 1e6, load, n / load / 1e6, load_cpu, an, load + an, s.overall.ratio,
        s.steps.size());
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}
