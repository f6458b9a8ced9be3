// bench_trace_load: trace loading at scale (issue 13 item 6). For each size (default 1M and
// 10M ranges) over 8 rank files, prints side by side for the legacy loader (files one after
// another, one sort of the whole range vector: LoadOptions::legacy; its ranges left as rows)
// and the parallel one (its ranges sealed into columns: RangeStore; and again left as rows):
//   open     load_trace with the studio's options (head-range lanes on), wall and CPU seconds
//   summary  load_trace as `ulysses-trace summary` does + analyze + summary_to_json
//   summary with the cache (summary_cache.hpp; parallel loader): first = no cache file yet
//            (computes and writes it), cached = answered from it; its JSON must be the same
//   memory   heap bytes the loaded model keeps per range (mallinfo2 before/after) and the
//            loading process's peak RSS per range
// and whether both loaders give the same summary JSON. Each measurement runs in a forked
// child, so one loader's heap and peak RSS do not colour the other's. Then TraceWriter's
// write rate on one core, and the Tracer side by side with synchronous end_step and with the
// writer thread: the training thread's time in end_step per range, the writer's ranges/s of
// CPU and the wall ranges/s (--write-only: just these).
// Trace format and rank-file caches (side by side on the same ranges): the parallel loader on
// format 3 files (two rows per range) and on format 4 files (one row per range), and on
// format 4 files read from their rank-file caches (rank_file_cache.hpp; written once by a
// first open, timed apart), whose model and summary must equal the rows'.
// Rank files are generated once (outside the timed part) and cached in --cache-dir.
// Kernel -> launcher links (--link-ranges, GPU-shaped in-memory model): the previous way
// (trees of every rank's host ranges, kept here as the reference) against the loader's per-rank
// sorted tables on 1 and on --threads threads, and whether all give the same links.
#include <malloc.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/rank_file_cache.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

#include "testdata/rank_files.hpp"
#include "ulysses/profiler/trace_loading.hpp"  // detail::link_kernels_to_launchers (private)

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

namespace {

using ulysses::testdata::generate_rank;

double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// DIR/r<total>_<world>[_f3]/trace/rank*.sqlite, generated once; a marker file says it is
// complete. format: TracerOptions::trace_format (0 = this build's, 3 = format 3's layout).
std::string ensure_run(const std::string& cache, int64_t total, int world, int format = 0) {
  const std::string run = cache + "/r" + std::to_string(total) + "_" + std::to_string(world) +
                          (format == 3 ? "_f3" : "_f" + std::to_string(prof::trace_schema_version()));
  if (fs::exists(run + "/complete")) return run;
  fs::remove_all(run);
  fs::create_directories(run + "/trace");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  std::vector<int64_t> n(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      n[static_cast<size_t>(r)] =
          generate_rank(run + "/trace/rank" + std::to_string(r) + ".sqlite", r, world, total / world, 32, format);
    });
  for (auto& x : th) x.join();
  int64_t sum = 0;
  for (auto v : n) sum += v;
  std::ofstream(run + "/complete") << sum << "\n";
  std::printf("generated %lld ranges over %d format-%d rank files in %s (%.1f s, not timed below)\n",
              static_cast<long long>(sum), world, format == 3 ? 3 : prof::trace_schema_version(), run.c_str(),
              since(t0));
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
  int files_from_cache = 0, file_caches_written = 0;
  unsigned long long model_hash = 0;  // of every range's times, lane, name, nesting and attributes
};

unsigned long long hash_model(const prof::TraceModel& m) {
  unsigned long long h = 1469598103934665603ULL;
  auto mix = [&](int64_t v) { h = (h ^ static_cast<unsigned long long>(v)) * 1099511628211ULL; };
  for (const auto& r : m.ranges) {
    mix(r.start_ns), mix(r.end_ns), mix(r.lane), mix(r.name_id), mix(r.parent), mix(r.depth), mix(r.step);
    mix(r.layer), mix(static_cast<int>(r.phase)), mix(r.head_begin), mix(m.extra(r).bytes_sent), mix(m.extra(r).seq);
    mix(r.origin);
  }
  for (const auto& l : m.lanes) mix(l.first), mix(l.count), mix(l.rank);
  return h;
}

