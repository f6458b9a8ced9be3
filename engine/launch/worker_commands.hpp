// The questions ulysses-run hands to ulysses-worker: --plan and --simulate (the worker's
// stdout, stderr and exit code are the answer, passed through) and the memory check's plan
// (`ulysses-worker --plan --json`, read back). ulysses-run stays torch-free.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::launch {

// Runs `path` with argv `args` (args[0] is the program's name), passing its stdout and stderr
// through as they come, and returns its exit code. A worker that prints no plan and exits 0
// (`--worker /bin/true`) or fails without a word (`/bin/false`) is said to be no ulysses-worker
// of this build (exit 1, or 2 when it exited 2). `what` names the command in messages ("--plan").
int pass_through_worker(const std::string& path, std::vector<std::string>& args, const std::string& what = "--plan");

// What ulysses-run --plan asks the worker.
struct PlanRequest {
  std::string worker, config_path;
  std::vector<std::string> overrides;
  bool json = false;
  std::optional<double> max_seq_gib, tflops, gpu_gib;
};
// The worker's argv for a plan (exact decimal forms of the numbers: "%.17g").
std::vector<std::string> plan_worker_args(const PlanRequest& r);

// What ulysses-run --simulate / --calibrate asks the worker, and the worker's argv for it.
struct SimulateRequest {
  std::string worker, hardware, config_path, out, calibrate, background_load;
  std::vector<std::string> overrides;
  std::optional<int> steps;
  bool json = false, no_plan = false;
};
std::vector<std::string> simulate_worker_args(const SimulateRequest& r);

// Runs `ulysses-worker --plan --json` for the user's config and returns its plan (an object with
// a positive integer "peak_bytes"), or nothing with *why when the planner is not available
// (another worker, a failure, over time_s, or `stop()` became true).
std::optional<nlohmann::json> run_planner(const std::string& worker, const std::string& config_path,
                                          const std::vector<std::string>& overrides, double time_s,
                                          const std::function<bool()>& stop, std::string* why);

}  // namespace ulysses::launch
