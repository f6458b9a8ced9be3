// Llama decoder (Hugging Face LlamaForCausalLM math) over a sequence shard, with Ulysses
// attention. Parameters are plain tensors keyed by their Hugging Face names, so
// checkpoints map one to one. Shapes: B batch, n = N/P local tokens, d hidden, V vocab.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "activation_checkpoint.hpp"
#include "comm.hpp"
#include "rms_norm.hpp"
#include "run_config.hpp"
#include "tiled.hpp"
#include "ulysses_attention.hpp"

namespace ulysses {

// Backward-pass phase times collected by marker autograd nodes during one backward.
struct BackwardMarks {
  struct Layer {
    int64_t mlp_begin = 0, mlp_end = 0, o_begin = 0, o_end = 0, qkv_begin = 0, qkv_end = 0;
  };
  std::vector<Layer> layers;
  int64_t head_begin = 0, head_end = 0;  // final norm + lm_head
};

// Long-sequence memory techniques (TrainConfig's keys of the same names).
struct MemoryOptions {
  bool checkpoint_layers = false;  // activation_checkpointing = layer
  bool offload_activations = false;
  int64_t loss_chunk_tokens = 0;  // 0 = one (B*n, V) logits tensor
  int64_t mlp_chunk_tokens = 0;   // 0 = untiled MLP
  int64_t proj_chunk_tokens = 0;  // 0 = untiled norms, projections, RoPE and residual adds around attention
  static MemoryOptions from(const TrainConfig& t) {
    return {t.activation_checkpointing == "layer", t.offload_activations, t.loss_chunk_tokens, t.mlp_chunk_tokens,
            t.proj_chunk_tokens};
  }
};

// Tracer proxy that files forward ranges as Direction::Recompute: handed to the recompute
// of a checkpointed layer (including its Ulysses attention), so the re-run shows up apart
// from the real forward and inside the backward.
class RecomputeTracer : public prof::Tracer {
 public:
  explicit RecomputeTracer(prof::Tracer* inner) : inner_(inner) {}
  void begin_step(int64_t s) override { inner_->begin_step(s); }
  void end_step(const prof::StepRecord& r) override { inner_->end_step(r); }
  void flush() override { inner_->flush(); }
  bool active() const override { return inner_->active(); }
  void push(const prof::RangeInfo& i) override { inner_->push(remap(i)); }
  void pop() override { inner_->pop(); }
  void record_range(const prof::RangeInfo& i, int64_t s, int64_t e, int32_t lane) override {
    inner_->record_range(remap(i), s, e, lane);
  }
  void sample_memory(const char* label, const prof::MemorySample& m) override { inner_->sample_memory(label, m); }
  void set_metric(const std::string& n, double v) override { inner_->set_metric(n, v); }
  void close() override {}
  void set_thread_name(const std::string& n) override { inner_->set_thread_name(n); }

 private:
  static prof::RangeInfo remap(prof::RangeInfo i) {
    if (i.dir == prof::Direction::Forward) i.dir = prof::Direction::Recompute;
    return i;
  }
  prof::Tracer* inner_;
};

// ZeRO stage 3 (engine/core/zero3.hpp): the model tells whoever owns its sharded parameters
// when each gather unit's weights are needed. Uses, in forward order: 0 the embedding, 1 + l
// decoder layer l, L + 1 the final norm + lm_head (with tied embeddings the lm_head weight is
// the embedding's). Nothing is called without hooks (stages 0-2).
class ParamUnitHooks {
 public:
  virtual ~ParamUnitHooks() = default;
  virtual void forward_begin(int use) = 0;   // its forward is next (not a checkpoint's recompute)
  virtual void forward_end(int use) = 0;     // its forward is done
  virtual void backward_begin(int use) = 0;  // its backward (and recompute) is next
  virtual void backward_end(int use) = 0;    // its parameters' gradients are complete
  // Parameter p in the compute dtype when it was gathered so (ZeRO-3 gathers bf16 weights in
  // bf16 training; its gradient flows to p); undefined: read p itself.
  virtual at::Tensor compute_weight(const at::Tensor& p) {
    (void)p;
    return {};
  }
};

class LlamaModel {
 public:
  // Parameters are fp32 tensors on param_device (meta for dry runs and the memory planner).
  LlamaModel(const ModelConfig& cfg, const ParallelConfig& par, torch::Dtype compute_dtype, Comm* comm,
             torch::Device param_device = torch::kCPU);

  // Hugging Face initialisation (normal(0, 0.02) weights, ones for norms), from `seed`,
  // identical on every rank.
  void init_parameters(uint64_t seed);

  // ids (B, n) local shard starting at global position `pos0`; labels (B, n) already
  // shifted (-100 = ignored). Returns the SUM of token losses of this shard (fp32 scalar).
  at::Tensor forward_loss_sum(const at::Tensor& ids, const at::Tensor& labels, int64_t pos0);
  // The same for a shard whose tokens sit at the global positions `positions` (n, int64, CPU):
  // ring attention's zigzag layout gives a rank non-adjacent pieces of the sequence.
  // `docs` (packed documents, document_mask.hpp; nullptr: one document): the mask of the whole
  // sequences (B, N); RoPE then takes each token's position in its document and attention is
  // causal within documents (copied: it lives until the next forward, past this backward).
  at::Tensor forward_loss_sum(const at::Tensor& ids, const at::Tensor& labels, const at::Tensor& positions,
                              const DocumentMask* docs = nullptr);
  // Logits (B, n, V) for a shard (no loss), for checks.
  at::Tensor forward_logits(const at::Tensor& ids, int64_t pos0);

