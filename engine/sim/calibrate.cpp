// Calibration of a hardware description to a measured run (see simulated_run.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "simulated_run.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::sim {

namespace {

struct KindTime {
  double seconds = 0;  // exclusive time, per rank and step
  double own = 0;      // simulated: the ranges' own work (what the efficiency scales), s
};

// Simulated: exclusive time of each kind on the compute stream (range minus its children),
// averaged over the ranks (the typical rank and, with rank skew, the slowest member by their share).
std::map<std::string, KindTime> simulated_kinds(const StepProgram& prog, const SimResult& res, const StepShape& s,
                                                const Hardware& hw) {
  const size_t n = prog.ops.size();
  const std::vector<double> own = own_seconds(prog, s, hw);
  std::vector<bool> outer(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Op& o = prog.ops[i];
    if (o.lane == 0 && o.parent >= 0 && !o.comm && prog.ops[static_cast<size_t>(o.parent)].info.phase == o.info.phase)
      outer[static_cast<size_t>(o.parent)] = true;
  }
  // With arrival jitter the late member's timeline holds its lateness as gaps, not as work: the
  // typical rank's ranges are the ones fitted (calibrate: the measured kinds less the lateness).
  const double share = res.slow_ranges.empty() || hw.arrival_jitter_s > 0 ? 0.0 : slow_share(s);
  std::map<std::string, KindTime> out;
  for (int c = 0; c < (share > 0 ? 2 : 1); ++c) {
    const double weight = c == 0 ? 1.0 - share : share, speed = c == 0 ? 1.0 : 1.0 + hw.rank_skew;
    std::vector<double> dur(n, 0), child(n, 0);
    for (const SimRange& r : c == 0 ? res.ranges : res.slow_ranges)
      dur[static_cast<size_t>(r.op)] = double(r.end_ns - r.start_ns) / 1e9;
    for (size_t i = 0; i < n; ++i)
      if (prog.ops[i].lane == 0 && prog.ops[i].parent >= 0) child[static_cast<size_t>(prog.ops[i].parent)] += dur[i];
    for (size_t i = 0; i < n; ++i) {
      const Op& o = prog.ops[i];
      if (o.lane != 0 || o.comm) continue;
      KindTime& k = out[nominal_work(o, s, outer[i]).kind];
      k.seconds += weight * std::max(0.0, dur[i] - child[i]);
      k.own += weight * speed * std::max(0.0, own[i] - hw.overhead_s);
    }
  }
  return out;
}

// The steps the fit reads: of the steps after the first, the middle one by step time (mean over
// the ranks), or the middle two for an even count, as the median step time every view reports
// is made; a step slowed by something else on the machine then does not move the fit. Empty:
// no step rows (then every step after the first).
using StepSet = std::set<int64_t>;
StepSet median_steps(const prof::TraceModel& m) {
  std::map<int64_t, std::pair<double, int64_t>> per;  // step -> (sum of step_ms, ranks)
  for (const prof::StepInfo& st : m.steps) {
    auto& p = per[st.step];
    p.first += st.step_ms, ++p.second;
  }
  std::vector<std::pair<double, int64_t>> v;  // (mean step ms, step)
  for (const auto& [step, p] : per)
    if (step >= 1 || per.size() == 1) v.push_back({p.first / double(p.second), step});
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[(v.size() - 1) / 2].second, v[v.size() / 2].second};
}

bool fitted_step(int64_t step, const StepSet& chosen) { return chosen.empty() ? step >= 1 : chosen.count(step) > 0; }

