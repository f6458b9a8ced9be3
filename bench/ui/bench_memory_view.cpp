// bench_memory_view: what a trace with a million memory-category rows per rank costs the
// summary and the studio's memory view (issue 54: 31-35 s and 2.7 GB for the memory view). For
// each size (ROWS/4 and ROWS rows per rank, over RANKS ranks) it writes the rank files with the
// profiler's TraceWriter, then times, printed side by side with the peak resident memory of
// each phase (VmHWM, reset between phases through /proc/self/clear_refs):
//   - load: prof::load_trace of the folder (rows, no rank-file caches);
//   - summary: prof::analyze (memory by category among the rest) and memory_by_category alone;
//   - memory view: MemoryView::setIndex (rank list, planned curve) + its first chart and peak
//     table, on the timeline index the studio builds (offscreen).
// CPU time is the process's (every thread); the ratio between the two sizes is what the test
// MemoryViewCategories.MillionRowsScaleLinearly asserts at a smaller size.
//
//   bench_memory_view [ROWS [RANKS]]     default: 1000000 2
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QPen>

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "trace/memory_view.hpp"
#include "trace/timeline_index.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

namespace fs = std::filesystem;
using namespace ulysses;
using Clock = std::chrono::steady_clock;

namespace {

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int64_t status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::string(key).size());
  return -1;
}

void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Phase {
  double wall_s = 0, cpu_s = 0;
  int64_t peak_mib = 0;
};

template <class F>
Phase measure(F&& f) {
  reset_peak();
  const auto w0 = Clock::now();
  const double c0 = cpu_s();
  f();
  Phase p;
  p.wall_s = std::chrono::duration<double>(Clock::now() - w0).count();
  p.cpu_s = cpu_s() - c0;
  p.peak_mib = status_kib("VmHWM:") / 1024;
  return p;
}

// ROWS category rows per rank over 10 steps: range edges (begin/end of 6 phases x 16 layers),
// a peak row and its 16 layer rows every 1000 rows; the planner's peak row and its curve (one
// step's range edges) on rank 0.
void write_run(const fs::path& run, int64_t rows, int ranks) {
  fs::remove_all(run);
  fs::create_directories(run / "trace");
  for (int r = 0; r < ranks; ++r) {
    prof::TracerOptions o;
    o.path = (run / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string();
    o.rank = r;
    o.world_size = ranks;
    o.sp_rank = r;
    o.sp_size = ranks;
    o.device = "cpu";
    o.run_id = "bench";
    prof::TraceWriter w(o, 1000 + r);
    w.begin();
    const int64_t per_step = std::max<int64_t>(1, rows / 10);
    prof::MemoryCategories c;
    if (r == 0) {
      for (int k = 0; k < prof::kMemCategories; ++k) c.bytes[k] = (k + 1) << 20;
      w.write_memory_categories(0, -1, prof::MemEdge::Planned, -1, -1, c);
      // The planner's curve: one step's range edges, as the dry run writes them (so every
      // measured edge gets its planned point, as in a real run).
      for (int64_t i = 0; i < std::max<int64_t>(1, rows / 10); ++i)
        w.write_memory_categories(1 + i % 999, -1, i % 2 ? prof::MemEdge::PlannedEnd : prof::MemEdge::PlannedBegin,
                                  static_cast<int32_t>((i / 2) % 6), static_cast<int32_t>((i / 12) % 16), c);
    }
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = 1000 * (i + 1);
      for (int k = 0; k < prof::kMemCategories; ++k) c.bytes[k] = ((i * 7919 + k * 104729) % 4096) << 12;
      if (i % 1000 == 999) {
        w.write_memory_categories(t, i / per_step, prof::MemEdge::Peak, -1, -1, c);
        for (int l = 0; l < 16; ++l) w.write_memory_categories(t, i / per_step, prof::MemEdge::PeakLayer, -1, l, c);
        i += 16;
        continue;
      }
      w.write_memory_categories(t, i / per_step, i % 2 ? prof::MemEdge::End : prof::MemEdge::Begin,
                                static_cast<int32_t>((i / 2) % 6), static_cast<int32_t>((i / 12) % 16), c);
      if (i % 200000 == 0) {
        w.commit();
        w.begin();
      }
    }
    for (int64_t s = 0; s < 10; ++s) {
      prof::StepRecord sr;
      sr.step = s;
      sr.step_ms = 1.0;
      w.write_step(sr, 1000 * (s * per_step + 1), 1000 * ((s + 1) * per_step));
    }
    w.commit();
    w.close();
  }
}

