// Writing a simulated step as a run folder (see simulated_run.hpp).
#include "simulated_run.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include "run_record.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/common/run_record.hpp"
#include "ulysses/profiler/trace_writer.hpp"

namespace ulysses::sim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kSimT0 = 1'000'000'000;  // the first simulated step starts 1 s into the clock
constexpr int64_t kSimPid = 100000;        // rank r is process kSimPid + r (its main thread too)

int64_t lane_tid(int32_t lane, int64_t main_tid) {
  switch (lane) {
    case prof::Tracer::kCommLane:
      return prof::kCommTid;
    case prof::Tracer::kRingLane:
      return prof::kRingTid;
    case prof::Tracer::kRingGradLane:
      return prof::kRingGradTid;
    case prof::Tracer::kZeroGatherLane:
      return prof::kZeroGatherTid;
    case prof::Tracer::kZeroReduceLane:
      return prof::kZeroReduceTid;
    default:
      return main_tid;
  }
}

// A collective's process group on rank r (Comm::sp_pg / ring_pg / kWorldPg).
int32_t group_pg(const std::string& group, int64_t r, const StepShape& s) {
  if (group == "sp") return static_cast<int32_t>(1 + r / s.P);
  if (group == "ring" || group == "ring_grad") {
    const int64_t dp_rank = r / (s.P * s.R), sp_rank = r % s.P;
    return static_cast<int32_t>(1 + s.world / s.P + dp_rank * s.P + sp_rank);
  }
  return 0;
}

void write_rank(const std::string& dir, int64_t r, const SimulatedRun& run, const StepShape& s, const SimResult& res,
                int steps, const std::string& config_json) {
  const int64_t gpn = std::max<int64_t>(1, run.hw.gpus_per_node);
  prof::TracerOptions o;
  o.path = run_layout::rank_trace(dir, static_cast<int>(r)).string();
  o.rank = static_cast<int32_t>(r);
  o.world_size = static_cast<int32_t>(s.world);
  o.sp_rank = static_cast<int32_t>(r % s.P);
  o.sp_size = static_cast<int32_t>(s.P);
  // As the worker records them: the ring's ranks are a further data-parallel axis.
  o.dp_rank = static_cast<int32_t>(r / s.P);
  o.dp_size = static_cast<int32_t>(s.dp * s.R);
  o.device = run.hw.shared_compute ? "cpu" : "cuda:" + std::to_string(r % gpn);
  o.hostname = "simulated-node" + std::to_string(r / gpn);
  o.run_config_json = config_json;
  o.run_id = "simulated:" + run.hw.name;
  o.write_once = true;  // no WAL, no fsync: 1024 rank files in seconds (docs/PERFORMANCE.md)
  const int64_t pid = kSimPid + r;
  prof::TraceWriter w(o, pid);
  w.name_thread(pid, "main");
  w.begin();
  // Each group's collectives numbered in issue order, step after step (the same on every member).
  std::map<int32_t, int64_t> seq;  // by process group
  const int64_t tokens = s.N * s.B * std::max<int64_t>(1, run.cfg.train.gradient_accumulation_steps) * s.dp;
  // The slowest member of each group (rank skew) runs its own timeline; the others the typical one.
  const std::vector<SimRange>& ranges = !res.slow_ranges.empty() && is_slow_rank(r, s) ? res.slow_ranges : res.ranges;
  for (int st = 0; st < steps; ++st) {
    const int64_t base = kSimT0 + st * res.step_ns;
    for (const SimRange& sr : ranges) {
      const Op& op = run.program.ops[static_cast<size_t>(sr.op)];
      prof::RangeRecord rr;
      rr.start_ns = base + sr.start_ns;
      rr.end_ns = base + sr.end_ns;
      rr.tid = lane_tid(op.lane, pid);
      rr.push_pop = op.lane == 0;
      rr.step = st;
      rr.info = op.info;
      if (op.comm) {
        const std::string g = collective_cost(op, s, run.hw).group;
        rr.info.pg = group_pg(g, r, s);
        rr.info.seq = seq[rr.info.pg]++;
      }
      w.write_range(rr);
    }
    prof::StepRecord rec;
    rec.step = st;
    rec.tokens = tokens;
    rec.step_ms = double(res.step_ns) / 1e6;
    rec.tokens_per_s = double(tokens) / std::max(1e-12, double(res.step_ns) / 1e9);
    w.write_step(rec, base, base + res.step_ns);
  }
  if (r == 0 && run.has_plan) {  // the planner's figures, as rank 0 of a traced run writes them
    w.write_memory_categories(kSimT0, -1, prof::MemEdge::Planned, -1, -1, run.planned);
    for (size_t i = 0; i < run.curve.size(); ++i) {
      const auto& p = run.curve[i];
      w.write_memory_categories(kSimT0 + static_cast<int64_t>(i), -1,
                                p.begin ? prof::MemEdge::PlannedBegin : prof::MemEdge::PlannedEnd, p.phase, p.layer,
                                p.c);
    }
  }
  w.set_metric("simulated", 1);
  w.set_metric("simulated.step_ms", double(res.step_ns) / 1e6);
  w.commit();
  w.close();
}

}  // namespace

