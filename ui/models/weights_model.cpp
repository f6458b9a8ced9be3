// "Where the weights are" (see weights_model.hpp).
#include "weights_model.hpp"

#include <algorithm>
#include <exception>

#include "cost_model.hpp"

namespace ulysses::ui {

std::pair<int64_t, int64_t> WeightPlacement::piece_of(size_t u, int64_t r) const {
  const WeightUnit& U = units.at(u);
  const int64_t b = std::min(U.numel, r * U.piece), e = std::min(U.numel, (r + 1) * U.piece);
  return {b, e};
}

WeightPlacement weight_placement(const RunConfig& cfg) {
  WeightPlacement w;
  const auto& m = cfg.model;
  const auto& t = cfg.train;
  w.W = std::max<int64_t>(1, cfg.parallel.world_size());
  w.zero_stage = std::clamp<int64_t>(t.zero_stage, 0, 3);
  w.bf16 = t.dtype == "bfloat16";
  w.offload_optimizer = t.offload_optimizer && w.zero_stage >= 1;
  w.offload_params = t.offload_params && w.zero_stage >= 3;
  w.tied = m.tie_word_embeddings;
  if (m.num_hidden_layers < 1 || m.hidden_size < 1 || m.vocab_size < 1) return w;
  // Units from the model's own parameter list (names as in the checkpoint).
  w.units.push_back({"embedding", 0, 0});
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) w.units.push_back({"layer " + std::to_string(l), 0, 0});
  w.units.push_back({w.tied ? "norm (+ tied embedding)" : "norm + lm_head", 0, 0});
  for (const auto& p : m.parameters()) {
    int64_t numel = 1;
    for (int64_t s : p.shape) numel *= s;
    size_t u = w.units.size() - 1;  // model.norm, lm_head
    if (p.name.rfind("model.embed_tokens.", 0) == 0) {
      u = 0;
    } else if (p.name.rfind("model.layers.", 0) == 0) {
      u = 1 + static_cast<size_t>(std::stoll(p.name.substr(13)));
    }
    w.units[u].numel += numel;
    w.params += numel;
  }
  for (auto& U : w.units) U.piece = (U.numel + w.W - 1) / w.W;
  w.params_sharded = w.zero_stage >= 3;
  w.grads_sharded = w.zero_stage >= 2;
  w.optimizer_sharded = w.zero_stage >= 1;
  cost::CostEstimate c;
  try {
    c = cost::estimate(cfg);
  } catch (const std::exception&) {  // sizes that make no sense: the explainer shows validation's reasons
    return w;
  }
  w.param_bytes = c.param_bytes;
  w.grad_bytes = c.grad_bytes;
  w.master_bytes = c.master_bytes;
  w.optimizer_bytes = c.optimizer_bytes;
  w.gathered_bytes = c.gathered_param_bytes;
  w.host_bytes = c.host_bytes;
  w.collective_bytes_per_step = c.allreduce_bytes_per_step;
  if (w.zero_stage >= 3 && w.units.size() > 2) {
    const int64_t piece = w.units[1].piece;  // every decoder layer has the same size
    // bf16 training gathers bf16 weights (train.gather_dtype auto); the reduce-scatter's wire
    // is train.grad_reduce_dtype (bf16 only with bf16 unit gradients), as the engine runs them
    w.gather_bytes_per_layer = (w.W - 1) * piece * (t.bf16_gathers() ? 2 : 4);
    w.reduce_scatter_bytes_per_layer =
        (w.W - 1) * piece * (t.bf16_unit_grads() && t.grad_reduce_dtype == "bfloat16" ? 2 : 4);
  }
  w.ok = true;
  return w;
}

}  // namespace ulysses::ui
