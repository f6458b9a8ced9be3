// bench_timeline: how fast the studio's timeline opens and draws huge traces. For generated
// Ulysses-shaped traces of N ranges over 8 ranks it prints
//   - open from file: write RUN/trace/rank*.sqlite with the profiler's TraceWriter, then time
//     prof::load_trace, the timeline index and prof::analyze (what TraceView does in its
//     loader thread), for sizes up to --file-up-to; then the studio's whole open
//     (ui::load_and_prepare) without and with the caches beside the trace: when the report is
//     shown and when the timeline's first frame is painted (the overview's, from its cache);
//   - open in memory: time the timeline index build from the in-memory TraceModel (all sizes);
//   - one frame's draw list (compute_draw_list, no painting) at full view and at a 1 ms
//     window, median of --frames runs, for all lanes (no vertical culling: worst case).
// Aims: open 1M < 2 s; frame < 16 ms at any zoom.
#include <CLI/CLI.hpp>

#include <QApplication>
#include <QImage>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "testdata/synthetic_trace.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_index.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_loader.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/rank_file_cache.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

namespace fs = std::filesystem;
using namespace ulysses;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// Writes the model's host and kernel ranges as one trace file per rank (head lanes are not
// written: the loader rebuilds them as copies).
void write_run(const prof::TraceModel& m, const fs::path& run) {
  fs::create_directories(run / "trace");
  for (const auto& ri : m.ranks) {
    prof::TracerOptions o;
    o.path = (run / "trace" / ("rank" + std::to_string(ri.rank) + ".sqlite")).string();
    o.rank = ri.rank;
    o.world_size = int32_t(m.ranks.size());
    o.sp_rank = ri.sp_rank;
    o.sp_size = m.sp_size;
    o.device = ri.device;
    prof::TraceWriter w(o, ri.pid);
    w.name_thread(100, "main");
    w.begin();
    int64_t n = 0;
    for (const auto& lane : m.lanes) {
      if (lane.rank != ri.rank || lane.kind == prof::LaneKind::HeadRange) continue;
      for (int64_t i = lane.first; i < lane.first + lane.count; ++i) {
        const auto& r = m.ranges[size_t(i)];
        if (r.is_kernel) {
          prof::KernelRecord k;
          k.start_ns = r.start_ns;
          k.end_ns = r.end_ns;
          k.device = ri.rank;
          k.stream = int32_t(lane.tid_or_stream);
          k.name = m.strings[size_t(r.name_id)];
          w.write_kernel(k);
        } else {
          prof::RangeRecord rr;
          rr.start_ns = r.start_ns;
          rr.end_ns = r.end_ns;
          rr.tid = lane.kind == prof::LaneKind::Comm ? prof::kCommTid : 100;
          rr.push_pop = lane.kind != prof::LaneKind::Comm;
          rr.step = r.step;
          rr.info = prof::RangeInfo{
              r.phase, r.dir, r.layer, r.head_begin, r.head_end, r.chunk, m.extra(r).bytes_sent, m.extra(r).bytes_recv};
          w.write_range(rr);
        }
        if (++n % 200000 == 0) {
          w.commit();
          w.begin();
        }
      }
    }
    for (const auto& s : m.steps) {
      if (s.rank != ri.rank) continue;
      prof::StepRecord sr;
      sr.step = s.step;
      sr.loss = s.loss;
      sr.step_ms = s.step_ms;
      w.write_step(sr, s.start_ns, s.end_ns);
    }
    for (const auto& p : m.memory)
      if (p.rank == ri.rank)
        w.write_memory(p.t_ns, -1, m.strings[size_t(p.label_id)], prof::MemorySample{p.allocated, p.reserved, p.peak});
    w.commit();
    w.close();
  }
}

struct FrameStats {
  double median_ms = 0, max_ms = 0;
  int64_t items = 0, folded_ranges = 0;
};

FrameStats frame(const ui::TimelineIndex& ix, const ui::TimelineLayout& layout, int64_t t0, int64_t t1, int width,
                 int runs) {
  ui::DrawParams p;
  p.vp.width_px = width;
  p.vp.fit(t0, t1);
  ui::DrawList dl;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto a = Clock::now();
    ui::compute_draw_list(ix, layout, p, &dl);
    ms.push_back(secs(a) * 1e3);
    p.vp.pan_px(i % 2 ? -3 : 3);  // a slightly different frame each time
  }
  std::sort(ms.begin(), ms.end());
  return FrameStats{ms[ms.size() / 2], ms.back(), int64_t(dl.items.size()), dl.folded_ranges};
}

