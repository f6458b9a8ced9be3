// The explainer's "where the weights are" stage (docs/ZERO.md): for a run config, which part of the
// training state every rank holds (weights, gradients, fp32 master and AdamW m, v), on the
// device or in host memory, under ZeRO stage 0-3 over all W = sp x ring x dp ranks, and what
// stage 3 gathers for one decoder layer. Qt-free and widget-free; the explain view draws it.
//
// The layout is the engine's (engine/core/zero3, docs/ZERO.md): the parameters form gather
// units in forward order (the embedding, each decoder layer, the final norm + lm_head; with
// tied embeddings the head unit is the norm alone and the embedding is gathered again for
// the head); each unit is split on its own into W pieces of ceil(numel / W) elements, rank r
// holding piece r of every unit. Stages 1 and 2 shard the flat state the same way over W.
// Bytes per rank are the cost model's (cost::estimate), the figures `--plan` and the
// launcher's estimates print; a stage-3 gather or reduce-scatter of a unit moves
// (W - 1) x ceil(numel / W) fp32 elements per rank (the ring volume the trace records).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses::ui {

struct WeightUnit {
  std::string name;   // "embedding", "layer 0", ..., "norm + lm_head"
  int64_t numel = 0;  // parameters of the unit
  int64_t piece = 0;  // elements of the unit each rank holds at stage 3: ceil(numel / W)
};

struct WeightPlacement {
  bool ok = false;
  int64_t W = 1;  // ranks that share the model state (sp x ring x dp)
  int64_t zero_stage = 0;
  bool bf16 = false, offload_optimizer = false, offload_params = false, tied = false;
  int64_t params = 0;
  std::vector<WeightUnit> units;  // forward order
  // Which of the state each rank holds a 1/W piece of (else all of it).
  bool params_sharded = false, grads_sharded = false, optimizer_sharded = false;
  // Per rank, bytes (cost::estimate's): on the device, and offloaded to host memory.
  int64_t param_bytes = 0, grad_bytes = 0, master_bytes = 0, optimizer_bytes = 0;
  int64_t gathered_bytes = 0;  // stage 3: gathered units and one unit's gradients in flight
  int64_t host_bytes = 0;
  int64_t device_static_bytes() const { return param_bytes + grad_bytes + master_bytes + optimizer_bytes; }
  // Stage 3, per rank: bytes sent (= received) to gather one decoder layer, and to
  // reduce-scatter its gradients; 0 below stage 3.
  int64_t gather_bytes_per_layer = 0;
  int64_t reduce_scatter_bytes_per_layer = 0;
  // Per step, all units of one micro-batch: the cost model's allreduce_bytes_per_step (stage 3:
  // gathers for forward and backward, reduce-scatters; below: all-reduce or its split form).
  int64_t collective_bytes_per_step = 0;
  // The [begin, end) of unit u's parameters that rank r holds at stage 3, in elements from
  // the unit's start (the last pieces may be short or empty).
  std::pair<int64_t, int64_t> piece_of(size_t u, int64_t r) const;
};

WeightPlacement weight_placement(const RunConfig& cfg);

}  // namespace ulysses::ui