  std::vector<std::pair<std::string, at::Tensor>>& named_parameters() { return params_; }
  at::Tensor& param(const std::string& name);
  bool has_param(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<at::Tensor> parameters() const;

  const ModelConfig& config() const { return cfg_; }
  void set_tracer(prof::Tracer* t);
  void set_attention_kernel(const AttentionKernel& k);  // every layer's local attention
  void set_memory_options(const MemoryOptions& m) { mem_ = m; }
  const MemoryOptions& memory_options() const { return mem_; }
  BackwardMarks& marks() { return marks_; }
  // Stage 3: the owner of the sharded parameters (nullptr: every parameter always present).
  void set_param_hooks(ParamUnitHooks* h) { units_ = h; }
  ParamUnitHooks* param_hooks() const { return units_; }
  // Tests only: skip ring block `skip_step` in every ring attention's forward (-1: none).
  void set_ring_fault(RingFault f);

 private:
  at::Tensor hidden_states(const at::Tensor& ids, const at::Tensor& positions);
  // One decoder layer: x (B, n, d) -> (B, n, d). `dir` is Forward, or Recompute for the
  // re-run of a checkpointed layer inside backward.
  at::Tensor layer_forward(int64_t l, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           prof::Direction dir);
  at::Tensor w(const std::string& name);                  // parameter cast to the compute dtype
  void replicate_kv(at::Tensor& k, at::Tensor& v) const;  // GQA kv heads for sp > Hkv
  at::Tensor attend(int64_t l, prof::Direction dir, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
  // Stage 3: an identity on x whose backward calls the hooks' backward_begin (`begin`) or
  // backward_end for `use`; x itself without hooks or autograd.
  at::Tensor unit_boundary(const at::Tensor& x, int use, bool begin);
  at::Tensor head_loss_sum(const at::Tensor& x, const at::Tensor& labels, bool marks_on);
  // proj_chunk_tokens: one token tile of the computation before attention (input norm, q/k/v
  // projections, qk-norm, RoPE) and after it (o projection, residual, post norm, MLP, residual);
  // tiled_tokens (tiled.hpp) runs them tile by tile in forward and in backward.
  std::vector<at::Tensor> qkv_tile(const std::vector<at::Tensor>& tiles, const std::vector<at::Tensor>& w) const;
  std::vector<at::Tensor> post_attention_tile(const std::vector<at::Tensor>& tiles,
                                              const std::vector<at::Tensor>& w) const;
  at::Tensor layer_forward_tiled(int64_t l, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 prof::Direction dir);

  ModelConfig cfg_;
  ParallelConfig par_;
  torch::Dtype dtype_;
  Comm* comm_;
  prof::Tracer* tracer_ = nullptr;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::map<std::string, size_t> index_;
  std::vector<UlyssesOptions> attn_opts_;       // per layer, must outlive autograd graphs
  std::vector<UlyssesOptions> recompute_opts_;  // the same, traced as Direction::Recompute
  std::unique_ptr<RecomputeTracer> recompute_tracer_;
  std::unique_ptr<RingTransport> ring_;  // parallel.ring_size > 1: over comm's ring group
  std::vector<CheckpointSlot> ckpt_;     // per layer, alive from forward to backward
  MemoryOptions mem_;
  at::Tensor inv_freq_;        // (dh/2) RoPE inverse frequencies (rope_inv_freq; fp64 with rope_precision fp64)
  double rope_scaling_ = 1.0;  // cos/sin factor (yarn's attention factor)
  BackwardMarks marks_;
  ParamUnitHooks* units_ = nullptr;
  // The tile functions handed to tiled_tokens: they must outlive the autograd graphs.
  TileFn qkv_tile_fn_, post_tile_fn_;
  DocumentMask docs_;  // the forward's packed documents (undefined: none); attn options point here
  void set_documents(const DocumentMask* docs);
};

// Rotary embedding with rotate_half. x (B, n, h, dh), cos/sin (n, dh) or per row (B, n, dh).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// Hugging Face RoPE inverse frequencies (dh/2, CPU) for the config's rope_type
// (default | linear | llama3 | yarn) and the factor cos/sin are scaled by (yarn: attention
// factor, else 1). Formulas in docs/CONTRACTS.md. dtype kFloat32: Hugging Face's tensors;
// kFloat64: the same formulas in fp64 (model.rope_precision fp64, docs/NUMERICS.md).
std::pair<at::Tensor, double> rope_inv_freq(const ModelConfig& cfg, torch::Dtype dtype = torch::kFloat32);
// cos, sin (n, dh) = (cos, sin)(pos * inv_freq) * scaling for positions pos0..pos0+n-1, in
// inv_freq's dtype (fp32 as Hugging Face, or fp64) on out's device, returned in out's dtype.
std::pair<at::Tensor, at::Tensor> rope_tables(int64_t pos0, int64_t n, const at::Tensor& inv_freq, double scaling,
                                              const at::TensorOptions& out);
// The same for any global positions (n) int64, or per row (B, n) -> cos, sin (B, n, dh).
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, const at::Tensor& inv_freq, double scaling,
                                              const at::TensorOptions& out);
// Plain RoPE (rope_type default) tables: cos, sin (n, dh) for positions pos0..pos0+n-1: angles computed in fp32 on
// out's device, returned in out's dtype (the compute dtype), built once per forward and shared by all layers.
std::pair<at::Tensor, at::Tensor> rope_tables(
    int64_t pos0, int64_t n, int64_t dh, double theta,
    const at::TensorOptions& out = at::TensorOptions().dtype(torch::kFloat32));

}  // namespace ulysses