// Draw list + QPainter into an offscreen image, as the widget does on screen.
double paint_ms(std::shared_ptr<const ui::TimelineIndex> ix, int64_t t0, int64_t t1, int width, int runs) {
  ui::TimelineWidget w;
  w.resize(width + w.gutterWidth(), 1000);
  w.setIndex(ix);
  ui::TimelineViewport vp = w.viewport();
  vp.width_px = width;
  vp.fit(t0, t1);
  QImage img(w.size(), QImage::Format_ARGB32_Premultiplied);
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    vp.pan_px(i % 2 ? -3 : 3);
    w.setViewport(vp);
    auto a = Clock::now();
    w.render(&img);
    ms.push_back(secs(a) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One offscreen render of a timeline widget over the whole trace (the first frame a user sees).
double first_frame_s(std::shared_ptr<const ui::TimelineIndex> ix, int width) {
  const auto a = Clock::now();
  ui::TimelineWidget w;
  w.resize(width + w.gutterWidth(), 1000);
  w.setIndex(std::move(ix));
  QImage img(w.size(), QImage::Format_ARGB32_Premultiplied);
  w.render(&img);
  return secs(a);
}

// The studio's open (ui::load_and_prepare, as TraceView's loader thread runs it) twice on the
// same files: without the caches beside the trace (the report waits for load + analysis, the
// timeline's first frame for load + index; both caches are written) and with them (report
// and overview from the caches before the ranges are read; the first frame is the overview's).
void studio_open_with_cache(const fs::path& run, int width) {
  unsetenv("ULYSSES_TRACE_NO_CACHE");
  // Older than the cache's racy window (2 s), as a finished run is: else nothing is cached.
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(run / "trace"))
    if (e.path().extension() == ".sqlite") {
      fs::last_write_time(e.path(), old);
      fs::remove(prof::rank_file_cache_path(e.path().string()));
    }
  fs::remove(prof::summary_cache_path(run.string()));
  fs::remove(prof::overview_cache_path(run.string()));
  double shown[2] = {0, 0}, total[2] = {0, 0}, painted[2] = {0, 0};
  bool cached[2] = {false, false}, overview[2] = {false, false};
  int files_cached[2] = {0, 0}, files_written = 0;
  double build_s = 0;
  int64_t overview_ranges = 0, full_ranges = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto a = Clock::now();
    double early_s = -1, paint_s = -1;
    const ui::LoadedTrace t =
        ui::load_and_prepare(QString::fromStdString(run.string()), {}, [&](const ui::LoadedTrace& e) {
          if (e.summary) early_s = secs(a);  // the loading page's report
          if (e.overview) {                  // what the loading page draws
            overview[pass] = true;
            overview_ranges = int64_t(e.overview->model().ranges.size());
            first_frame_s(e.overview, width);
            paint_s = secs(a);
          }
        });
    total[pass] = secs(a);
    if (!t.error.isEmpty()) {
      std::fprintf(stderr, "bench_timeline: studio open failed: %s\n", t.error.toStdString().c_str());
      return;
    }
    cached[pass] = t.summary_from_cache;
    files_cached[pass] = t.rank_files_from_cache;
    if (pass == 0) files_written = t.rank_file_caches_written;
    shown[pass] = early_s >= 0 ? early_s : t.summary_s;  // no cache: the report comes with the load
    // No overview: the first frame is the loaded trace's (after the whole open).
    painted[pass] = paint_s >= 0 ? paint_s : total[pass] - t.overview_build_s + first_frame_s(t.index, width);
    if (pass == 0) build_s = t.overview_build_s;
    full_ranges = int64_t(t.model->ranges.size());
  }
  std::error_code ec;
  const auto cache_bytes = fs::file_size(prof::overview_cache_path(run.string()), ec);
  std::printf(
      "  studio open (load_and_prepare): report shown after %.2f s without a summary cache (load + analysis; "
      "writes it), %.2f s from the cache%s (%.1fx sooner); whole open %.2f s / %.2f s (%.2fx; rank files read "
      "from their caches: %d / %d, caches written by the first open: %d)\n",
      shown[0], shown[1], cached[1] && !cached[0] ? "" : " [cache NOT used as expected]",
      shown[1] > 0 ? shown[0] / shown[1] : 0.0, total[0], total[1], total[1] > 0 ? total[0] / total[1] : 0.0,
      files_cached[0], files_cached[1], files_written);
  std::printf(
      "  first paint of the timeline (%d px): %.2f s without the overview (load + index + analysis + frame), "
      "%.2f s from the overview cache%s (%.1fx sooner; %lld overview ranges for %lld, cache %.1f MB, "
      "built and written in %.2f s by the first open)\n",
      width, painted[0], painted[1], overview[1] && !overview[0] ? "" : " [overview NOT used as expected]",
      painted[1] > 0 ? painted[0] / painted[1] : 0.0, (long long)overview_ranges, (long long)full_ranges,
      ec ? 0.0 : double(cache_bytes) / 1e6, build_s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Timeline open and frame times on generated traces"};
  std::vector<int64_t> sizes{1'000'000, 10'000'000};
  int64_t file_up_to = 1'000'000;
  int frames = 15, width = 1600, ranks = 8;
  std::string dir = (fs::temp_directory_path() / "ulysses_bench_timeline").string();
  app.add_option("--sizes", sizes, "Range counts to generate")->delimiter(',');
  app.add_option("--file-up-to", file_up_to, "Largest size also written to SQLite and loaded (0: none)");
  app.add_option("--frames", frames, "Frames per measurement (median printed)");
  app.add_option("--width", width, "Timeline width in pixels");
  app.add_option("--ranks", ranks, "Ranks");
  app.add_option("--dir", dir, "Scratch directory for trace files (removed afterwards)");
  std::string write_run_dir;
  app.add_option("--write-run", write_run_dir,
                 "Only write a generated run (first --sizes entry) as DIR/trace/rank*.sqlite and exit (demo data)");
  bool paint = true;
  app.add_flag("!--no-paint", paint, "Skip the QPainter measurement (offscreen widget render)");
  bool studio_cache = true;
  app.add_flag("!--no-studio-cache", studio_cache,
               "Skip the studio open through the caches (report shown and first paint: computed vs cached)");
  CLI11_PARSE(app, argc, argv);
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  int qargc = 1;
  QApplication qapp(qargc, argv);
  if (frames < 1 || width < 10 || ranks < 1) {
    std::fprintf(stderr, "bench_timeline: --frames >= 1, --width >= 10, --ranks >= 1\n");
    return 2;
  }

  if (!write_run_dir.empty()) {
    testdata::SyntheticOptions o;
    o.ranks = ranks;
    o.target_ranges = sizes.empty() ? 100000 : sizes.front();
    try {
      write_run(*testdata::make_synthetic_trace(o), write_run_dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_timeline: cannot write %s: %s\n", write_run_dir.c_str(), e.what());
      return 1;
    }
    std::printf("wrote %s/trace/rank0..%d.sqlite\n", write_run_dir.c_str(), ranks - 1);
    return 0;
  }
  std::printf("%-10s %-9s %9s %9s %9s %9s %9s | %-10s %10s %10s %8s | %-10s %10s %10s %8s\n", "ranges", "source",
              "gen s", "write s", "load s", "index s", "analyze s", "full view", "median ms", "max ms", "items",
              "1 ms view", "median ms", "max ms", "items");
  for (int64_t n : sizes) {
    testdata::SyntheticOptions o;
    o.ranks = ranks;
    o.heads = 32;
    o.layers = 16;
    o.head_chunks = 4;
    o.kernels_per_range = 3;
    o.target_ranges = n;
    auto a = Clock::now();
    std::shared_ptr<const prof::TraceModel> model = testdata::make_synthetic_trace(o);
    const double gen_s = secs(a);
    double write_s = 0, load_s = 0, analyze_s = 0;
    std::string source = "memory";
    if (n <= file_up_to) {
      const fs::path run = fs::path(dir) / ("run_" + std::to_string(n));
      fs::remove_all(run);
      a = Clock::now();
      write_run(*model, run);
      write_s = secs(a);
      a = Clock::now();
      try {
        model = std::make_shared<const prof::TraceModel>(prof::load_trace(run.string()));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_timeline: load_trace failed: %s\n", e.what());
        return 1;
      }
      load_s = secs(a);
      source = "file";
      if (studio_cache) studio_open_with_cache(run, width);
      fs::remove_all(run);
    }
    a = Clock::now();
    auto ix = ui::TimelineIndex::build(model);
    const double index_s = secs(a);
    if (source == "file") {
      a = Clock::now();
      prof::analyze(*model);
      analyze_s = secs(a);
    }
    const auto layout = ui::compute_layout(*ix);
    const FrameStats full = frame(*ix, layout, ix->t_min(), ix->t_max(), width, frames);
    const int64_t mid = (ix->t_min() + ix->t_max()) / 2;
    const FrameStats ms1 = frame(*ix, layout, mid, mid + 1'000'000, width, frames);
    std::printf("%-10lld %-9s %9.2f %9.2f %9.2f %9.3f %9.2f | %-10s %10.3f %10.3f %8lld | %-10s %10.3f %10.3f %8lld\n",
                (long long)model->ranges.size(), source.c_str(), gen_s, write_s, load_s, index_s, analyze_s, "",
                full.median_ms, full.max_ms, (long long)full.items, "", ms1.median_ms, ms1.max_ms,
                (long long)ms1.items);
    {  // the same full view with every rank collapsed to its summary row (depth-0 rows only)
      const std::vector<uint8_t> all(ix->ranks().size(), ui::kRankCollapsed);
      const FrameStats c = frame(*ix, ui::compute_layout(*ix, {}, all), ix->t_min(), ix->t_max(), width, frames);
      std::printf("  all ranks collapsed: full view median %.3f ms (expanded %.3f ms), %lld items\n", c.median_ms,
                  full.median_ms, (long long)c.items);
    }
    std::printf("  open (load + index%s) = %.2f s; lanes %zu, rows %zu, steps %zu\n",
                source == "file" ? " + analyze" : "", load_s + index_s + analyze_s, model->lanes.size(),
                ix->rows().size(), ix->steps().size());
    if (paint) {
      std::printf(
          "  paint (draw list + QPainter, 1000 px tall widget, offscreen): full view %.2f ms, 1 ms view %.2f ms\n",
          paint_ms(ix, ix->t_min(), ix->t_max(), width, frames), paint_ms(ix, mid, mid + 1'000'000, width, frames));
    }
    std::fflush(stdout);
  }
  return 0;
}
