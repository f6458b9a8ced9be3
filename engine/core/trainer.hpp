// Training loop for one rank: deterministic batch -> sequence shard -> forward (Ulysses
// attention) -> backward -> one coalesced all-reduce of gradients, loss sum and token
// count over all SP x DP ranks -> global-norm clipping -> AdamW with warmup + cosine.
#pragma once

#include <functional>
#include <memory>

#include <torch/torch.h>

#include "comm.hpp"
#include "data.hpp"
#include "model.hpp"

namespace ulysses {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0;
  int64_t tokens = 0, max_mem_bytes = 0;
};

// Learning rate at `step` (0-based optimizer steps taken): transformers' get_scheduler for
// train.lr_scheduler_type (warmup from 0 over warmup_steps, then cosine / cosine_with_min_lr
// / linear decay over steps, or constant). Formulas in docs/CONTRACTS.md.
double learning_rate(const TrainConfig& t, int64_t step);

class Trainer {
 public:
  Trainer(const RunConfig& cfg, Comm& comm, prof::Tracer* tracer);
  ~Trainer();

  // One optimisation step; every rank returns the same loss / grad_norm.
  StepMetrics step(int64_t s);
  // Forward + backward + gradient all-reduce without the optimizer; gradients stay in
  // the parameters' .grad (for tests). Returns the global mean loss.
  double loss_and_grads(int64_t s);

  LlamaModel& model() { return *model_; }
  // train.init_from's tensors the model has no parameter for (not loaded; empty without init_from).
  const std::vector<std::string>& unused_init_tensors() const { return unused_init_; }
  torch::optim::AdamW& optimizer() { return *opt_; }  // for train_state (save / resume)
  torch::Device device() const { return device_; }

 private:
  RunConfig cfg_;
  Comm& comm_;
  prof::Tracer* tracer_;
  torch::Device device_;
  std::unique_ptr<TokenSource> data_;
  std::unique_ptr<LlamaModel> model_;
  std::vector<std::string> unused_init_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  // fp32 [every parameter's gradient, loss sum, valid-token count] on the device: each
  // parameter's .grad is a view into it, so autograd accumulates straight into the buffer
  // that is all-reduced (no concatenate / split copies per step).
  at::Tensor flat_;
  int64_t grad_numel_ = 0;
  void bind_grads();
  void record_backward_marks();
};

}  // namespace ulysses
