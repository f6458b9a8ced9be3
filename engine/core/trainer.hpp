// Training loop for one rank: deterministic batch -> sequence shard -> forward (Ulysses
// attention) -> backward -> one all-reduce of the gradients and one fp64 all-reduce of the
// loss sum and token count over all SP x DP ranks -> global-norm clipping (Hugging Face's
// norm, reductions.hpp) -> AdamW with warmup + cosine.
#pragma once

#include <functional>
#include <memory>

#include <torch/torch.h>

#include "comm.hpp"
#include "data.hpp"
#include "model.hpp"
#include "zero3.hpp"
#include "zero_optimizer.hpp"

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

// AdamW as the Trainer builds it (Hugging Face's groups: weight decay on matrices only; betas
// and epsilon from the config). The memory planner calls it too, so both count one optimizer.
std::unique_ptr<torch::optim::AdamW> make_adamw(LlamaModel& model, const TrainConfig& t);
// The flat fp32 gradient buffer: every parameter's .grad becomes its slice of `flat` (model
// order), which autograd accumulates into in place and which is all-reduced whole.
void bind_flat_grads(const std::vector<at::Tensor>& params, const at::Tensor& flat);
// ZeRO: the parameters become views of one flat buffer (model order; `copy_values` copies
// their current values in), so the all-gather after each step writes straight into them.
void move_params_into(LlamaModel& model, const at::Tensor& pflat, bool copy_values);

// How a Trainer runs beyond its config and Comm.
struct TrainerOptions {
  // The memory planner (meta_dry_run.hpp) runs the step on meta over Comm::shape_only for a run
  // on a GPU: the device-dependent choices (the attention kernel) are then a CUDA run's.
  bool plan_for_cuda = false;
  // The tokens to train on instead of cfg.data's (the planner: TokenSource::zeros, shapes only).
  std::shared_ptr<const TokenSource> data;
};

// The attention kernel a Trainer runs: train.attention for a CUDA or CPU run (attention_kernel_for);
// on meta (a dry run) SDPA is counted as the kernel the target runs: flash (FlashShapes) on
// CUDA, and on the CPU where libtorch's CPU SDPA is flash (2.x).
AttentionKernel trainer_attention_kernel(const TrainConfig& t, bool cuda, const torch::Device& runs_on);

class Trainer;

// The backward ranges the markers timed (model.hpp's BackwardMarks), recorded on the stepping
// thread's row: per layer MLP, out-proj, QKV, and the head. With attention_window, also the
// attention's backward: the window from the out-proj's backward to the qkv projection's, where
// autograd launches the flash-backward kernels. Only where the attention has no backward range
// of its own (sp 1, one head chunk, no ring: the Ulysses and ring paths record theirs); `heads`
// = num_attention_heads, the head range of that window.
void record_backward_mark_ranges(prof::Tracer* tracer, const BackwardMarks& marks, bool attention_window,
                                 int32_t heads);

// Stage 3: the model's parameters hold their full values while one of these lives (every unit
// gathered; collective: every rank makes one, e.g. around a checkpoint save). Below stage 3
// nothing happens.
class GatheredParameters {
 public:
  explicit GatheredParameters(Trainer& t);
  ~GatheredParameters();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  Zero3Params* z3_;
};

class Trainer {
 public:
  // On comm.device(); a meta Comm (Comm::shape_only) gives the memory planner's dry run: shapes
  // and allocations of the real step, no values (reductions.hpp's stand-ins for its scalars).
  Trainer(const RunConfig& cfg, Comm& comm, prof::Tracer* tracer, const TrainerOptions& opt = {});
  ~Trainer();

  // One optimisation step; every rank returns the same loss / grad_norm.
  StepMetrics step(int64_t s);
  // Forward + backward + gradient all-reduce without the optimizer; gradients stay in
  // the parameters' .grad (for tests; at stage 2 in its shard, at stage 3 in
  // zero3()->grad_shard()). Returns the global mean loss.
  double loss_and_grads(int64_t s);

  LlamaModel& model() { return *model_; }
  // train.init_from's tensors the model has no parameter for (not loaded; empty without init_from).
  const std::vector<std::string>& unused_init_tensors() const { return unused_init_; }
  // AdamW over the whole parameters (train.zero_stage 0; throws otherwise), for train_state.
  torch::optim::AdamW& optimizer();
  torch::Device device() const { return device_; }

  // ZeRO (train.zero_stage >= 1, docs/ZERO.md): every parameter is a view into one flat fp32
  // buffer, padded to world x S; this rank's AdamW steps its shard [rank*S, (rank+1)*S).
  int64_t zero_stage() const { return zero_stage_; }
  ShardedAdamW& zero_optimizer();  // throws at zero_stage 0
  const ZeroLayout& zero_layout() const { return layout_; }
  // This rank's fp32 master shard (S): a view of the flat parameters, or with
  // offload_optimizer its CPU copy (the one AdamW steps).
  at::Tensor zero_master();
  // After the parameters changed outside a step (a resume): the offloaded masters take them.
  void zero_sync_masters_from_params();
  // Stage 3 (zero3.hpp): the sharded parameters' owner (nullptr below stage 3).
  Zero3Params* zero3() { return z3_.get(); }
  // Every parameter's full value, copied (at stage 3 gathered: collective, every rank calls it).
  std::vector<std::pair<std::string, at::Tensor>> gathered_parameters();

 private:
  RunConfig cfg_;
  Comm& comm_;
  prof::Tracer* tracer_;
  torch::Device device_;
  // Where offloaded state lives (offload_optimizer, offload_params): the CPU; a meta Trainer's on meta.
  torch::Device host_;
  std::shared_ptr<const TokenSource> data_;
  std::unique_ptr<LlamaModel> model_;
  std::vector<std::string> unused_init_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  // fp32 [every parameter's gradient, ZeRO's padding] on the device: each
  // parameter's .grad is a view into it, so autograd accumulates straight into the buffer
  // that is all-reduced (no concatenate / split copies per step).
  at::Tensor flat_;
  int64_t grad_numel_ = 0;
  int64_t tail_ = 0;  // elements of flat_: grad_numel_, or the padded size (ZeRO)
  // ZeRO state (zero_stage_ >= 1).
  int64_t zero_stage_ = 0;
  ZeroLayout layout_;
  at::Tensor pflat_;   // (W*S) fp32 on the device: every parameter is a view into it
  at::Tensor gshard_;  // (S) stage 2: this rank's reduce-scattered gradients
  at::Tensor master_;  // (S) fp32 on the CPU with offload_optimizer (else undefined)
  std::unique_ptr<ShardedAdamW> zopt_;
  std::unique_ptr<Zero3Params> z3_;  // stage 3
  void setup_zero();
  void setup_zero3(const ZeroAdamWOptions& o);
  double zero_optimizer_step(int64_t s, double* lr);  // returns the global gradient norm
  void bind_grads();
  void record_backward_marks();
};

}  // namespace ulysses
