// ZeRO stage 3 (train.zero_stage 3, docs/ZERO.md): each rank keeps only its shard of every
// gather unit's parameters (the embedding, each decoder layer, the final norm + lm_head; the
// layout is Zero3Layout, zero_optimizer.hpp). The model calls the ParamUnitHooks (model.hpp):
//   forward:  a unit's weights are all-gathered just before its forward (waiting for the
//             prefetch issued while the unit before computed, or gathered on demand), the next
//             unit's gather is issued (async), the weights are released after the forward
//             (the last unit, norm + lm_head, stays for its backward, which comes next);
//   backward: before a unit's backward (and its checkpoint recompute) its weights are gathered
//             again (prefetched during the backward of the unit after it), the gradient buffer
//             of its W x S_u elements is made and its parameters' .grad bound to it; when its
//             gradients are complete they are reduce-scattered (async, overlapping the next
//             unit's backward) and summed into this rank's gradient shard, and the weights and
//             the buffer released. The embedding needs no weights for its backward; its
//             reduce-scatter is the last one (finish_backward).
// Released weights keep their tensors (autograd's saved references stay valid) but not their
// storage: the unit's buffer is freed and allocated again by the next gather. In bf16 training
// (train.gather_dtype auto) the forward and backward gathers move bf16 weights into a bf16
// buffer of their own: the same values the model's cast of the fp32 weights gave (rounding the
// piece before or after the gather is the same rounding), half the bytes.
//
// Every collective is Comm's (world group, its timeout), async, traced on the comm lane as
// phase grad_allreduce with its (pg, seq) and ring bytes (W-1) x S_u x 4 (the reduce-scatter:
// x its wire dtype's size, train.grad_reduce_dtype): the all-gather with
// direction none, layer (-1 for the embedding and head units) and chunk 1 when it was a
// prefetch, 0 when gathered on demand; the reduce-scatter with direction bwd and chunk -1.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "comm.hpp"
#include "model.hpp"
#include "zero_optimizer.hpp"

namespace ulysses {

// Gather unit of a parameter name: 0 the embedding, 1 + l decoder layer l, layers + 1 the rest
// (final norm, lm_head).
int zero3_unit_of(const std::string& name, int64_t layers);

// Test faults (the stage-3 tests check that each is caught).
enum class Zero3Fault {
  None,
  SkipReduceScatter,  // decoder layer 0's gradients are never reduce-scattered (dropped)
  PrefetchWrongUnit,  // a prefetch gathers the shards of the unit after the one asked for
};

class Zero3Params final : public ParamUnitHooks {
 public:
  // Takes the model's parameters (full, fp32, their current values) apart: this rank keeps its
  // shard (shard(), S fp32 on the parameters' device; with offload_params in CPU memory, pinned
  // when the device is a GPU, and copied up piece by piece for each gather) and every parameter
  // becomes a view of its unit's buffer, released until gathered. Installs itself as the
  // model's hooks. `host`: the CPU (a meta Trainer's host memory is meta, mem::HostScope).
  // grads_on_host: the gradient shard lives in CPU memory too (train.offload_gradients with
  // offload_optimizer): each reduce-scatter's sums are added into it there, so no fp32 gradient
  // of the model's size stays on the device.
  // grad_dtype: each unit's gradient buffer (train.grad_accum_dtype: bfloat16 in bf16 training,
  // half the bytes; the parameters' .grad are views of it, autograd adds into it in place);
  // reduce_dtype: the reduce-scatter's wire and result (train.grad_reduce_dtype; a bf16 buffer
  // reduced in float32 is cast first). The gradient shard stays fp32 either way.
  // gather_dtype (train.gather_dtype): bfloat16 in bf16 training gathers each unit's weights in
  // bf16 (the fp32 pieces cast before they go: half the bytes on the wire and in memory) into a
  // bf16 buffer the model reads through compute_weight(); gather_all() still gathers fp32.
  Zero3Params(LlamaModel& model, Comm& comm, prof::Tracer* tracer, bool offload_params = false,
              torch::Device host = torch::kCPU, bool grads_on_host = false, torch::Dtype grad_dtype = torch::kFloat32,
              torch::Dtype reduce_dtype = torch::kFloat32, torch::Dtype gather_dtype = torch::kFloat32);
  ~Zero3Params() override;
  Zero3Params(const Zero3Params&) = delete;
  Zero3Params& operator=(const Zero3Params&) = delete;

  const Zero3Layout& layout() const { return layout_; }
  at::Tensor& shard() { return shard_; }        // (S) this rank's parameters, fp32
  bool offloaded() const { return offload_; }   // shard() is in CPU memory (train.offload_params)
  at::Tensor& grad_shard() { return gshard_; }  // (S) this step's reduce-scattered gradient sums
  bool grads_on_host() const { return grads_on_host_; }
  // Every parameter's numel, in model order.
  std::vector<int64_t> param_numel() const;

