// Memory planner: a dry run of one rank's real training step on libtorch's `meta` device,
// where tensors have shapes and dtypes but no storage: a Trainer over Comm::shape_only, so the
// construction (model, flat gradient buffer, ZeRO state, AdamW) and Trainer::step (gradient
// accumulation, all-reduce or reduce-scatter, norm and clipping, AdamW, all-gather) are the
// trainer's own; its scalars (norms, token counts) are reductions.hpp's meta stand-ins. A
// counting allocator registered for DeviceType::Meta sees every tensor the step creates and
// frees, so the live-byte peak is that of the real code path with the run's settings, for a
// device and a sequence length this machine may not have.
//
// How the run's device is honoured: parameters are fp32 (as the trainer keeps them) with
// the compute dtype the config names; Comm::shape_only's collectives allocate their receive
// buffers and move nothing; offloaded state is host memory (mem::HostScope, not counted);
// attention is counted as the target runs it (trainer_attention_kernel with
// TrainerOptions::plan_for_cuda): a CUDA plan counts flash (flash_shapes.hpp: q, k, v, out,
// log-sum-exp), a CPU plan runs the kernel attention_kernel_for picks on CPU.
#pragma once

#include <cstdint>
#include <string>

#include "allocator_model.hpp"
#include "gpu_reserve.hpp"
#include "memory_labels.hpp"
#include "ulysses/profiler/memory_categories.hpp"
#include "run_config.hpp"

namespace ulysses::plan {

// Process-wide counter of the bytes held by meta tensors. install() registers the
// counting allocator for DeviceType::Meta (idempotent, thread-safe); until then meta
// tensors are not counted.
struct MetaMemory {
  static void install();
  static int64_t live();
  static int64_t peak();
  static void reset_peak();  // peak := live
};

struct PlanOptions {
  int sp_rank = 0;     // which SP rank to dry-run (every rank holds the same shapes)
  bool detail = true;  // also measure per-layer activations and the loss/logits peak
  // A GPU plan for a device of this many bytes (0: unknown): the allocator replay gives cached
  // segments back when a new one would not fit, as the CUDA allocator does (allocator_model.hpp).
  int64_t gpu_limit_bytes = 0;
  // Sustained TFLOP/s of one rank for the plan's compute time (0: FLOPs only, no time).
  double tflops_per_rank = 0;
};

// One rank's memory for one training step, bytes.
struct MemoryPlan {
  std::string device;     // cuda | cpu: what the plan is for
  std::string dtype;      // float32 | bfloat16
  std::string attention;  // the attention counted: flash | sdpa-math | blocked(256)
  int64_t sp_size = 1, ring_size = 1, dp_size = 1, sp_rank = 0;
  int64_t seq_length = 0, local_tokens = 0, micro_batch_size = 1, layers = 0;
  int64_t params = 0;  // parameters the model built (= ModelConfig::num_parameters)

  // Static part in the cost model's layout (cost_model.hpp): weights and gradients in the
  // training dtype, fp32 master weights (bfloat16), AdamW m and v fp32.
  int64_t param_bytes = 0, grad_bytes = 0, master_bytes = 0, optimizer_bytes = 0;
  int64_t static_bytes() const { return param_bytes + grad_bytes + master_bytes + optimizer_bytes; }
  // ZeRO (train.zero_stage, docs/ZERO.md). Every stage is dry-run as the trainer runs it (AdamW
  // state of the shard; stage 2 frees the full gradient buffer between steps; stage 3 gathers
  // each unit before its forward and backward while the next one is prefetched, and keeps a
  // unit's gradient buffer until its reduce-scatter, with the trainer's Zero3Params).
  int64_t zero_stage = 0;
  // Stage 3: the most bytes of gathered units live at once in the dry run (fp32 weights of the
  // unit computing and of the prefetched next one, gradient buffers being filled or in flight).
  int64_t gathered_param_bytes = 0;
  int64_t host_bytes = 0;  // offloaded to CPU memory, not in peak_bytes (cost model)
  // Measured: live meta bytes after the optimizer step (fp32 weights, fp32 gradients and
  // AdamW m, v as the engine holds them), minus the step's input ids and labels.
  int64_t measured_static_bytes = 0;

