// bench_trace_load: trace loading at scale (issue 13 item 6). For each size (default 1M and
// 10M ranges) over 8 rank files, prints side by side for the legacy loader (files one after
// another, one sort of the whole range vector: LoadOptions::legacy) and the parallel one:
//   open     load_trace with the studio's options (head-range lanes on), wall and CPU seconds
//   summary  load_trace as `ulysses-trace summary` does + analyze + summary_to_json
//   summary with the cache (summary_cache.hpp; parallel loader): first = no cache file yet
//            (computes and writes it), cached = answered from it; its JSON must be the same
//   memory   heap bytes the loaded model keeps per range (mallinfo2 before/after) and the
//            loading process's peak RSS per range
// and whether both loaders give the same summary JSON. Each measurement runs in a forked
// child, so one loader's heap and peak RSS do not colour the other's. Then TraceWriter's
// write rate on one core and the Tracer's synchronous end_step flush.
// Rank files are generated once (outside the timed part) and cached in --cache-dir.
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

#include "testdata/rank_files.hpp"

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

using ulysses::testdata::generate_rank;

double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// DIR/r<total>_<world>/trace/rank*.sqlite, generated once; a marker file says it is complete.
std::string ensure_run(const std::string& cache, int64_t total, int world) {
  const std::string run = cache + "/r" + std::to_string(total) + "_" + std::to_string(world);
  if (fs::exists(run + "/complete")) return run;
  fs::remove_all(run);
  fs::create_directories(run + "/trace");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  std::vector<int64_t> n(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      n[static_cast<size_t>(r)] =
          generate_rank(run + "/trace/rank" + std::to_string(r) + ".sqlite", r, world, total / world, 32);
    });
  for (auto& x : th) x.join();
  int64_t sum = 0;
  for (auto v : n) sum += v;
  std::ofstream(run + "/complete") << sum << "\n";
  std::printf("generated %lld ranges over %d rank files in %s (%.1f s, not timed below)\n", static_cast<long long>(sum),
              world, run.c_str(), since(t0));
  return run;
}

struct Figures {
  double open_s = 0, open_cpu_s = 0, summary_s = 0, summary_cpu_s = 0;
  double heap_bytes = 0;  // heap the opened model holds
  double ranges = 0;      // ranges in the opened model (with head-range lanes)
  double summary_ranges = 0;
  unsigned long long json_hash = 0;
  double json_size = 0;
  long peak_rss_kib = 0;  // of the open child
  bool ok = false;
  bool from_cache = false, written = false;
  double cache_bytes = 0;
};

// Runs fn in a forked child that writes a Figures back through a pipe; returns it with the
// child's peak RSS.
Figures in_child(const std::function<void(Figures&)>& fn) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    Figures f;
    try {
      fn(f);
      f.ok = true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
    (void)!write(fd[1], &f, sizeof f);
    _exit(0);
  }
  close(fd[1]);
  Figures f;
  if (read(fd[0], &f, sizeof f) != static_cast<ssize_t>(sizeof f)) f.ok = false;
  close(fd[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  f.peak_rss_kib = ru.ru_maxrss;
  return f;
}

Figures measure_open(const std::string& run, bool legacy, int threads) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;  // the studio's (ui/trace/trace_loader.cpp)
    lo.legacy = legacy;
    lo.threads = threads;
    malloc_trim(0);
    const size_t h0 = mallinfo2().uordblks + mallinfo2().hblkhd;
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    prof::TraceModel m = prof::load_trace(run, lo);
    f.open_s = since(t0);
    f.open_cpu_s = cpu_now() - c0;
    const struct mallinfo2 mi = mallinfo2();
    f.heap_bytes = static_cast<double>(mi.uordblks + mi.hblkhd - h0);
    f.ranges = static_cast<double>(m.ranges.size());
  });
}

Figures measure_summary(const std::string& run, bool legacy, int threads) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;  // as `ulysses-trace summary` (app/trace/main.cpp)
    lo.head_lanes = false;
    lo.legacy = legacy;
    lo.threads = threads;
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    prof::TraceModel m = prof::load_trace(run, lo);
    const prof::Summary s = prof::analyze(m);
    const std::string js = prof::summary_to_json(m, s).dump(2);
    f.summary_s = since(t0);
    f.summary_cpu_s = cpu_now() - c0;
    f.summary_ranges = static_cast<double>(m.ranges.size());
    f.json_hash = std::hash<std::string>{}(js);
    f.json_size = static_cast<double>(js.size());
  });
}

// `ulysses-trace summary --json` through the summary cache (as the CLI calls it).
Figures measure_summary_cache(const std::string& run, int threads) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;
    lo.head_lanes = false;
    lo.threads = threads;
    prof::SummaryCacheOptions co;
    co.racy_window_ns = 0;  // the files were perhaps generated just now
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    const prof::CachedSummary c = prof::load_summary(run, lo, prof::AnalysisOptions{}, co);
    const std::string js = prof::summary_to_json(c.model, c.summary).dump(2);
    f.summary_s = since(t0);
    f.summary_cpu_s = cpu_now() - c0;
    f.from_cache = c.from_cache;
    f.written = c.written;
    f.json_hash = std::hash<std::string>{}(js);
    f.json_size = static_cast<double>(js.size());
    std::error_code ec;
    f.cache_bytes = static_cast<double>(fs::file_size(prof::summary_cache_path(run), ec));
  });
}