// Measured: the same on each rank's main thread, per rank and step (steps after the first).
std::map<std::string, double> measured_kinds(const prof::TraceModel& m, const StepShape& s, const StepSet& step,
                                             int64_t* rank_steps) {
  std::set<std::pair<int32_t, int32_t>> seen;
  std::vector<double> child(m.ranges.size(), 0);
  std::vector<bool> outer(m.ranges.size(), false);
  auto counted = [&](const prof::TraceRange& r) {
    const prof::Lane& lane = m.lanes[static_cast<size_t>(r.lane)];
    return lane.kind == prof::LaneKind::HostThread && !r.is_kernel && fitted_step(r.step, step);
  };
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    if (!counted(r) || r.parent < 0) continue;
    const auto p = static_cast<size_t>(r.parent);
    child[p] += double(r.duration()) / 1e9;
    if (!prof::phase_is_comm(r.phase) && m.ranges[p].phase == r.phase) outer[p] = true;
  }
  std::map<std::string, double> out;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    if (!counted(r) || prof::phase_is_comm(r.phase)) continue;
    seen.insert({r.rank, r.step});
    Op o;
    o.info.phase = r.phase;
    o.info.dir = r.dir;
    out[nominal_work(o, s, outer[i]).kind] += std::max(0.0, double(r.duration()) / 1e9 - child[i]);
  }
  *rank_steps = std::max<int64_t>(1, static_cast<int64_t>(seen.size()));
  for (auto& [k, v] : out) v /= double(*rank_steps);
  return out;
}

int32_t lane_of_tid(int64_t tid) {
  if (tid == prof::kRingTid) return prof::Tracer::kRingLane;
  if (tid == prof::kRingGradTid) return prof::Tracer::kRingGradLane;
  if (tid == prof::kZeroGatherTid) return prof::Tracer::kZeroGatherLane;
  if (tid == prof::kZeroReduceTid) return prof::Tracer::kZeroReduceLane;
  if (tid == prof::kCommTid) return prof::Tracer::kCommLane;
  return 0;
}

// A collective instance (the same (pg, seq) on each member, in one step): its fastest member's
// duration is the transfer (that member arrived last); the others' excess is waiting for it.
struct Instance {
  double fastest = 1e300, total = 0;
  int64_t members = 0;
  int cls = -1;  // 0 exchanges, 1 world; -1 no bytes (not in the link's fit)
};
using InstanceKey = std::tuple<int32_t, int32_t, int32_t, int32_t>;  // pg, seq, step, phase