// The summary JSON compared across runs: all but "source" (the run folder's path, which
// differs between the format-3 and format-4 copies of the same ranges).
std::string json_without_source(nlohmann::json j) {
  j.erase("source");
  return j.dump(2);
}

// Rank-file cache options of a measurement: none (read the rows; ignore caches left by an
// earlier run of the benchmark), read them, or read the rows and write them.
enum class FileCaches { Off, Read, Write };
void set_file_caches(prof::LoadOptions& lo, FileCaches fc) {
  lo.file_caches = fc != FileCaches::Off;
  lo.write_file_caches = fc == FileCaches::Write;
  lo.file_cache_racy_window_ns = 0;  // the files were perhaps generated just now
}

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

Figures measure_open(const std::string& run, bool legacy, int threads, FileCaches fc = FileCaches::Off,
                     bool seal = true) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;  // the studio's (ui/trace/trace_loader.cpp)
    lo.legacy = legacy;
    lo.seal = seal && !legacy;  // the legacy loader as it was: rows
    lo.threads = threads;
    set_file_caches(lo, fc);
    prof::LoadOptions::Stats st;
    lo.stats = &st;
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
    f.files_from_cache = st.from_file_cache;
    f.file_caches_written = st.file_caches_written;
    f.model_hash = hash_model(m);
    std::error_code ec;
    for (const auto& file : prof::find_rank_files(run))
      f.cache_bytes += static_cast<double>(fs::file_size(prof::rank_file_cache_path(file), ec));
  });
}

Figures measure_summary(const std::string& run, bool legacy, int threads, FileCaches fc = FileCaches::Off,
                        bool seal = true) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;  // as `ulysses-trace summary` (app/trace/main.cpp)
    lo.head_lanes = false;
    lo.legacy = legacy;
    lo.seal = seal && !legacy;
    lo.threads = threads;
    set_file_caches(lo, fc);
    prof::LoadOptions::Stats st;
    lo.stats = &st;
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    prof::TraceModel m = prof::load_trace(run, lo);
    const prof::Summary s = prof::analyze(m);
    const std::string js = json_without_source(prof::summary_to_json(m, s));
    f.summary_s = since(t0);
    f.summary_cpu_s = cpu_now() - c0;
    f.summary_ranges = static_cast<double>(m.ranges.size());
    f.json_hash = std::hash<std::string>{}(js);
    f.json_size = static_cast<double>(js.size());
    f.files_from_cache = st.from_file_cache;
  });
}