  // Measured in the dry run.
  int64_t activation_bytes = 0;             // held from the end of forward until backward frees it
  int64_t activation_per_layer_bytes = -1;  // one decoder layer's share (-1: not measured)
  int64_t activation_other_bytes = -1;      // the rest: embedding output, final norm, logits, loss
  int64_t loss_peak_bytes = -1;             // peak above the weights of the step of a model with no
                                            // decoder layers: embedding, final norm, lm_head, loss (fwd + bwd)
  int64_t peak_bytes = 0;                   // highest live bytes in a steady-state step (AdamW state held)
  // What was alive at that peak by category (memory_categories.hpp: the trainer's own scopes
  // charge the dry run's meta tensors as they charge a real run's CPU tensors).
  prof::MemoryCategories peak_categories;
  // And by name (memory_labels.hpp): every group of tensors alive at that peak, largest first,
  // with the dtype and shape of its largest block. --plan prints the largest kPeakTableRows.
  std::vector<mem::TensorGroup> peak_tensors;
  // The planner's curve: the categories at both edges of every range the model pushes in the
  // dry run's steady-state step (layers, attention, all-to-alls, MLP, loss; the trainer's own
  // step, backward, gradient-reduction and optimizer ranges take no point), in order. A traced run records it
  // (MemEdge::PlannedBegin / PlannedEnd) and the studio draws it against the measured samples
  // of the same ranges.
  std::vector<prof::PlannedMemoryPoint> curve;
  int64_t transient_bytes() const { return peak_bytes - static_bytes() - gathered_param_bytes - activation_bytes; }
  // The headline of a long-sequence plan: transient bytes per token of this rank.
  double transient_bytes_per_token() const {
    const int64_t tokens = local_tokens * micro_batch_size;
    return tokens > 0 ? double(transient_bytes()) / double(tokens) : 0.0;
  }
  bool memory_techniques_applied = false;  // the model took activation_checkpointing, offload,
                                           // loss_chunk_tokens, mlp_chunk_tokens (builds with them)
  double dry_run_s = 0;                    // wall time of the dry runs
  // Compute of one rank's step: the cost model's count (cost_model.hpp), so --plan and the
  // launcher's estimate say the same. data.kind = documents: attention is counted for the
  // causal (query, key) pairs the document mask keeps (attention_fraction, from the prepared
  // folder's packing); attention_flops_unmasked_per_rank is what one document per sequence costs.
  double dense_flops_per_rank = 0, attention_flops_per_rank = 0, attention_flops_unmasked_per_rank = 0;
  double attention_fraction = 1;
  double flops_per_rank() const { return dense_flops_per_rank + attention_flops_per_rank; }
  double tflops_per_rank = 0;  // PlanOptions::tflops_per_rank; 0: no compute time
  double compute_s = 0;        // flops_per_rank() at tflops_per_rank
  // Plans for a GPU: what the device adds (context, workspaces, NCCL and CUPTI buffers,
  // allocator rounding, offload prefetch) and the offloaded inputs as pinned host memory
  // (cost/gpu_reserve.hpp); --max-seq compares gpu.device_bytes() with the limit less kGpuHeadroom.
  bool has_gpu_reserve = false;
  cost::GpuReserve gpu;
  // GPU plans: train.allocator, and the dry run's allocations replayed through it
  // (allocator_model.hpp); gpu.rounding_bytes is its overhead. gpu_flat: the same plan with the
  // flat fragmentation share instead (what plans said before the replay).
  std::string allocator;
  cost::AllocatorReplay allocator_replay;
  cost::GpuReserve gpu_flat;
};

// Rows of the peak table plan_to_text prints (plan_to_json has them all).
inline constexpr size_t kPeakTableRows = 15;

// The device a plan is for: train.device, with auto decided as the workers decide it
// (decide_device with this host's facts and every rank local).
std::string plan_device(const RunConfig& cfg);

// Dry-runs two Trainer steps of `cfg` (the first creates the AdamW state) and measures the second.
// cfg must pass validate(). Throws ConfigError for settings the dry run cannot model.
MemoryPlan plan_memory(const RunConfig& cfg, const PlanOptions& opt = {});

// Whether cfg fits a device of `limit_bytes` per rank: one rule for a plan at a fixed length and
// for --max-seq's search. The plan replays the allocator at that limit (a cached segment is
// given back where a new one would pass it, as the caching allocator does before it fails);
// on a GPU its total (gpu.device_bytes(), reserve included) must be within the limit less
// kGpuHeadroom, on a CPU its peak within the limit. `plan`: the plan it decided on (optional).
bool fits_device(const RunConfig& cfg, int64_t limit_bytes, PlanOptions opt = {}, MemoryPlan* plan = nullptr);

// Longest train.seq_length (a multiple of sp_size x ring_size, twice that with the ring's
// zigzag) whose planned peak fits in `limit_bytes` per rank; 0 when not even that fits. Searches with dry runs (peak
// grows with N).
int64_t max_seq_length(const RunConfig& cfg, int64_t limit_bytes, int64_t upper_bound = int64_t(1) << 24);

json plan_to_json(const MemoryPlan& p);
std::string plan_to_text(const MemoryPlan& p);
// The peak table's first `limit` rows as plan_to_text prints them.
std::string peak_table_text(const std::vector<mem::TensorGroup>& rows, size_t limit);
// The compute lines plan_to_text prints: FLOPs per rank and step, the document mask's saving.
std::string plan_compute_text(const MemoryPlan& p);

}  // namespace ulysses::plan