// The link's latency a and bandwidth 1/b from the measured collectives (each instance's fastest
// member: the transfer without the waiting), so that the simulated total time of each class (the
// SP group's and the ring's exchanges; the world group's collectives) is the measured one:
// sum(a x steps + b x bytes) = sum(duration) for both classes, two equations in (a, b). When
// that has no positive solution (one class only, or the classes disagree), a = 0 and b from the
// world's collectives (else from all); what a class's total then still misses becomes its
// factor ("comm_sp", "comm_world"). *wait_s: the measured waiting, per rank and step.
bool fit_link(const prof::TraceModel& m, const StepShape& s, const StepSet& step, Hardware& hw, Link* link,
              double* wait_s, std::string* report) {
  double steps[2] = {0, 0}, bytes[2] = {0, 0}, secs[2] = {0, 0};
  int64_t count = 0;
  std::map<InstanceKey, Instance> inst;
  std::set<std::pair<int32_t, int32_t>> rank_steps;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    const prof::Lane& lane = m.lanes[static_cast<size_t>(r.lane)];
    if (r.is_kernel || !fitted_step(r.step, step)) continue;
    if (lane.kind == prof::LaneKind::HostThread) rank_steps.insert({r.rank, r.step});
    if (!prof::phase_is_comm(r.phase)) continue;
    if (lane.kind != prof::LaneKind::HostThread && lane.kind != prof::LaneKind::Comm) continue;
    const prof::RangeExtra e = m.extra(r);
    // Without a collective identity (older traces) each range is its own instance.
    const InstanceKey key{e.pg, e.pg < 0 ? static_cast<int32_t>(i) : e.seq, r.step, static_cast<int32_t>(r.phase)};
    Instance& in = inst[key];
    const double d = double(r.duration()) / 1e9;
    in.fastest = std::min(in.fastest, d), in.total += d, ++in.members;
    const double b = double(std::max(e.bytes_sent, e.bytes_recv));
    if (b <= 0 || in.members > 1) continue;  // one (steps, bytes) per instance
    Op o;
    o.info.phase = r.phase;
    o.info.dir = r.dir;
    o.comm = true;
    o.lane = lane.kind == prof::LaneKind::HostThread ? 0 : lane_of_tid(lane.tid_or_stream);
    const CollectiveCost c = collective_cost(o, s, hw);
    const int k = c.group == "world" ? 1 : 0;
    steps[k] += double(c.steps), bytes[k] += b;
    in.cls = k;
    ++count;
  }
  // The classes' transfer time: each instance's fastest member (its class as counted above).
  double waited = 0;
  for (const auto& kv : inst) {
    const Instance& in = kv.second;
    waited += in.total - in.fastest * double(in.members);
    if (in.cls >= 0) secs[in.cls] += in.fastest;
  }
  *wait_s = waited / double(std::max<size_t>(1, rank_steps.size()));
  if (count == 0) return false;
  const double det = steps[0] * bytes[1] - steps[1] * bytes[0];
  double a = -1, b = -1;
  if (std::abs(det) > 0) {
    a = (secs[0] * bytes[1] - secs[1] * bytes[0]) / det;
    b = (steps[0] * secs[1] - steps[1] * secs[0]) / det;
  }
  if (!(a >= 0 && b > 0)) {  // the bandwidth from the world's (large) collectives, if any
    a = 0;
    b = bytes[1] > 0 && secs[1] > 0 ? secs[1] / bytes[1] : (secs[0] + secs[1]) / (bytes[0] + bytes[1]);
  }
  if (!(b > 0)) return false;
  link->latency = a;
  link->bandwidth = 1.0 / b;
  link->efficiency = 1.0;
  // What the link leaves over, per class (on CPU ranks mostly the peers' arrival: a collective
  // waits for the slowest member): each class's total made the measured one.
  for (int k = 0; k < 2; ++k) {
    const double predicted = a * steps[k] + b * bytes[k];
    if (predicted <= 0 || secs[k] <= 0) continue;
    const double eff = std::clamp(predicted / secs[k], 1e-4, 1e4);
    for (const char* g : k == 0 ? std::vector<const char*>{"comm_sp", "comm_ring", "comm_ring_grad"}
                                : std::vector<const char*>{"comm_world"})
      hw.efficiency[g] = eff;
  }
  char line[240];
  std::snprintf(line, sizeof line,
                "  link: %lld collectives (their fastest members: exchanges %.1f ms, world %.1f ms) fitted: latency "
                "%.1f us per step, bandwidth %.3f GB/s; efficiency exchanges %.3f, world %.3f\n",
                static_cast<long long>(count), secs[0] * 1e3, secs[1] * 1e3, a * 1e6, 1e-9 / b,
                hw.efficiency.count("comm_sp") ? hw.efficiency["comm_sp"] : 1.0,
                hw.efficiency.count("comm_world") ? hw.efficiency["comm_world"] : 1.0);
  if (report) *report += line;
  return true;
}

}  // namespace

