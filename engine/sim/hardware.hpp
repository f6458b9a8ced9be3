// Hardware descriptions for the step simulator: per GPU (or CPU rank) peak FLOP/s, memory
// bandwidth and capacity, per link level (inside a node, between nodes) bandwidth and latency,
// GPUs per node, and the per-kind efficiencies a roofline divides by. Read from and written to
// JSON files (resources/hardware/*.json, docs/PERFORMANCE.md "What if"). Torch-free, Qt-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::sim {

// One link level: t(message) = latency x steps + bytes / (bandwidth x efficiency).
struct Link {
  double bandwidth = 1e9;  // bytes/s one GPU sends (one direction)
  double latency = 1e-5;   // s per step of a collective
  double efficiency = 1.0;
};

struct Hardware {
  std::string name, description, source;
  std::string calibrated_from;  // the measured run a calibrated description was fitted to ("" = shipped)
  int64_t gpus_per_node = 8;
  double peak_bf16 = 1e12, peak_fp32 = 1e12;  // FLOP/s per GPU (a node's, shared, when shared_compute)
  double memory_bandwidth = 1e12;             // bytes/s per GPU (shared likewise)
  double memory_bytes = 80e9;
  // CPU ranks: the figures are the node's and the ranks on a node share them (cores / ranks each).
  bool shared_compute = false;
  double overhead_s = 0;  // fixed cost of every compute range (launch, host work)
  Link node, network;
  Link host{25e9, 10e-6, 1.0};  // device <-> host copies (PCIe; offload), one direction
  // The slowest member of a group computes this fraction slower than the others (noise,
  // clocks, a shared core); its collectives' other members wait for it. 0: ranks alike.
  double rank_skew = 0;
  // CPU ranks on shared cores: a group's last member reaches each collective this many seconds
  // after the others (the scheduler ran something else on its core meanwhile), however long the
  // compute before it; the others wait inside the collective. 0: none.
  double arrival_jitter_s = 0;
  // CPU ranks (shared_compute): other runnable processes sharing the node's cores with the ranks
  // (the machine's load besides the run), so each rank gets cores / (ranks + background_load).
  double background_load = 0;
  // Efficiency per kind: "attention_fwd", "mlp_bwd", ... then the phase ("attention"), then
  // "default"; "memory" scales the memory-bandwidth side of the roofline.
  std::map<std::string, double> efficiency;

  double efficiency_of(const std::string& kind) const;
  nlohmann::json to_json() const;
  // Throws std::runtime_error naming the key that is missing or wrong.
  static Hardware from_json(const nlohmann::json& j);
};

// The folder of the shipped descriptions: $ULYSSES_HARDWARE_DIR, else
// <exe>/../share/ulysses/resources/hardware (build tree and installs), else the source tree's.
std::string hardware_dir();
// Shipped names (file names without .json), sorted.
std::vector<std::string> shipped_hardware();
// A shipped name or a path to a JSON file. Throws std::invalid_argument with the names that
// exist when `name_or_path` is neither.
Hardware load_hardware(const std::string& name_or_path);

}  // namespace ulysses::sim
