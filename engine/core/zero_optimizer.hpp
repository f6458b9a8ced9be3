// ZeRO stages 1 and 2 on the trainer's flat fp32 spaces (docs/ZERO.md): the layout of each
// rank's contiguous shard of the flat parameter / gradient space, and AdamW stepped on one
// shard with torch::optim::AdamW's formulas element by element (decoupled weight decay only
// on the elements of parameters with dim >= 2, as the trainer's two parameter groups).
//
// Flat space: the parameters in model order, numel elements, padded with zeros to W x S
// (W = sp_size x dp_size ranks, S = ceil(numel / W)); rank r owns [r*S, (r+1)*S).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace ulysses {

struct ZeroLayout {
  int64_t numel = 0;  // parameter elements of the flat space
  int64_t world = 1, rank = 0;
  int64_t shard = 0;  // S = ceil(numel / world)
  ZeroLayout() = default;
  ZeroLayout(int64_t numel_, int64_t world_, int64_t rank_);
  int64_t padded() const { return shard * world; }
  int64_t begin() const { return rank * shard; }
  // Elements of this rank's shard that hold parameters (the rest is padding): 0..S.
  int64_t valid() const;
};

// ZeRO stage 3 (engine/core/zero3.hpp): the same flat parameter space cut into gather units
// (the embedding, each decoder layer, the final norm + lm_head), each partitioned on its own
// so that every unit's all-gather and reduce-scatter is an equal split: unit u's n_u elements
// are padded to W x S_u (S_u = ceil(n_u / W)) and rank r owns unit-local [r*S_u, (r+1)*S_u).
// A rank's shard is its pieces of all units in unit order: S = sum of S_u elements.
struct Zero3Unit {
  size_t first_param = 0, end_param = 0;  // [first, end) in model order
  int64_t numel = 0;                      // n_u
  int64_t shard = 0;                      // S_u
  int64_t shard_offset = 0;               // where the unit's piece starts in a rank's shard
};
struct Zero3Layout {
  std::vector<Zero3Unit> units;
  int64_t world = 1, rank = 0;
  int64_t shard = 0;  // S = sum of S_u
  Zero3Layout() = default;
  // numel and unit index of every parameter in model order (unit indices 0, 1, ... without
  // gaps, non-decreasing: each unit's parameters are contiguous).
  Zero3Layout(const std::vector<int64_t>& numel, const std::vector<int>& unit_of, int64_t world_, int64_t rank_);
  // Runs [offset, offset + length) of this rank's shard whose elements belong to parameters
  // with decay[i] (ShardedAdamW's weight-decay runs), merged.
  std::vector<std::pair<int64_t, int64_t>> decay_runs(const std::vector<int64_t>& numel,
                                                      const std::vector<bool>& decay) const;
};

struct ZeroAdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// AdamW on one shard. The state (exp_avg, exp_avg_sq: (S) fp32) lives on `state_device`
// (the CPU with train.offload_optimizer, pinned when `pin`).
class ShardedAdamW {
 public:
  // sizes_and_decay: every parameter in flat order, its numel and whether weight decay applies.
  ShardedAdamW(const ZeroLayout& layout, const std::vector<std::pair<int64_t, bool>>& sizes_and_decay,
               const ZeroAdamWOptions& opt, torch::Device state_device, bool pin = false);
  // A shard of `shard` elements whose weight-decay runs are given (stage 3: Zero3Layout::decay_runs);
  // layout() is then a one-rank layout of `shard` elements.
  ShardedAdamW(int64_t shard, std::vector<std::pair<int64_t, int64_t>> decay_runs, const ZeroAdamWOptions& opt,
               torch::Device state_device, bool pin = false);

  // One step: master (S) fp32 on the state device updated in place from grad (S, any
  // device; copied to the state device when elsewhere) at learning rate lr.
  void step(at::Tensor& master, const at::Tensor& grad, double lr);

  at::Tensor exp_avg, exp_avg_sq;  // (S) fp32
  int64_t steps = 0;               // optimizer steps taken (torch AdamW's per-parameter `step`)
  // Runs [offset, offset + length) of the shard whose parameters take weight decay.
  const std::vector<std::pair<int64_t, int64_t>>& decay_runs() const { return decay_runs_; }
  const ZeroLayout& layout() const { return layout_; }

 private:
  ZeroLayout layout_;
  ZeroAdamWOptions opt_;
  std::vector<std::pair<int64_t, int64_t>> decay_runs_;
};

}  // namespace ulysses