Hardware calibrate(const SimulatedRun& run, const std::string& measured_run_dir, std::string* report) {
  const prof::TraceModel m = prof::load_trace(measured_run_dir);
  const StepShape s = StepShape::of(run.cfg);
  Hardware hw = run.hw;
  // The link first (the waits the kinds' exclusive times hold depend on it).
  Link fitted;
  const bool network = s.world > hw.gpus_per_node;
  hw.efficiency.erase("comm_sp"), hw.efficiency.erase("comm_ring"), hw.efficiency.erase("comm_ring_grad");
  hw.efficiency.erase("comm_world");
  double wait_meas = 0;
  const StepSet step = median_steps(m);
  if (fit_link(m, s, step, hw, &fitted, &wait_meas, report)) (network ? hw.network : hw.node) = fitted;
  // The waiting inside collectives becomes rank skew (its members arrive apart because one is
  // slower), fitted with the efficiencies: the simulated waiting per rank made the measured one.
  // On shared cores (CPU ranks) the waiting is scheduling: a member reaches each collective late
  // by about the same time however long the compute before it (arrival jitter; bench_whatif: the
  // waiting hardly grows at 2S while the compute grows 2.5x), not a slower member.
  const bool jitter = hw.shared_compute;
  const bool waits = wait_meas > 0 && s.world > 1;
  hw.rank_skew = waits && !jitter ? 0.1 : 0.0;
  hw.arrival_jitter_s = waits && jitter ? 1e-3 : 0.0;
  int64_t rank_steps = 0;
  const std::map<std::string, double> meas = measured_kinds(m, s, step, &rank_steps);
  // Measured, a late member's lateness sits inside its compute ranges (it was descheduled in
  // them); simulated, the jitter holds it. The typical rank's kinds: the measured ones less the
  // mean lateness per rank (the others' waiting over the group's other members).
  double measured_compute = 0;
  for (const auto& kv : meas) measured_compute += kv.second;
  const double lateness = jitter && s.world > 1 ? wait_meas * slow_share(s) / (1.0 - slow_share(s)) : 0.0;
  const double typical = measured_compute > 0 ? std::max(0.05, 1.0 - lateness / measured_compute) : 1.0;
  double wait_sim = 0;
  for (int it = 0; it < 8; ++it) {
    const SimResult res = simulate(run.program, s, hw);
    const auto sim = simulated_kinds(run.program, res, s, hw);
    for (const auto& [kind, kt] : sim) {
      const auto mk = meas.find(kind);
      if (kt.own <= 0 || mk == meas.end() || mk->second <= 0) continue;
      // Move the kind's own work by what the simulation misses, its waits kept as they are.
      const double target = std::max(0.05 * kt.own, kt.own + (typical * mk->second - kt.seconds));
      hw.efficiency[kind] = std::clamp(hw.efficiency_of(kind) * kt.own / target, 1e-4, 10.0);
    }
    wait_sim = res.slow_ranges.empty() ? 0.0 : (1.0 - slow_share(s)) * res.wait_s;
    if (hw.rank_skew > 0 && wait_sim > 0) hw.rank_skew = std::clamp(hw.rank_skew * wait_meas / wait_sim, 1e-4, 10.0);
    if (hw.arrival_jitter_s > 0 && wait_sim > 0)
      hw.arrival_jitter_s = std::clamp(hw.arrival_jitter_s * wait_meas / wait_sim, 1e-7, 5.0);
  }
  if (report) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "  rank skew %.3f, arrival jitter %.3f ms: waiting inside collectives %.2f ms per rank and step "
                  "measured, %.2f simulated\n",
                  hw.rank_skew, hw.arrival_jitter_s * 1e3, wait_meas * 1e3, wait_sim * 1e3);
    *report += line;
    if (lateness > 0) {
      std::snprintf(line, sizeof line,
                    "  the typical rank's kinds fitted to the measured ones less %.2f ms of lateness per rank and step "
                    "(x %.3f)\n",
                    lateness * 1e3, typical);
      *report += line;
    }
  }
  const SimResult res = simulate(run.program, s, hw);
  const auto sim = simulated_kinds(run.program, res, s, hw);
  if (report) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-26s %12s %12s %10s\n", "kind", "measured ms", "simulated ms", "efficiency");
    *report = line + *report;
    for (const auto& [kind, v] : meas) {
      const auto sk = sim.find(kind);
      std::snprintf(line, sizeof line, "  %-26s %12.3f %12.3f %10.4f\n", kind.c_str(), v * 1e3,
                    sk == sim.end() ? 0.0 : sk->second.seconds * 1e3, hw.efficiency_of(kind));
      *report += line;
    }
  }
  hw.calibrated_from = measured_run_dir;
  hw.name = run.hw.name + "-calibrated";
  hw.description = "calibrated to the measured run " + measured_run_dir + " from " + run.hw.name;
  hw.source = "fitted by ulysses-run --calibrate " + measured_run_dir + " (" + std::to_string(rank_steps) +
              " rank-steps) over " + run.hw.name + ": " + run.hw.source;
  return hw;
}

}  // namespace ulysses::sim