// `ulysses-trace summary --json` through the summary cache (as the CLI calls it).
Figures measure_summary_cache(const std::string& run, int threads) {
  return in_child([&](Figures& f) {
    prof::LoadOptions lo;
    lo.head_lanes = false;
    lo.threads = threads;
    set_file_caches(lo, FileCaches::Off);
    prof::SummaryCacheOptions co;
    co.racy_window_ns = 0;  // the files were perhaps generated just now
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    const prof::CachedSummary c = prof::load_summary(run, lo, prof::AnalysisOptions{}, co);
    const std::string js = json_without_source(prof::summary_to_json(c.model, c.summary));
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

// One Tracer run as the engine drives it (engine-like step: push/pop ranges, then end_step).
// writer_cpu_s: CPU the writing cost; synchronous: the training thread's CPU inside end_step
// and close; writer thread: the process's CPU minus the training thread's.
struct TracerRun {
  double ranges = 0, push_s = 0, end_step_s = 0, wall_s = 0, writer_cpu_s = 0;
  double end_step_median_s = 0;  // one step's end_step, median over the steps
  int64_t waits = 0;
};

double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TracerRun run_tracer(const std::string& path, int32_t queue_steps, int64_t steps, int64_t per_step, double compute_ms) {
  TracerRun r;
  prof::TracerOptions o;
  o.path = path;
  o.writer_queue_steps = queue_steps;
  const double p0 = process_cpu(), t0 = thread_cpu();
  auto w0 = std::chrono::steady_clock::now();
  auto tr = prof::Tracer::open(o);
  double end_step_cpu = 0;
  std::vector<double> per_step_s;
  for (int64_t s = 0; s < steps; ++s) {
    tr->begin_step(s);
    auto a = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < per_step; ++i)
      prof::ScopedRange g(tr.get(), {prof::Phase::Attention, prof::Direction::Forward, static_cast<int32_t>(i & 31)});
    r.push_s += since(a);
    // The step's compute (the writer thread writes the previous steps meanwhile).
    const auto busy_until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(compute_ms);
    while (std::chrono::steady_clock::now() < busy_until) {
    }
    auto b = std::chrono::steady_clock::now();
    const double c = thread_cpu();
    tr->end_step(prof::StepRecord{s});
    end_step_cpu += thread_cpu() - c;
    per_step_s.push_back(since(b));
    r.end_step_s += per_step_s.back();
  }
  std::sort(per_step_s.begin(), per_step_s.end());
  r.end_step_median_s = per_step_s[per_step_s.size() / 2];
  const double c = thread_cpu();
  tr->close();
  const double close_cpu = thread_cpu() - c;
  r.wall_s = since(w0);
  const double train_cpu = thread_cpu() - t0;
  r.writer_cpu_s = queue_steps > 0 ? process_cpu() - p0 - train_cpu : end_step_cpu + close_cpu;
  tr.reset();
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT value FROM ULYSSES_METRICS WHERE name = 'profiler.writer_waits'", -1, &st,
                           nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      r.waits = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  r.ranges = static_cast<double>(steps * per_step);
  return r;
}

// Kernel -> launcher links (TraceRange::origin) of a GPU-shaped model: per rank, one host
// lane whose ranges carry external ids (every fifth none) and one stream lane of kernels
// whose ids point at random host ranges (the worst case for lookups; real ids mostly rise
// with time). The previous way, trees of every rank's host ranges, is kept here as the
// reference the new one is measured and checked against.
prof::TraceModel gpu_shaped_model(int64_t total, int world) {
  prof::TraceModel m;
  std::mt19937_64 rng(1);
  const int64_t per_lane = std::max<int64_t>(1, total / (2 * world));
  for (int32_t rank = 0; rank < world; ++rank) {
    for (bool kernels : {false, true}) {
      prof::Lane l;
      l.rank = rank;
      l.kind = kernels ? prof::LaneKind::CudaStream : prof::LaneKind::HostThread;
      l.first = static_cast<int64_t>(m.ranges.size());
      for (int64_t i = 0; i < per_lane; ++i) {
        prof::TraceRange r;
        r.rank = rank;
        r.lane = static_cast<int32_t>(m.lanes.size());
        r.start_ns = i * 100 + (kernels ? 10 : 0);
        r.end_ns = r.start_ns + 50;
        r.is_kernel = kernels;
        const int64_t ext =
            kernels ? 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(per_lane)) : (i % 5 == 4 ? 0 : i + 1);
        if (ext != 0) m.extra_for(r).external_id = ext;
        r.step = static_cast<int32_t>(i / 1000), r.layer = static_cast<int16_t>(i % 32);
        r.phase = static_cast<prof::Phase>(i % 5), r.chunk = static_cast<int16_t>(i % 3);
        m.ranges.push_back(r);
      }
      l.count = static_cast<int64_t>(m.ranges.size()) - l.first;
      m.lanes.push_back(l);
    }
  }
  return m;
}

void link_kernels_by_trees(prof::TraceModel& m) {
  std::map<std::pair<int32_t, int64_t>, int32_t> by_id;
  std::map<std::tuple<int32_t, int32_t, int, int, int32_t, int32_t, int32_t, int32_t>, int32_t> by_info;
  auto info_key = [](const prof::TraceRange& r) {
    return std::make_tuple(r.rank, r.step, static_cast<int>(r.phase), static_cast<int>(r.dir), r.layer, r.head_begin,
                           r.head_end, r.chunk);
  };
  for (const auto& l : m.lanes) {
    if (l.kind == prof::LaneKind::HeadRange || l.kind == prof::LaneKind::CudaStream) continue;
    for (int64_t k = l.first; k < l.first + l.count; ++k) {
      const prof::TraceRange& r = m.ranges[static_cast<size_t>(k)];
      if (m.extra(r).external_id != 0)
        by_id.emplace(std::make_pair(r.rank, m.extra(r).external_id), static_cast<int32_t>(k));
      else
        by_info.emplace(info_key(r), static_cast<int32_t>(k));
    }
  }
  for (auto& r : m.ranges.rows()) {
    const int64_t ext = m.extra(r).external_id;
    if (!r.is_kernel || ext == 0) continue;
    auto it = by_id.find({r.rank, ext});
    if (it != by_id.end()) {
      r.origin = it->second;
      continue;
    }
    auto jt = by_info.find(info_key(r));
    if (jt != by_info.end()) r.origin = jt->second;
  }
}

void link_figures(int64_t total, int world, int threads) {
  const prof::TraceModel m = gpu_shaped_model(total, world);
  auto timed = [&](const std::function<void(prof::TraceModel&)>& link, prof::TraceModel* out) {
    *out = m;
    const auto t0 = std::chrono::steady_clock::now();
    link(*out);
    return since(t0);
  };
  prof::TraceModel trees, one, many;
  const double t_trees = timed(link_kernels_by_trees, &trees);
  const double t_one = timed([](prof::TraceModel& x) { prof::detail::link_kernels_to_launchers(x, 1); }, &one);
  const double t_many = timed([&](prof::TraceModel& x) { prof::detail::link_kernels_to_launchers(x, threads); }, &many);
  bool same = true;
  int64_t linked = 0;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    same &= trees.ranges[i].origin == one.ranges[i].origin && trees.ranges[i].origin == many.ranges[i].origin;
    linked += trees.ranges[i].origin >= 0;
  }
  std::printf(
      "link kernels to launchers, %zu ranges over %d ranks (%lld kernels linked): trees (previous way) %.2f s, "
      "per-rank sorted tables %.2f s on 1 thread (%.2fx), %.2f s on %d (%.2fx); links %s\n",
      m.ranges.size(), world, static_cast<long long>(linked), t_trees, t_one, t_trees / t_one, t_many,
      threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()), t_trees / t_many,
      same ? "identical" : "DIFFER");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trace loading at scale: legacy vs parallel loader, and TraceWriter write rate"};
  std::vector<int64_t> sizes{1'000'000, 10'000'000};
  int world = 8, threads = 0;
  int64_t write_ranges = 300'000, ranges_per_step = 10'000;
  int32_t queue_steps = 2;
  double compute_ms = 20;
  bool write_only = false;
  std::string cache = (fs::temp_directory_path() / "ulysses-trace-bench").string();
  bool skip_legacy = false, skip_formats = false;
  app.add_option("--sizes", sizes, "total ranges of each generated run (all ranks)")->delimiter(',');
  app.add_flag("--skip-formats", skip_formats, "no format-3 run and no rank-file cache rows");
  app.add_option("--ranks", world, "rank files per run")->check(CLI::Range(1, 64));
  app.add_option("--threads", threads, "LoadOptions::threads of the new loader (0 = one per core)");
  app.add_option("--cache-dir", cache, "where generated runs are kept between runs of the benchmark");
  app.add_option("--write-ranges", write_ranges, "ranges for the write-rate figures (0 = skip)");
  app.add_flag("--skip-legacy", skip_legacy, "measure only the new loader");
  app.add_option("--ranges-per-step", ranges_per_step, "push/pop ranges per step in the Tracer write figures")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  app.add_option("--queue-steps", queue_steps, "writer_queue_steps of the writer-thread run")
      ->check(CLI::Range(1, 1000));
  app.add_option("--step-compute-ms", compute_ms, "compute (a spin on the training thread) per step of the Tracer runs")
      ->check(CLI::Range(0.0, 60'000.0));
  app.add_flag("--write-only", write_only, "only the write figures (no loading)");
  int64_t link_ranges = 2'000'000;
  app.add_option("--link-ranges", link_ranges,
                 "ranges of the GPU-shaped model for the kernel -> launcher link figures (0 = skip)");
  CLI11_PARSE(app, argc, argv);

  std::printf("machine: %u hardware threads; new loader threads = %d (0 = one per core)\n",
              std::thread::hardware_concurrency(), threads);
  if (write_only) sizes.clear();
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
    {
      // The same loader with its ranges left as rows (LoadOptions::seal off): what sealing costs
      // and saves.
      const Figures ro = measure_open(run, false, threads, FileCaches::Off, false),
                    rs = measure_summary(run, false, threads, FileCaches::Off, false);
      if (!ro.ok || !rs.ok) {
        std::printf("  rows      FAILED\n");
      } else {
        print_row("rows", ro, rs);
        std::printf(
            "  ratio     sealed / rows: heap %.1f / %.1f B/range (%.2fx less), peak RSS %.2fx the rows'; open %.2fx "
            "the time (CPU %.2fx), summary %.2fx (CPU %.2fx); model %s, summary JSON %s\n",
            no.heap_bytes / no.ranges, ro.heap_bytes / ro.ranges, ro.heap_bytes / no.heap_bytes,
            static_cast<double>(no.peak_rss_kib) / static_cast<double>(ro.peak_rss_kib), no.open_s / ro.open_s,
            no.open_cpu_s / ro.open_cpu_s, ns.summary_s / rs.summary_s, ns.summary_cpu_s / rs.summary_cpu_s,
            ro.model_hash == no.model_hash ? "identical" : "DIFFERS",
            rs.json_hash == ns.json_hash ? "identical" : "DIFFERS");
      }
    }
    if (!skip_formats) {
      // The same ranges in format 3 files, and format 4 read from rank-file caches.
      const std::string run3 = ensure_run(cache, total, world, 3);
      const Figures o3 = measure_open(run3, false, threads), s3 = measure_summary(run3, false, threads);
      for (const auto& file : prof::find_rank_files(run)) fs::remove(prof::rank_file_cache_path(file));
      const Figures w = measure_open(run, false, threads, FileCaches::Write);
      const Figures oc = measure_open(run, false, threads, FileCaches::Read);
      const Figures sc = measure_summary(run, false, threads, FileCaches::Read);
      if (!o3.ok || !s3.ok || !w.ok || !oc.ok || !sc.ok) {
        std::printf("  formats / rank-file caches FAILED\n");
      } else {
        print_row("format 3", o3, s3);
        print_row("file cache", oc, sc);
        std::printf(
            "  ratio     format 4 / format 3 (rows): open %.2fx faster (CPU %.2fx), summary %.2fx (CPU %.2fx); "
            "model %s, summary JSON %s\n",
            o3.open_s / no.open_s, o3.open_cpu_s / no.open_cpu_s, s3.summary_s / ns.summary_s,
            s3.summary_cpu_s / ns.summary_cpu_s, o3.model_hash == no.model_hash ? "identical" : "DIFFERS",
            s3.json_hash == ns.json_hash ? "identical" : "DIFFERS");
        std::printf(
            "  ratio     rank-file caches / rows (format 4): open %.2fx faster (CPU %.2fx), summary %.2fx (CPU "
            "%.2fx); %d of %d files from their cache; model %s, summary JSON %s\n",
            no.open_s / oc.open_s, no.open_cpu_s / oc.open_cpu_s, ns.summary_s / sc.summary_s,
            ns.summary_cpu_s / sc.summary_cpu_s, oc.files_from_cache, world,
            oc.model_hash == no.model_hash ? "identical" : "DIFFERS",
            sc.json_hash == ns.json_hash ? "identical" : "DIFFERS");
        double trace_bytes = 0;
        std::error_code ec;
        for (const auto& file : prof::find_rank_files(run)) trace_bytes += static_cast<double>(fs::file_size(file, ec));
        std::printf(
            "  cache     written by a first open in %.2f s (CPU %.2f s; %d files); %.1f MB = %.1f B/range beside "
            "%.1f MB of rank files (%.1f B/range)\n",
            w.open_s, w.open_cpu_s, w.file_caches_written, w.cache_bytes / 1e6,
            w.cache_bytes / static_cast<double>(total), trace_bytes / 1e6, trace_bytes / static_cast<double>(total));
      }
    }
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

  if (link_ranges > 0 && !write_only) link_figures(link_ranges, world, threads);

  if (write_ranges > 0) {
    // TraceWriter on the calling thread (one core): what the writer thread can sustain.
    const std::string dir = cache + "/write";
    fs::create_directories(dir);
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    const int64_t n = generate_rank(dir + "/w.sqlite", 0, 1, write_ranges, 32);
    const double wall = since(t0), cpu = cpu_now() - c0;
    std::printf("write:    TraceWriter %lld ranges: %.2f M ranges/s wall, %.2f M ranges/s of one core (CPU)\n",
                static_cast<long long>(n), n / wall / 1e6, n / cpu / 1e6);
    // The Tracer as the engine uses it: per step, push/pop on the training thread, then
    // end_step, synchronous (the step writes to SQLite) and with the writer thread.
    const int64_t steps = std::max<int64_t>(1, write_ranges / ranges_per_step);
    std::printf(
        "          Tracer, %lld steps x (%lld push/pop ranges + %.0f ms compute spin), training thread | writer:\n",
        static_cast<long long>(steps), static_cast<long long>(ranges_per_step), compute_ms);
    TracerRun runs[2];
    const int32_t queues[2] = {0, queue_steps};
    for (int k = 0; k < 2; ++k) {
      runs[k] = run_tracer(dir + "/t" + std::to_string(k) + ".sqlite", queues[k], steps, ranges_per_step, compute_ms);
      const TracerRun& r = runs[k];
      std::printf(
          "  %-22s push+pop %4.0f ns/range | end_step %7.1f ns/range (%6.3f s; median step %8.3f ms) | writer CPU "
          "%.2f M ranges/s | wall (open..close) %.2f M ranges/s; end_step waited %lld times\n",
          k == 0 ? "synchronous end_step" : ("writer thread (q=" + std::to_string(queues[k]) + ")").c_str(),
          r.push_s * 1e9 / r.ranges, r.end_step_s * 1e9 / r.ranges, r.end_step_s, r.end_step_median_s * 1e3,
          r.ranges / r.writer_cpu_s / 1e6, r.ranges / r.wall_s / 1e6, static_cast<long long>(r.waits));
    }
    std::printf(
        "  ratio (sync/thread)    end_step on the training thread %.1fx in all, %.0fx median step; writer CPU "
        "%.2fx; wall %.2fx\n",
        runs[0].end_step_s / runs[1].end_step_s, runs[0].end_step_median_s / runs[1].end_step_median_s,
        runs[0].writer_cpu_s / runs[1].writer_cpu_s, runs[0].wall_s / runs[1].wall_s);
    fs::remove_all(dir);
  }
  return 0;
}