std::string simulated_banner(const std::string& run_dir) {
  const RunRecordFile rec = read_run_record_file(run_layout::run_record(run_dir).string());
  if (!rec.record.simulated.is_object()) return {};
  const json& s = rec.record.simulated;
  std::string line = "SIMULATED on " + s.value("hardware", std::string("?"));
  const std::string from = s.value("calibrated_from", std::string());
  if (!from.empty()) line += " (calibrated to " + from + ")";
  return line + ": no training ran; the timeline is the step simulator's (docs/PERFORMANCE.md, \"What if\")";
}

WriteStats write_simulated_run(const std::string& dir, const SimulatedRun& run, int steps) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw std::invalid_argument("--out " + dir + " exists and is not empty; pick a new folder for the simulated run");
  const StepShape s = StepShape::of(run.cfg);
  WriteStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  stats.result = simulate(run.program, s, run.hw);
  const auto t1 = std::chrono::steady_clock::now();
  stats.simulate_s = std::chrono::duration<double>(t1 - t0).count();
  const SimResult& res = stats.result;
  fs::create_directories(run_layout::trace_dir(dir));
  const std::string config_json = run.cfg.to_json().dump();
  // Every rank's file; several at a time (each file is its own SQLite database).
  const int64_t world = s.world;
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  std::vector<std::string> errors(static_cast<size_t>(threads));
  for (int64_t k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      try {
        for (int64_t r = k; r < world; r += threads) write_rank(dir, r, run, s, res, steps, config_json);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(k)] = e.what();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error("writing the simulated trace: " + e);
  // The run's records.
  const double step_s = double(res.step_ns) / 1e9;
  const int64_t tokens = s.N * s.B * std::max<int64_t>(1, run.cfg.train.gradient_accumulation_steps) * s.dp;
  std::string metrics;
  for (int st = 0; st < steps; ++st)
    metrics += json{{"step", st},
                    {"steps", steps},
                    {"loss", 0.0},
                    {"lr", 0.0},
                    {"grad_norm", 0.0},
                    {"tokens", tokens},
                    {"tokens_per_s", double(tokens) / std::max(1e-12, step_s)},
                    {"step_ms", step_s * 1e3},
                    {"max_mem_bytes", 0},
                    {"elapsed_s", step_s * (st + 1)},
                    {"simulated", true}}
                   .dump() +
               "\n";
  ulysses::write_file_atomically(run_layout::metrics(dir).string(), metrics);
  ulysses::write_file_atomically(run_layout::config(dir).string(), run.cfg.to_json().dump(2) + "\n");
  launch::RunRecord rec;
  rec.status = launch::RunStatus::Finished;
  rec.started_at = rec.ended_at = launch::iso8601_utc(std::chrono::system_clock::now());
  rec.duration_s = step_s * steps;
  rec.world_size = world;
  rec.exit_code = 0;
  rec.steps_done = steps;
  rec.message = "simulated on " + run.hw.name + " (no training ran; figures from the step simulator)";
  rec.simulated = {{"hardware", run.hw.name},
                   {"description", run.hw.description},
                   {"source", run.hw.source},
                   {"calibrated_from", run.hw.calibrated_from},
                   {"step_ms", step_s * 1e3},
                   {"simulated_ranks", 1},
                   {"note", "every rank runs the same program: one rank simulated, its timeline written for each"}};
  write_run_record_file(run_layout::run_record(dir).string(), rec);
  const auto t2 = std::chrono::steady_clock::now();
  stats.write_s = std::chrono::duration<double>(t2 - t1).count();
  stats.rank_files = world;
  stats.ranges_per_rank = static_cast<int64_t>(res.ranges.size()) * steps;
  return stats;
}

}  // namespace ulysses::sim