void print_row(const char* name, const Figures& o, const Figures& s) {
  std::printf(
      "  %-9s open %6.2f s (CPU %6.2f s)  summary %6.2f s (CPU %6.2f s)  heap %5.1f B/range  peak RSS %6.1f B/range\n",
      name, o.open_s, o.open_cpu_s, s.summary_s, s.summary_cpu_s, o.heap_bytes / o.ranges,
      static_cast<double>(o.peak_rss_kib) * 1024.0 / o.ranges);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trace loading at scale: legacy vs parallel loader, and TraceWriter write rate"};
  std::vector<int64_t> sizes{1'000'000, 10'000'000};
  int world = 8, threads = 0;
  int64_t write_ranges = 300'000;
  std::string cache = (fs::temp_directory_path() / "ulysses-trace-bench").string();
  bool skip_legacy = false;
  app.add_option("--sizes", sizes, "total ranges of each generated run (all ranks)")->delimiter(',');
  app.add_option("--ranks", world, "rank files per run")->check(CLI::Range(1, 64));
  app.add_option("--threads", threads, "LoadOptions::threads of the new loader (0 = one per core)");
  app.add_option("--cache-dir", cache, "where generated runs are kept between runs of the benchmark");
  app.add_option("--write-ranges", write_ranges, "ranges for the write-rate figures (0 = skip)");
  app.add_flag("--skip-legacy", skip_legacy, "measure only the new loader");
  CLI11_PARSE(app, argc, argv);

  std::printf("machine: %u hardware threads; new loader threads = %d (0 = one per core)\n",
              std::thread::hardware_concurrency(), threads);
  for (int64_t total : sizes) {
    const std::string run = ensure_run(cache, total, world);
    Figures lo, ls;
    if (!skip_legacy) {
      lo = measure_open(run, true, 1);
      ls = measure_summary(run, true, 1);
    }
    Figures no = measure_open(run, false, threads), ns = measure_summary(run, false, threads);
    std::printf("%lld ranges over %d rank files (%.0f ranges in the opened model with head lanes, %.0f for summary):\n",
                static_cast<long long>(total), world, no.ranges, ns.summary_ranges);
    if (!skip_legacy) {
      if (!lo.ok || !ls.ok)
        std::printf("  legacy    FAILED\n");
      else
        print_row("legacy", lo, ls);
    }
    if (!no.ok || !ns.ok) {
      std::printf("  parallel  FAILED\n");
      continue;
    }
    print_row("parallel", no, ns);
    fs::remove(prof::summary_cache_path(run));
    const Figures first = measure_summary_cache(run, threads), cached = measure_summary_cache(run, threads);
    if (!first.ok || !cached.ok) {
      std::printf("  cache     FAILED\n");
    } else {
      std::printf(
          "  cache     summary first %6.2f s (CPU %6.2f s, %s)  summary (cached) %6.2f s (CPU %6.2f s, %s)  "
          "%.2fx faster than uncached; cache file %.1f MB; JSON %s\n",
          first.summary_s, first.summary_cpu_s, first.written ? "cache written" : "NOT WRITTEN", cached.summary_s,
          cached.summary_cpu_s, cached.from_cache ? "from cache" : "NOT FROM CACHE", ns.summary_s / cached.summary_s,
          cached.cache_bytes / 1e6,
          first.json_hash == ns.json_hash && cached.json_hash == ns.json_hash && cached.json_size == ns.json_size
              ? "identical"
              : "DIFFERS");
    }
    if (!skip_legacy && lo.ok && ls.ok)
      std::printf("  ratio     open %.2fx faster, summary %.2fx faster; summary JSON %s (%.0f bytes)\n",
                  lo.open_s / no.open_s, ls.summary_s / ns.summary_s,
                  ls.json_hash == ns.json_hash && ls.json_size == ns.json_size ? "identical" : "DIFFERS", ns.json_size);
  }

  if (write_ranges > 0) {
    // TraceWriter on the calling thread (one core): what a writer thread would sustain.
    const std::string dir = cache + "/write";
    fs::create_directories(dir);
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    const int64_t n = generate_rank(dir + "/w.sqlite", 0, 1, write_ranges, 32);
    const double wall = since(t0), cpu = cpu_now() - c0;
    std::printf("write:    TraceWriter %lld ranges: %.2f M ranges/s wall, %.2f M ranges/s of one core (CPU)\n",
                static_cast<long long>(n), n / wall / 1e6, n / cpu / 1e6);
    // The Tracer as the engine uses it: push/pop on the training thread, end_step writes the
    // step's ranges to SQLite on the same thread (no writer thread exists yet).
    prof::TracerOptions o;
    o.path = dir + "/t.sqlite";
    auto tr = prof::Tracer::open(o);
    tr->begin_step(0);
    auto t1 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < write_ranges; ++i)
      prof::ScopedRange r(tr.get(), {prof::Phase::Attention, prof::Direction::Forward, static_cast<int32_t>(i & 31)});
    const double push = since(t1);
    auto t2 = std::chrono::steady_clock::now();
    tr->end_step({});
    const double flush = since(t2);
    std::printf(
        "          Tracer push+pop %.0f ns/range on the training thread; end_step flush (synchronous, "
        "training thread blocked) %.2f s = %.2f M ranges/s; writer thread: none\n",
        push * 1e9 / static_cast<double>(write_ranges), flush, write_ranges / flush / 1e6);
    tr.reset();
    fs::remove_all(dir);
  }
  return 0;
}
