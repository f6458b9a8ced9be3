// What-if benchmark (prints figures; not a test): on this machine's CPU ranks, calibrates the
// step simulator (engine/sim) to one measured run (a ~3.6M-parameter Llama, sp 2, sequence S),
// then for each what-if (sp 4; sequence 2S; head_chunks 2; ring 2; ZeRO-3 at sp 2 x dp 2)
// predicts the step with ulysses-run --simulate and measures it with ulysses-run, both read by
// the same analysis core: step time (median over the steps after the first) and exposed
// communication (communication not under compute, per rank and step), side by side.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_main.hpp"
#include "common/run_helper.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ulysses;

namespace {

struct Figures {
  double step_ms = 0, exposed_ms = 0, comm_ms = 0;
};

Figures figures_of(const prof::TraceModel& m) {
  prof::AnalysisOptions o;
  o.step_begin = 1;  // the first step warms up (a simulated run's steps are all alike)
  const prof::Summary s = prof::analyze(m, o);
  Figures f;
  f.step_ms = s.headline.step_ms;
  const double rank_steps = double(std::max<size_t>(1, s.steps.size()));
  f.exposed_ms = double(s.overall.comm_ns - s.overall.overlap_ns) / rank_steps / 1e6;
  f.comm_ms = double(s.overall.comm_ns) / rank_steps / 1e6;
  return f;
}

std::string sh_out(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  if (pclose(f) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  return out;
}

double err(double pred, double meas) { return meas > 0 ? 100.0 * (pred - meas) / meas : 0; }

// The kind a range is counted under in the per-kind breakdown: compute by phase and direction
// (its exclusive time on its host thread; "_outer": a range holding ranges of its own phase, e.g.
// the ring's attention around its blocks, whose own time is packing and waiting for the hops),
// communication by what it is (its whole duration,
// waiting included, on whichever lane carries it): the SP all-to-alls, the ring's K/V and dK/dV
// hops, ZeRO-3's gathers and reduce-scatters, the gradient reduction, the loss all-reduce.
std::string breakdown_kind(const prof::TraceRange& r, const prof::Lane& lane) {
  const char* dir = r.dir == prof::Direction::Backward    ? "_bwd"
                    : r.dir == prof::Direction::Forward   ? "_fwd"
                    : r.dir == prof::Direction::Recompute ? "_rec"
                                                          : "";
  const int64_t tid = lane.tid_or_stream;
  switch (r.phase) {
    case prof::Phase::A2ASeqToHead:
    case prof::Phase::A2AHeadToSeq:
      return std::string("[c] all_to_all") + dir;
    case prof::Phase::RingStep:
      return tid == prof::kRingGradTid ? "[c] ring_dkv_hop" : "[c] ring_kv_hop";
    case prof::Phase::GradAllReduce:
      if (tid == prof::kZeroGatherTid || r.dir == prof::Direction::None) return "[c] zero_gather";
      if (tid == prof::kZeroReduceTid) return "[c] reduce_scatter";
      return "[c] grad_reduce";
    case prof::Phase::Collective:
      return "[c] loss_allreduce";
    case prof::Phase::Step:
    case prof::Phase::Backward:
    case prof::Phase::Optimizer:
      return prof::phase_name(r.phase);
    default:
      return std::string(prof::phase_name(r.phase)) + dir;
  }
}

// Milliseconds per rank and step (steps after the first) of each breakdown kind.
std::map<std::string, double> kind_ms(const prof::TraceModel& m) {
  std::vector<double> child(m.ranges.size(), 0);
  std::vector<bool> outer(m.ranges.size(), false);  // holds ranges of its own phase (chunks, ring blocks)
  std::set<std::pair<int32_t, int64_t>> rank_steps;
  for (const prof::StepInfo& st : m.steps)
    if (st.step >= 1) rank_steps.insert({st.rank, st.step});
  auto counted = [&](const prof::TraceRange& r) {
    const prof::LaneKind k = m.lanes[static_cast<size_t>(r.lane)].kind;
    return !r.is_kernel && r.step >= 1 && (k == prof::LaneKind::HostThread || k == prof::LaneKind::Comm);
  };
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    if (!counted(r) || r.parent < 0) continue;
    const auto up = static_cast<size_t>(r.parent);
    child[up] += double(r.duration());
    if (m.ranges[up].phase == r.phase && !prof::phase_is_comm(r.phase)) outer[up] = true;
  }
  std::map<std::string, double> out;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    if (!counted(r)) continue;
    const bool comm = prof::phase_is_comm(r.phase);
    if (!comm && m.lanes[static_cast<size_t>(r.lane)].kind != prof::LaneKind::HostThread) continue;
    if (comm && r.parent >= 0 && prof::phase_is_comm(m.ranges[static_cast<size_t>(r.parent)].phase)) continue;
    const double ns = comm ? double(r.duration()) : std::max(0.0, double(r.duration()) - child[i]);
    out[breakdown_kind(r, m.lanes[static_cast<size_t>(r.lane)]) + (outer[i] ? "_outer" : "")] += ns;
  }
  for (auto& kv : out) kv.second /= 1e6 * double(std::max<size_t>(1, rank_steps.size()));
  return out;
}