  // Before the step's first micro-batch: the gradient shard is zeroed (micro-batches add up).
  void begin_step();
  // After each backward: the embedding unit's reduce-scatter, every pending one waited for,
  // every buffer released. Throws std::logic_error when a gradient arrived after its unit's
  // reduce-scatter (a unit boundary out of order).
  void finish_backward();

  // Every unit gathered (on demand, synchronous; collective: every rank calls it) so that the
  // model's parameters hold the full weights (a checkpoint save, a resume, tests); release_all
  // frees them again. copy_full_into_shard: after the full parameters were written (a resume's
  // load), this rank's shard takes its pieces of them.
  void gather_all();
  void release_all();
  void copy_full_into_shard();

  void set_tracer(prof::Tracer* t) { tracer_ = t; }
  void set_fault(Zero3Fault f) { fault_ = f; }
  // Gathers issued so far: as prefetches, and on demand (the unit was not in flight).
  int64_t prefetches() const { return prefetches_; }
  int64_t on_demand() const { return on_demand_; }
  // Bytes of the gathered units' weights and gradient buffers (and reduce-scatter results) that
  // exist now, and the most since reset_peak() (the memory planner's gathered bytes). Gloo's own
  // receive buffers are not counted (NCCL's collectives need none).
  int64_t gathered_bytes() const { return live_; }
  int64_t peak_gathered_bytes() const { return peak_; }
  void reset_peak() { peak_ = live_; }

  // ParamUnitHooks
  void forward_begin(int use) override;
  void forward_end(int use) override;
  void backward_begin(int use) override;
  void backward_end(int use) override;
  at::Tensor compute_weight(const at::Tensor& p) override;

 private:
  struct Pending {
    Comm::Work work;
    at::Tensor source;  // offload_params on a GPU: the piece copied up, alive until sent
    prof::RangeInfo info;
    std::shared_ptr<std::atomic<int64_t>> prev_done;  // the world group's previous work (FIFO queue)
  };
  struct Unit {
    at::Tensor full;                     // (W*S_u) fp32: the parameters are views; storage only while gathered
    at::Tensor half;                     // (W*S_u) gather_dtype_ (bf16 gathers): the compute weights' storage
    std::vector<at::Tensor> half_views;  // per parameter of the unit: its view of `half`
    bool in_half = false;                // gathered into `half` (else into `full`)
    at::Tensor grad;                     // (W*S_u) grad_dtype_ while its gradients accumulate
    bool gathered = false;
    std::optional<Pending> gather;  // in flight
    int32_t layer = -1;             // decoder layer, -1 for the embedding and head units
  };
  struct PendingReduce {
    size_t unit = 0;
    Pending p;
    at::Tensor grad, sum;  // kept alive until it is done: the sent buffer and the (S_u) result
  };

  LlamaModel& model_;
  Comm& comm_;
  prof::Tracer* tracer_;
  Zero3Layout layout_;
  std::vector<Unit> units_;
  std::vector<std::vector<size_t>> uses_;  // use -> units (the head use of tied embeddings: 2)
  at::Tensor shard_, gshard_;              // (S), (S)
  std::optional<PendingReduce> reduce_;    // at most one reduce-scatter in flight
  std::vector<bool> reduced_;              // per unit: reduce-scattered in this backward
  std::shared_ptr<std::atomic<int64_t>> last_issued_done_;
  Zero3Fault fault_ = Zero3Fault::None;
  bool offload_ = false;
  bool grads_on_host_ = false;
  torch::Dtype grad_dtype_ = torch::kFloat32, reduce_dtype_ = torch::kFloat32, gather_dtype_ = torch::kFloat32;
  bool half_ = false;  // gather_dtype_ is not fp32: forward and backward gather into `half`
  std::unordered_map<const c10::TensorImpl*, std::pair<size_t, size_t>> where_;  // parameter -> (unit, index)
  int64_t prefetches_ = 0, on_demand_ = 0;
  int64_t live_ = 0, peak_ = 0;
  void account(int64_t bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }

  prof::RangeInfo info_for(size_t u, bool gather, bool prefetch) const;
  void issue_gather(size_t u, bool prefetch, bool fp32 = false);
  void ensure_gathered(size_t u);
  void release(size_t u);
  void prefetch_use(int use);
  void bind_grads(size_t u);
  void reduce_scatter(size_t u);
  void finish_reduce();
  void record(Pending& p);
};

}  // namespace ulysses
