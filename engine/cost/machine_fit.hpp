// Whether a run fits this machine before it starts (ulysses-run's checks before launch,
// docs/RELIABILITY.md): its CPU ranks against the cores, its memory against what the machine
// has available. Pure: the caller hands in the machine's figures and, for the memory check,
// a way to ask the memory planner (ulysses-worker --plan, engine/launch/worker_commands.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "run_config.hpp"

namespace ulysses::cost {

// What one CPU rank's process holds before the model (libtorch, OpenBLAS, Gloo, the tracer):
// a tiny run's worker measured at ~175 MiB resident; counted per rank in the memory check, so
// that 1024 tiny ranks are refused on a 24 GiB machine instead of swapping it to a halt.
constexpr int64_t kRankProcessBytes = int64_t{160} << 20;
// CPU ranks per core beyond which a run is refused without --force: each rank needs at least
// one thread, and past this many the ranks spend their time descheduled (and rendezvous and
// the watchdog's timeouts with them).
constexpr int64_t kMaxRanksPerCore = 8;

// True when the run's ranks live in host memory (train.device cpu, or auto without a GPU:
// `have_gpu` says whether this machine has one).
bool host_run(const RunConfig& cfg, bool have_gpu);

// Empty when the run's CPU ranks fit `cores` (kMaxRanksPerCore), else the refusal with the figures.
std::string cores_refusal(const RunConfig& cfg, bool have_gpu, int64_t cores);

// The planner's peak bytes per rank, or nothing with *why when it is not available.
using AskPlanner = std::function<std::optional<int64_t>(std::string* why)>;

// Empty when the run's memory fits `have` bytes, else the refusal with the numbers. Only for
// host runs. The figure is the planner's (a meta-device dry run of one step) where it is worth
// asking and available, else the cost model's. Tiny configs never start the planner: it is
// asked only when the cost model puts the run above half the machine, and not when weights,
// gradients and AdamW state alone (the same exact count in both) already exceed it.
std::string memory_refusal(const RunConfig& cfg, bool have_gpu, double have, const AskPlanner& ask_planner);

}  // namespace ulysses::cost