// The per-kind comparison of one what-if: every kind over 1% of the measured step, the largest
// absolute error first, and the sums of compute and of communication.
void print_breakdown(const prof::TraceModel& pred, const prof::TraceModel& meas, double step_ms) {
  const auto p = kind_ms(pred), q = kind_ms(meas);
  std::set<std::string> kinds;
  for (const auto& kv : p) kinds.insert(kv.first);
  for (const auto& kv : q) kinds.insert(kv.first);
  std::vector<std::pair<double, std::string>> rows;
  double sums[2][2] = {{0, 0}, {0, 0}};  // [compute, comm][pred, meas]
  for (const std::string& k : kinds) {
    const double a = p.count(k) ? p.at(k) : 0.0, b = q.count(k) ? q.at(k) : 0.0;
    const int c = k.rfind("[c]", 0) == 0 ? 1 : 0;
    sums[c][0] += a, sums[c][1] += b;
    if (std::max(a, b) >= 0.01 * step_ms) rows.push_back({-std::abs(a - b), k});
  }
  std::sort(rows.begin(), rows.end());
  std::printf("    %-26s %9s %9s %9s %7s\n", "kind ([c] communication)", "pred ms", "meas ms", "diff ms", "err");
  for (const auto& [neg, k] : rows) {
    const double a = p.count(k) ? p.at(k) : 0.0, b = q.count(k) ? q.at(k) : 0.0;
    std::printf("    %-26s %9.2f %9.2f %+9.2f %+6.0f%%\n", k.c_str(), a, b, a - b, err(a, b));
  }
  const char* names[2] = {"all compute (exclusive)", "all communication"};
  for (int c = 0; c < 2; ++c)
    std::printf("    %-26s %9.2f %9.2f %+9.2f %+6.0f%%\n", names[c], sums[c][0], sums[c][1], sums[c][0] - sums[c][1],
                err(sums[c][0], sums[c][1]));
}

// The machine's 1-minute load average: the measured side moves with what else runs on the
// shared cores (the simulator knows only the calibration run), so each row shows it.
double load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  double l = -1;
  if (f) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

}  // namespace

namespace {

struct Setup {
  std::string cfg;
  std::vector<std::string> model;
  std::vector<std::string> with(const std::vector<std::string>& extra) const {
    std::vector<std::string> v = model;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  }
};

struct Calibration {
  std::string hw;  // the fitted description
  prof::TraceModel model;
  double load = 0;  // the load average before its measured run
};

// Measures the calibration run (sp 2, S) and fits cpu-ranks to it; prints what it fitted.
Calibration calibrate_now(const Setup& st, const std::vector<std::string>& sets, bool verbose) {
  Calibration c;
  const std::string base_dir = bench::scratch("whatif_base");
  c.load = load_average();
  const auto t0 = std::chrono::steady_clock::now();
  const double base_cpu = bench::run(st.cfg, st.with(sets), base_dir).cpu_s;
  const double base_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.hw = bench::scratch("whatif_cpu_calibrated.json");
  std::filesystem::remove(c.hw);
  // The machine's other load while the calibration run ran, from that run alone: the CPU its 2
  // ranks got (user + system of the run) over the time they were runnable (its wall time less
  // the share of the step they waited in collectives) is each rank's share of the cores; fair
  // sharing of C cores among 2 ranks and X other runnable processes gives C / (2 + X) each.
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  c.model = prof::load_trace(base_dir);
  const Figures bf = figures_of(c.model);
  const double busy = base_wall * std::max(0.1, 1.0 - bf.comm_ms / std::max(1e-9, bf.step_ms));
  const double share = base_cpu / (2.0 * busy);
  const double background = std::max(0.0, cores / std::max(1e-9, share) - 2.0);
  char bg[32];
  std::snprintf(bg, sizeof bg, "%.2f", background);
  const std::string cal =
      sh_out(std::string(ULYSSES_RUN_BIN) + " --calibrate " + base_dir + " --simulate cpu-ranks --background-load " +
             bg + " --out " + c.hw + " --worker " + ULYSSES_WORKER_BIN);
  std::printf(
      "calibration run: %.1f s wall, %.1f s CPU, %.0f%% of its steps in collectives: %.2f cores per rank of %.0f, "
      "background load %s (load average before it: %.1f)\n",
      base_wall, base_cpu, 100.0 * bf.comm_ms / std::max(1e-9, bf.step_ms), share, cores, bg, c.load);
  if (verbose) std::printf("%s\n", cal.c_str());
  return c;
}

// Simulates `sets` with the fitted description, measures it (the calibration run itself when
// `is_base`), prints the row and its per-kind breakdown.
void predict_and_measure(const Setup& st, const char* name, const std::vector<std::string>& sets,
                         const Calibration& cal, bool is_base) {
  const std::string sim = bench::scratch("whatif_sim");
  std::filesystem::remove_all(sim);
  std::string cmd = std::string(ULYSSES_RUN_BIN) + " " + st.cfg + " --simulate " + cal.hw + " --out " + sim +
                    " --worker " + ULYSSES_WORKER_BIN;
  for (const auto& s : st.with(sets)) cmd += " --set " + s;
  sh_out(cmd);
  const prof::TraceModel pm = prof::load_trace(sim);
  const Figures p = figures_of(pm);
  const double load = load_average();
  const prof::TraceModel mm =
      is_base ? cal.model : prof::load_trace(bench::run(st.cfg, st.with(sets), bench::scratch("whatif_meas")).dir);
  const Figures m = figures_of(mm);
  std::printf("%-28s | %9.1f %9.1f %+6.1f%% | %11.2f %11.2f %+6.1f%% | %9.2f %9.2f | %.1f-%.1f\n", name, p.step_ms,
              m.step_ms, err(p.step_ms, m.step_ms), p.exposed_ms, m.exposed_ms, err(p.exposed_ms, m.exposed_ms),
              p.comm_ms, m.comm_ms, is_base ? cal.load : load, load_average());
  print_breakdown(pm, mm, m.step_ms);
  std::fflush(stdout);
}

}  // namespace

