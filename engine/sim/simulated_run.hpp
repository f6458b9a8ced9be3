// A simulated step written as a run folder that every view opens unchanged (docs/TRACES.md,
// "Simulated runs"): run.json (status finished, plus "simulated": the hardware and where its
// figures come from), config.json, metrics.jsonl, and trace/rank<r>.sqlite for every rank,
// written by the profiler's own TraceWriter in the ordinary schema, with the metric
// "simulated" = 1 in each rank file. Every rank of a run runs the same program (the ranks of an
// SP, ring or DP group hold the same shapes), so one rank is simulated and its timeline written
// for each rank with that rank's ids; the collectives carry their group's (pg, seq). And the
// calibration: per-kind efficiencies and the link fitted to a measured run. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hardware.hpp"
#include "run_config.hpp"
#include "step_program.hpp"
#include "step_sim.hpp"
#include "ulysses/profiler/memory_categories.hpp"

namespace ulysses::sim {

struct SimulatedRun {
  RunConfig cfg;
  Hardware hw;
  StepProgram program;
  // The memory planner's figures (rank 0 writes them, as a traced run does), when given.
  bool has_plan = false;
  prof::MemoryCategories planned;
  std::vector<prof::PlannedMemoryPoint> curve;
};

struct WriteStats {
  double simulate_s = 0, write_s = 0;
  int64_t rank_files = 0, ranges_per_rank = 0;
  SimResult result;
};

// The line every view shows above a simulated run ("SIMULATED on h200-x8: ..."), from its
// run.json's "simulated" record; "" for a measured run, a trace file or a folder without one.
std::string simulated_banner(const std::string& run_dir);

// Simulates run.program on run.hw and writes `steps` identical steps into the folder `dir`
// (created; refused with std::invalid_argument when it exists and is not empty).
WriteStats write_simulated_run(const std::string& dir, const SimulatedRun& run, int steps = 3);

// Calibration: the program of the measured run's config simulated on `base`, compared with the
// measured trace (its steps after the first, every rank): each kind's efficiency scaled by
// simulated / measured exclusive time of its ranges (repeated a few times, as waits move), the
// link's latency and bandwidth fitted by least squares to the collectives' (steps, bytes) ->
// duration. The result names the run in calibrated_from. `report` gets one line per kind.
Hardware calibrate(const SimulatedRun& run, const std::string& measured_run_dir, std::string* report = nullptr);

}  // namespace ulysses::sim
