// The step simulator: replays a StepProgram (step_program.hpp) on a Hardware description. The
// compute stream runs the ranges in program order, each taking
//   overhead + max(FLOPs / peak, bytes / (memory bandwidth x memory efficiency)) / efficiency(kind)
// (a roofline with an efficiency per kind); each collective runs on its communication stream
// (the SP group's all-to-alls, the ring's K/V and dK/dV exchanges, the world group's ZeRO and
// gradient collectives; one collective at a time per group, in issue order) from when the
// compute stream issued it, taking latency x steps + bytes / (bandwidth x efficiency) of its
// link level (inside a node when every rank of its group is, else the network; divided by a
// calibrated factor of its group, "comm_sp" / "comm_world", if any). The compute stream waits
// where the engine waits: at the points the program records, and before a head chunk's
// attention for that chunk's all-to-all. Besides:
//   link contention  two collectives of different groups on one link level share its bandwidth
//                    while both move (each takes the overlap longer);
//   offload copies   with offload_activations each layer's input goes to host memory over the
//                    host link when its forward begins and comes back when the layer above
//                    begins its backward (the engine's prefetch); the recompute waits for it;
//   rank skew        with hw.rank_skew > 0 the slowest member of each group (is_slow_rank)
//                    computes (1 + rank_skew) x slower; a collective starts when its last
//                    member arrives, so the others wait inside it. Both rank classes are
//                    replayed; every other rank runs the typical rank's timeline.
//   arrival jitter   with hw.arrival_jitter_s > 0 (CPU ranks on shared cores) that member
//                    reaches each collective of its groups that many seconds late, whatever the
//                    compute before it (scheduling, not slower work): the others wait for it.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hardware.hpp"
#include "run_config.hpp"
#include "step_program.hpp"

namespace ulysses::sim {

// The sizes the costs are computed from (one rank of the run).
struct StepShape {
  int64_t B = 1, N = 0, n = 0;  // micro batch, sequence, tokens per rank
  int64_t P = 1, R = 1, dp = 1, world = 1;
  int64_t d = 0, H = 0, Hkv = 0, dh = 0, F = 0, V = 0, L = 0;
  int64_t params = 0, zero_stage = 0;
  double elem = 2;  // bytes per activation element (bf16 2, fp32 4)
  bool bf16 = true;
  // The share of causal attention's (query, key) pairs computed: packed documents
  // (documents_attention_fraction, as the cost model counts them); 1 otherwise.
  double attention_fraction = 1;
  bool offload = false;  // train.offload_activations with layer checkpointing: the layer inputs go to host memory
  static StepShape of(const RunConfig& cfg);
};

// A range's nominal work: FLOPs and bytes moved, and the kind whose efficiency applies
// ("qkv_proj_fwd", "attention_bwd", "backward_bwd", ...). `outer`: the range holds ranges of its
// own phase (head chunks, ring blocks, MLP tiles), which then carry the phase's work.
struct Work {
  double flops = 0, bytes = 0;
  std::string kind;
};
Work nominal_work(const Op& op, const StepShape& s, bool outer);

// A collective's model: how many latency steps, over which link level.
struct CollectiveCost {
  int64_t steps = 1;
  bool network = false;  // between nodes
  std::string group;     // "sp", "ring", "ring_grad", "world": one stream each
};
CollectiveCost collective_cost(const Op& op, const StepShape& s, const Hardware& hw);

struct SimRange {
  int32_t op = 0;
  int64_t start_ns = 0, end_ns = 0;
};

// An offload copy of a layer's input (StepShape::offload) over the host link.
struct SimCopy {
  int32_t layer = -1;
  bool to_host = true;  // device -> host after the forward; false: host -> device for the recompute
  int64_t start_ns = 0, end_ns = 0;
};

struct SimResult {
  std::vector<SimRange> ranges;          // the typical rank: one per op, in program order of their begin / issue
  std::vector<SimRange> slow_ranges;     // the slowest member (hw.rank_skew > 0, more than one rank): the same ops
  std::vector<SimCopy> copies;           // the typical rank's offload copies
  int64_t step_ns = 0;                   // the slower of the two
  double own_compute_s = 0, comm_s = 0;  // sums of the compute ranges' own time and of the collectives'
  double wait_s = 0;                     // the typical rank's time inside collectives waiting for a slower member
};

// Rank skew (Hardware::rank_skew): one member of every group is the slowest, the last of each SP
// group (at sp 1 the last rank); is_slow_rank says which ranks, slow_share their fraction.
bool is_slow_rank(int64_t r, const StepShape& s);
double slow_share(const StepShape& s);

// Seconds of one compute op's own work on `hw` (0 for a range with no work of its own).
double compute_seconds(const Work& w, const StepShape& s, const Hardware& hw);
double comm_seconds(const Op& op, const StepShape& s, const Hardware& hw);

// Own seconds of every op: a collective its transfer; a compute range its work (an outer range
// its own, e.g. packing; a range sharing its phase's work with its siblings an equal share).
std::vector<double> own_seconds(const StepProgram& prog, const StepShape& s, const Hardware& hw);

SimResult simulate(const StepProgram& prog, const StepShape& s, const Hardware& hw);

}  // namespace ulysses::sim