static int bench_main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int S = argc > 2 ? std::atoi(argv[2]) : 1024;
  // "fresh": a new calibration run (and fit) right before each what-if, so that each prediction
  // comes from the machine's load of the same minute (still one measured run per prediction).
  const bool fresh = argc > 3 && std::string(argv[3]) == "fresh";
  Setup st;
  st.cfg = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json";
  st.model = {"model.hidden_size=256",       "model.intermediate_size=704", "model.num_hidden_layers=4",
              "model.num_attention_heads=8", "model.num_key_value_heads=4", "train.steps=" + std::to_string(steps),
              "profile.enabled=true"};
  const std::string seq = "train.seq_length=" + std::to_string(S), seq2 = "train.seq_length=" + std::to_string(2 * S);
  std::printf(
      "what-if on this machine's CPU ranks: Llama hidden 256, 4 layers, 8 heads (4 kv), ffn 704 (~3.6M "
      "parameters), fp32; calibrated on sp 2 at S = %d%s; %d steps per run, medians over steps 1..\n\n",
      S, fresh ? " again before each what-if" : "", steps);
  const std::vector<std::string> base = {"parallel.sp_size=2", seq};
  struct Case {
    const char* name;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"sp 2, S (calibration run)", base},
      {"sp 4, S", {"parallel.sp_size=4", seq}},
      {"sp 2, 2S", {"parallel.sp_size=2", seq2}},
      {"sp 2, head_chunks 2", {"parallel.sp_size=2", "parallel.head_chunks=2", seq}},
      {"sp 2 x ring 2", {"parallel.sp_size=2", "parallel.ring_size=2", seq}},
      {"ZeRO-3, sp 2 x dp 2", {"parallel.sp_size=2", "parallel.dp_size=2", "train.zero_stage=3", seq}},
  };
  Calibration cal = calibrate_now(st, base, true);
  std::printf("%-28s | %9s %9s %7s | %11s %11s %7s | %9s %9s | %s\n", "what if", "pred ms", "meas ms", "err",
              "pred exp ms", "meas exp ms", "err", "pred comm", "meas comm", "load");
  for (size_t i = 0; i < cases.size(); ++i) {
    if (fresh && i > 0) cal = calibrate_now(st, base, false);
    predict_and_measure(st, cases[i].name, cases[i].sets, cal, i == 0);
  }
  std::printf(
      "\ntargets: step time within 15%%, exposed communication within 25%% (per rank and step); load: the machine's "
      "1-minute load average before and after the measured run (the calibration run's row: before it, and now)\n");
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_whatif [steps] [S] [fresh]   (default 5 1024)\n  calibrates the step simulator to a measured sp 2 "
      "run and predicts, then measures: sp 4, 2S, head_chunks 2, ring 2, ZeRO-3 at sp 2 x dp 2; fresh: calibrates "
      "again right before each what-if",
      argc, argv, [&] { return bench_main(argc, argv); });
}
