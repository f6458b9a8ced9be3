// Whether a run fits this machine (machine_fit.hpp).
#include "machine_fit.hpp"

#include <algorithm>

#include "cost_model.hpp"

namespace ulysses::cost {

bool host_run(const RunConfig& cfg, bool have_gpu) {
  return cfg.train.device == "cpu" || (cfg.train.device == "auto" && !have_gpu);
}

std::string cores_refusal(const RunConfig& cfg, bool have_gpu, int64_t cores) {
  if (!host_run(cfg, have_gpu)) return {};
  cores = std::max<int64_t>(1, cores);
  const int64_t world = cfg.parallel.world_size();
  if (world <= cores * kMaxRanksPerCore) return {};
  return std::to_string(world) + " CPU ranks (parallel.sp_size " + std::to_string(cfg.parallel.sp_size) +
         " x ring_size " + std::to_string(cfg.parallel.ring_size) + " x dp_size " +
         std::to_string(cfg.parallel.dp_size) + ") on " + std::to_string(cores) + " core(s) is " +
         std::to_string((world + cores - 1) / cores) + " per core, more than the " + std::to_string(kMaxRanksPerCore) +
         " this machine can keep progressing; use fewer ranks, or pass --force to launch anyway";
}

std::string memory_refusal(const RunConfig& cfg, bool have_gpu, double have, const AskPlanner& ask_planner) {
  if (!host_run(cfg, have_gpu) || have <= 0) return {};
  CostOptions o;
  // The engine's default attention on CPU is blocked (no N x N scores); sdpa's math path keeps them.
  o.math_attention = cfg.train.attention == "sdpa" ? 1 : 0;
  const CostEstimate e = estimate(cfg, o);
  const double world = static_cast<double>(cfg.parallel.world_size());
  const double static_per_rank = static_cast<double>(e.param_bytes + e.grad_bytes + e.master_bytes + e.optimizer_bytes);
  const double process = static_cast<double>(kRankProcessBytes);
  double per_rank = static_cast<double>(e.total_bytes());
  double activations = static_cast<double>(e.activation_bytes);
  std::string source = "estimated memory (cost model)";
  std::string planner_note;
  if (per_rank * world > 0.5 * have && static_per_rank * world <= have && ask_planner) {
    std::string why;
    if (const auto peak = ask_planner(&why)) {
      per_rank = static_cast<double>(*peak);
      activations = per_rank - static_per_rank;
      source = "planned peak memory (meta-device dry run of one step, ulysses-worker --plan)";
    } else {
      planner_note = " (the memory planner was not used: " + why + ")";
    }
  }
  const double total = (per_rank + process) * world;
  if (total <= have) return {};
  return source + " " + format_bytes(total) + " (" + std::to_string(cfg.parallel.world_size()) + " rank(s) x " +
         format_bytes(per_rank + process) + ": weights, gradients and AdamW state " + format_bytes(static_per_rank) +
         ", activations and the rest " + format_bytes(std::max(0.0, activations)) + ", the rank's process itself " +
         format_bytes(process) + ") exceeds the memory this machine has available (MemAvailable) of " +
         format_bytes(have) + planner_note +
         "; make the model, train.seq_length or the number of ranks smaller, or pass --force to launch anyway";
}

}  // namespace ulysses::cost