void print(const char* what, const Phase& p) {
  std::printf("  %-28s %8.2f s wall %8.2f s cpu %7lld MiB peak\n", what, p.wall_s, p.cpu_s,
              static_cast<long long>(p.peak_mib));
}

}  // namespace

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 2;
  const fs::path dir = fs::temp_directory_path() / ("bench_memory_view." + std::to_string(::getpid()));
  double cpu_of[2] = {0, 0};
  int n = 0;
  for (const int64_t size : {rows / 4, rows}) {
    const fs::path run = dir / std::to_string(size);
    write_run(run, size, ranks);
    std::printf("%lld category rows per rank, %d ranks:\n", static_cast<long long>(size), ranks);
    std::shared_ptr<prof::TraceModel> m;
    prof::LoadOptions lo;
    lo.file_caches = false;
    lo.write_file_caches = false;
    const Phase load = measure([&] { m = std::make_shared<prof::TraceModel>(prof::load_trace(run.string(), lo)); });
    print("load (rows)", load);
    size_t peaks = 0;
    const Phase by_cat = measure([&] { peaks = prof::memory_by_category(*m).size(); });
    print("memory_by_category", by_cat);
    const Phase summary = measure([&] { (void)prof::analyze(*m); });
    print("summary (analyze)", summary);
    std::shared_ptr<ui::TimelineIndex> ix;
    const Phase index = measure([&] { ix = ui::TimelineIndex::build(m); });
    print("timeline index", index);
    ui::MemoryView mv;
    mv.resize(1200, 600);
    mv.show();
    const Phase view = measure([&] {
      mv.setIndex(ix);
      QApplication::processEvents();
    });
    print("memory view (open + draw)", view);
    std::printf("  (%zu rank rows in the peak table, %d series drawn)\n", peaks, mv.seriesCount());
    // The planner's curve over the whole trace: one point per range edge before the fold,
    // about two per pixel column after it (what the chart is given).
    const auto planned = ui::planned_curve(*m);
    size_t unfolded = 0, folded = 0;
    const Phase curve = measure([&] {
      unfolded = ui::planned_curve_points(*m, planned, 0, m->t_min, m->t_max + 1).size();
      folded = ui::planned_curve_points(*m, planned, 0, m->t_min, m->t_max + 1, 1200).size();
    });
    std::printf("  planner's curve on rank 0: %zu points unfolded, %zu folded to 1200 columns (%.2f s cpu)\n", unfolded,
                folded, curve.cpu_s);
    // What drawing it costs as a dotted line, unfolded (as the view drew it) and folded.
    for (const int cols : {0, 1200}) {
      const auto pts = ui::planned_curve_points(*m, planned, 0, m->t_min, m->t_max + 1, cols);
      const Phase paint = measure([&] {
        auto* chart = new QChart;
        auto* line = new QLineSeries;
        QList<QPointF> list;
        for (const auto& [t, b] : pts) list.append(QPointF(double(t) / 1e6, double(b) / 1048576.0));
        line->replace(list);
        line->setPen(QPen(QColor(20, 20, 20), 1.5, Qt::DotLine));
        chart->addSeries(line);
        chart->createDefaultAxes();
        QChartView view(chart);
        view.resize(1200, 600);
        (void)view.grab();
      });
      print(cols ? "  drawn folded" : "  drawn unfolded (before)", paint);
    }
    cpu_of[n++] = by_cat.cpu_s + summary.cpu_s + view.cpu_s;
  }
  std::printf("CPU time of summary + memory view, 4x the rows: %.2f x (linear: 4)\n",
              cpu_of[0] > 0 ? cpu_of[1] / cpu_of[0] : 0.0);
  fs::remove_all(dir);
  return 0;
}
