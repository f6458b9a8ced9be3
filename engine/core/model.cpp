// Llama decoder with Ulysses attention; markers time the backward phases.
#include "model.hpp"

#include "tiled.hpp"
#include "flash_shapes.hpp"
#include "ulysses_geometry.hpp"
#include "memory_categories.hpp"

namespace ulysses {

using prof::Direction;
using prof::Phase;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// Identity in forward; in backward stores the host time into *slot (first arrival wins),
// so the backward of the phase between two markers can be timed.
class MarkFn : public torch::autograd::Function<MarkFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t* slot) {
    ctx->saved_data["slot"] = reinterpret_cast<int64_t>(slot);
    return x;  // returned input: autograd wraps it as an identity view
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto* slot = reinterpret_cast<int64_t*>(ctx->saved_data["slot"].toInt());
    if (*slot == 0) *slot = prof::Tracer::now_ns();
    return {g[0], at::Tensor()};
  }
};

at::Tensor mark(const at::Tensor& x, int64_t* slot, bool on) { return on ? MarkFn::apply(x, slot) : x; }

// Identity in forward; its backward tells the ZeRO-3 hooks that a gather unit's backward
// starts (put on the unit's output) or that its gradients are complete (on its input: every
// node of the unit feeds it, so the engine runs it after them and after their AccumulateGrad
// nodes, which it runs first whenever they are ready).
class UnitBoundaryFn : public torch::autograd::Function<UnitBoundaryFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, ParamUnitHooks* hooks, int64_t use, bool begin) {
    ctx->saved_data["hooks"] = reinterpret_cast<int64_t>(hooks);
    ctx->saved_data["use"] = use;
    ctx->saved_data["begin"] = begin;
    return x;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto* hooks = reinterpret_cast<ParamUnitHooks*>(ctx->saved_data["hooks"].toInt());
    const int use = static_cast<int>(ctx->saved_data["use"].toInt());
    if (ctx->saved_data["begin"].toBool())
      hooks->backward_begin(use);
    else
      hooks->backward_end(use);
    return {g[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, double> rope_inv_freq(const ModelConfig& c, torch::Dtype dtype) {
  // Hugging Face's modeling_rope_utils maths (Transformers >= 4.48 for yarn), fp32 tensors
  // with double scalars as in Python; formulas in docs/CONTRACTS.md. Returns the (dh/2)
  // inverse frequencies and the factor cos and sin are multiplied by ("attention_scaling").
  const int64_t dim = c.head_dim();
  const double base = c.rope_theta;
  const auto f32 = torch::TensorOptions().dtype(dtype);  // fp32 as Hugging Face, or fp64
  auto exponents = torch::arange(0, dim, 2, f32.dtype(torch::kInt64)).to(dtype) / static_cast<double>(dim);  // (dh/2)
  auto inv_freq = 1.0 / torch::pow(base, exponents);                                                         // (dh/2)
  if (c.rope_type == "default") return {inv_freq, 1.0};
  const double factor = c.rope_factor;
  if (c.rope_type == "linear") return {inv_freq / factor, 1.0};
  if (c.rope_type == "llama3") {
    const double lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    const double old_ctx = static_cast<double>(c.rope_original_max_position_embeddings);
    const double low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    auto wavelen = inv_freq.reciprocal() * (2 * M_PI);  // Python's `2 * math.pi / inv_freq`
    auto llama = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
    auto smooth = (wavelen.reciprocal() * old_ctx - lo) / (hi - lo);
    auto smoothed = (1.0 - smooth) * llama / factor + smooth * llama;
    auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
    return {torch::where(medium, smoothed, llama), 1.0};
  }
  if (c.rope_type == "yarn") {
    const double orig = c.rope_original_max_position_embeddings > 0
                            ? static_cast<double>(c.rope_original_max_position_embeddings)
                            : static_cast<double>(c.max_position_embeddings);
    const double attention =
        c.rope_attention_factor > 0 ? c.rope_attention_factor : (factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0);
    auto correction_dim = [&](double rotations) {
      return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(c.rope_beta_fast), high = correction_dim(c.rope_beta_slow);
    if (c.rope_truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;                // HF: prevent a division by zero
    auto pos_freqs = torch::pow(base, exponents);  // (dh/2)
    auto extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (factor * pos_freqs);
    auto ramp = ((torch::arange(dim / 2, f32) - low) / (high - low)).clamp(0, 1);  // (dh/2)
    auto extrapolation_factor = 1.0 - ramp;
    return {interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor, attention};
  }
  throw ConfigError("model.rope_type '" + c.rope_type + "' is not supported (default, linear, llama3, yarn)");
}

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t pos0, int64_t n, const at::Tensor& inv_freq, double scaling,
                                              const at::TensorOptions& out) {
  return rope_tables(torch::arange(pos0, pos0 + n, at::TensorOptions().dtype(torch::kInt64)), inv_freq, scaling, out);
}

std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, const at::Tensor& inv_freq, double scaling,
                                              const at::TensorOptions& out) {
  // Angles in inv_freq's dtype (fp32 as Hugging Face computes them, or fp64), on the device the
  // tables are used on, then cast once to the compute dtype: every layer shares the same two tables.
  const auto f32 = out.dtype(torch::kFloat32);
  auto inv = inv_freq.to(f32.device());
  auto pos = positions.to(f32.device()).to(inv.scalar_type());
  auto freqs = pos.unsqueeze(-1) * inv.unsqueeze(0);  // (n, dh/2), or (B, n, dh/2) for per-row positions
  auto emb = torch::cat({freqs, freqs}, -1);          // (n, dh)
  auto c = emb.cos(), s = emb.sin();
  if (scaling != 1.0) {
    c = c * scaling;
    s = s * scaling;
  }
  const auto dt = out.dtype().toScalarType();
  return {c.to(dt), s.to(dt)};
}

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t pos0, int64_t n, int64_t dh, double theta,
                                              const at::TensorOptions& out) {
  ModelConfig c;
  c.explicit_head_dim = dh;
  c.rope_theta = theta;
  return rope_tables(pos0, n, rope_inv_freq(c).first, 1.0, out);
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  auto rot = torch::cat({-x2, x1}, -1);
  auto c = cos.dim() == 3 ? cos.unsqueeze(2) : cos.unsqueeze(0).unsqueeze(2);  // (1 or B, n, 1, dh), x's dtype
  auto s = sin.dim() == 3 ? sin.unsqueeze(2) : sin.unsqueeze(0).unsqueeze(2);
  return x * c + rot * s;
}

LlamaModel::LlamaModel(const ModelConfig& cfg, const ParallelConfig& par, torch::Dtype dtype, Comm* comm,
                       torch::Device param_device)
    : cfg_(cfg), par_(par), dtype_(dtype), comm_(comm) {
  // The parameters, names and shapes, from the one list a checkpoint is also checked against.
  for (auto& [name, shape] : cfg.parameters()) {
    index_[name] = params_.size();
    params_.emplace_back(name, torch::zeros(shape, torch::TensorOptions().dtype(torch::kFloat32).device(param_device))
                                   .set_requires_grad(true));
  }
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    UlyssesOptions o;
    o.comm = comm;
    o.head_chunks = par.head_chunks;
    o.fused_qkv = par.fused_qkv;
    o.layer = static_cast<int32_t>(l);
    if (comm && comm->ring_size() > 1) {
      if (!ring_ && comm->is_shape_only()) ring_ = make_shape_only_ring_transport(comm->ring_size());
      if (!ring_) {
        if (!comm->ring_group())
          throw std::invalid_argument("parallel.ring_size " + std::to_string(comm->ring_size()) +
                                      " needs a Comm with ring groups");
        ring_ = make_group_ring_transport(comm->ring_group(), comm->timeout(), comm->ring_pg(),
                                          ring_transport_kind(par.ring_transport, comm->backend_name()),
                                          comm->device_timer_ptr());
      }
      o.ring = ring_.get();
      o.ring_layout = RingLayout{comm->ring_size(), par.ring_zigzag};
    }
    attn_opts_.push_back(o);
  }
  recompute_opts_ = attn_opts_;
  ckpt_.resize(cfg.num_hidden_layers);
  std::tie(inv_freq_, rope_scaling_) =
      rope_inv_freq(cfg, cfg.rope_precision == "fp64" ? torch::kFloat64 : torch::kFloat32);  // (dh/2) on the CPU
  marks_.layers.resize(cfg.num_hidden_layers);
  qkv_tile_fn_ = [this](const std::vector<at::Tensor>& t, const std::vector<at::Tensor>& w) { return qkv_tile(t, w); };
  post_tile_fn_ = [this](const std::vector<at::Tensor>& t, const std::vector<at::Tensor>& w) {
    return post_attention_tile(t, w);
  };
}

void LlamaModel::set_attention_kernel(const AttentionKernel& k) {
  for (auto& o : attn_opts_) o.kernel = k;
  for (auto& o : recompute_opts_) o.kernel = k;
}

void LlamaModel::set_ring_fault(RingFault f) {
  for (auto& o : attn_opts_) o.ring_fault = f;
  for (auto& o : recompute_opts_) o.ring_fault = f;
}

void LlamaModel::set_tracer(prof::Tracer* t) {
  tracer_ = t;
  for (auto& o : attn_opts_) o.tracer = t;
  recompute_tracer_ = t ? std::make_unique<RecomputeTracer>(t) : nullptr;
  for (auto& o : recompute_opts_) o.tracer = recompute_tracer_.get();
}

void LlamaModel::init_parameters(uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& [name, t] : params_) {
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias)
      t.zero_();  // HF: biases start at zero, norm weights at one
    else if (t.dim() == 1)
      t.fill_(1.0);
    else
      t.normal_(0.0, 0.02, gen);
  }
}

at::Tensor& LlamaModel::param(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    if (name == "lm_head.weight" && cfg_.tie_word_embeddings) return param("model.embed_tokens.weight");
    throw std::out_of_range("no parameter named " + name);
  }
  return params_[it->second].second;
}

std::vector<at::Tensor> LlamaModel::parameters() const {
  std::vector<at::Tensor> v;
  for (const auto& p : params_) v.push_back(p.second);
  return v;
}

at::Tensor LlamaModel::w(const std::string& name) {
  auto& p = param(name);
  if (units_)  // stage 3 in bf16 training: the unit's gathered bf16 weight (zero3.hpp)
    if (at::Tensor g = units_->compute_weight(p); g.defined()) return g;
  // Stage 3: a released parameter has no storage; reading it would read freed memory.
  if (units_ && p.numel() > 0 && p.storage().nbytes() == 0)
    throw std::logic_error("ZeRO-3: parameter " + name + " used while its gather unit is released");
  return p.scalar_type() == dtype_ ? p : p.to(dtype_);
}

at::Tensor LlamaModel::unit_boundary(const at::Tensor& x, int use, bool begin) {
  if (!units_ || !torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return UnitBoundaryFn::apply(x, units_, static_cast<int64_t>(use), begin);
}

at::Tensor LlamaModel::hidden_states(const at::Tensor& ids, const at::Tensor& positions) {
  for (auto& l : marks_.layers) l = {};
  marks_.head_begin = marks_.head_end = 0;

  at::Tensor x, cos, sin;
  if (units_) units_->forward_begin(0);
  {
    ULYSSES_RANGE(tracer_, Phase::Embedding, Direction::Forward);  // tokens and positions (RoPE tables)
    const auto& table = w("model.embed_tokens.weight");
    x = ids.is_meta() ? embedding_shapes(table, ids)
                      : torch::embedding(table, ids);  // (B, n, d); meta: dry runs (flash_shapes.hpp)
    if (units_) units_->forward_end(0);
    x = unit_boundary(x, 0, /*begin=*/true);
    std::tie(cos, sin) = rope_tables(positions, inv_freq_, rope_scaling_,
                                     x.options());  // x: (B, n, d) on the model's device, compute dtype
  }
  const bool ckpt = mem_.checkpoint_layers && torch::GradMode::is_enabled();
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const int use = static_cast<int>(l) + 1;
    x = unit_boundary(x, use, /*begin=*/false);  // stage 3: its backward = the layer's gradients are done
    if (!ckpt) {
      x = layer_forward(l, x, cos, sin, Direction::Forward);
      x = unit_boundary(x, use, /*begin=*/true);  // stage 3: its backward = the layer's backward starts
      continue;
    }
    // Only the layer input is kept (in CPU memory with offload); backward re-runs the layer.
    auto& slot = ckpt_[l];
    slot.offload = mem_.offload_activations;
    slot.saved.reset();
    slot.run = [this, l, cos = cos, sin = sin](const at::Tensor& in, bool recompute) {
      return layer_forward(l, in, cos, sin, recompute ? Direction::Recompute : Direction::Forward);
    };
    // when layer l's backward starts, bring layer l-1's input back (overlaps on GPU)
    slot.on_backward = [this, l] {
      if (l > 0 && ckpt_[l - 1].offload) ckpt_[l - 1].saved.prefetch();
    };
    x = checkpoint_block(x, &slot);  // (B, n, d)
    x = unit_boundary(x, use, /*begin=*/true);
  }
  return x;
}

// GQA with fewer kv heads than ranks: each kv head replicated so every rank gets one (the rule
// in ulysses_geometry.hpp). (B, n, Hkv, dh) -> (B, n, Hkv * R, dh); repeat_interleave(R, 2) as
// expand + reshape (libtorch 1.13 has no meta kernel for it).
void LlamaModel::replicate_kv(at::Tensor& k, at::Tensor& v) const {
  const int64_t P = comm_ ? comm_->sp_size() : 1;
  const int64_t B = k.size(0), n = k.size(1), Hkv = k.size(2), dh = k.size(3);
  const int64_t R = ulysses_geometry(cfg_.num_attention_heads, Hkv, P).replication;
  if (R <= 1) return;
  k = k.unsqueeze(3).expand({B, n, Hkv, R, dh}).reshape({B, n, Hkv * R, dh});  // (B, n, P, dh)
  v = v.unsqueeze(3).expand({B, n, Hkv, R, dh}).reshape({B, n, Hkv * R, dh});
}

// Layer l's attention over q (B, n, H, dh), k, v: Ulysses' all-to-alls when sp > 1 or the heads
// are chunked, else the kernel directly (over the ring when ring_size > 1). Returns (B, n, H, dh),
// a transposed view of what attention wrote.
at::Tensor LlamaModel::attend(int64_t l, Direction dir, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t P = comm_ ? comm_->sp_size() : 1;
  const auto& aopt = dir == Direction::Recompute ? recompute_opts_[l] : attn_opts_[l];
  if (P > 1 || par_.head_chunks > 1) return ulysses_attention(q, k, v, aopt);
  const auto H = static_cast<int32_t>(cfg_.num_attention_heads);
  ULYSSES_RANGE(tracer_, Phase::Attention, dir, static_cast<int32_t>(l), 0, H);
  prof::RangeInfo at;  // the ring steps' fields (aopt.tracer marks a recompute's as such)
  at.head_begin = 0;
  at.head_end = H;
  return attention_core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), aopt, &at).transpose(1, 2);
}

at::Tensor LlamaModel::layer_forward(int64_t l, const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin,
                                     Direction dir) {
  mem::LayerScope layer_scope(static_cast<int32_t>(l));  // its activations are counted per layer too
  const int64_t B = x_in.size(0), n = x_in.size(1);
  const int64_t H = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, dh = cfg_.head_dim();
  const bool marks_on = tracer_ && tracer_->active() && torch::GradMode::is_enabled();
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto& mk = marks_.layers[l];
  const auto L = static_cast<int32_t>(l);
  // Stage 3: the layer's weights gathered for its forward and released after (a recompute
  // runs on the weights its backward gathered).
  const bool hooks = units_ && dir == Direction::Forward;
  if (mem_.proj_chunk_tokens > 0) {
    if (hooks) units_->forward_begin(static_cast<int>(l) + 1);
    at::Tensor y = layer_forward_tiled(l, x_in, cos, sin, dir);
    if (hooks) units_->forward_end(static_cast<int>(l) + 1);
    return y;
  }
  if (hooks) units_->forward_begin(static_cast<int>(l) + 1);
  at::Tensor x = x_in;
  at::Tensor q, k, v;
  {
    ULYSSES_RANGE(tracer_, Phase::QkvProj, dir, L);
    // Backward: the QKV range runs from q, k, v entering attention to the input norm's input, so
    // RoPE's and the norm's backward are in it as their forward is (docs/TRACES.md).
    auto h = rms_norm(mark(x, &mk.qkv_end, marks_on), w(p + "input_layernorm.weight"), cfg_.rms_norm_eps);
    const bool qb = cfg_.qkv_bias();
    q = torch::linear(h, w(p + "self_attn.q_proj.weight"), qb ? w(p + "self_attn.q_proj.bias") : at::Tensor());
    k = torch::linear(h, w(p + "self_attn.k_proj.weight"), qb ? w(p + "self_attn.k_proj.bias") : at::Tensor());
    v = torch::linear(h, w(p + "self_attn.v_proj.weight"), qb ? w(p + "self_attn.v_proj.bias") : at::Tensor());
    q = q.view({B, n, H, dh});    // (B, n, H, dh)
    k = k.view({B, n, Hkv, dh});  // (B, n, Hkv, dh)
    v = v.view({B, n, Hkv, dh});
    if (cfg_.qk_norm()) {
      // Qwen3: RMSNorm over each head's dh before RoPE. Per head, so it runs on this rank's
      // sequence shard before the all-to-all, like the projections.
      q = rms_norm(q, w(p + "self_attn.q_norm.weight"), cfg_.rms_norm_eps);  // (B, n, H, dh)
      k = rms_norm(k, w(p + "self_attn.k_norm.weight"), cfg_.rms_norm_eps);  // (B, n, Hkv, dh)
    }
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
    replicate_kv(k, v);
    q = mark(q, &mk.qkv_begin, marks_on);
    k = mark(k, &mk.qkv_begin, marks_on);
    v = mark(v, &mk.qkv_begin, marks_on);
  }
  at::Tensor a = attend(l, dir, q, k, v);  // (B, n, H, dh)
  q = k = v = at::Tensor();                // read by the exchange or the kernel only: freed before the MLP
  {
    ULYSSES_RANGE(tracer_, Phase::OutProj, dir, L);
    a = mark(a.reshape({B, n, H * dh}), &mk.o_end, marks_on);
    auto o = torch::linear(a, w(p + "self_attn.o_proj.weight"),
                           cfg_.o_bias() ? w(p + "self_attn.o_proj.bias") : at::Tensor());
    x = x + mark(o, &mk.o_begin, marks_on);
  }
  {
    ULYSSES_RANGE(tracer_, Phase::Mlp, dir, L);
    // backward: the MLP range ends at the post-attention norm's input (its backward included)
    auto h2 = rms_norm(mark(x, &mk.mlp_end, marks_on), w(p + "post_attention_layernorm.weight"), cfg_.rms_norm_eps);
    // SwiGLU, over token tiles of mlp_chunk_tokens when set (TiledMLP: one tile's (T, f) alive)
    auto m = tiled_mlp(h2, w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight"), w(p + "mlp.down_proj.weight"),
                       mem_.mlp_chunk_tokens);
    x = x + mark(m, &mk.mlp_begin, marks_on);
  }
  if (hooks) units_->forward_end(static_cast<int>(l) + 1);
  return x;
}

std::vector<at::Tensor> LlamaModel::qkv_tile(const std::vector<at::Tensor>& t, const std::vector<at::Tensor>& w) const {
  // t: x (B, T, d), cos, sin (1, T, dh); w: input norm, q, k, v [, q, k, v biases] [, q, k norms]
  const at::Tensor& x = t[0];
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, dh = cfg_.head_dim();
  const bool qb = cfg_.qkv_bias();
  auto h = rms_norm(x, w[0], cfg_.rms_norm_eps);
  auto q = torch::linear(h, w[1], qb ? w[4] : at::Tensor()).view({B, T, H, dh});    // (B, T, H, dh)
  auto k = torch::linear(h, w[2], qb ? w[5] : at::Tensor()).view({B, T, Hkv, dh});  // (B, T, Hkv, dh)
  auto v = torch::linear(h, w[3], qb ? w[6] : at::Tensor()).view({B, T, Hkv, dh});
  h = at::Tensor();  // freed as soon as the projections have read it
  if (cfg_.qk_norm()) {
    const size_t i = qb ? 7 : 4;
    q = rms_norm(q, w[i], cfg_.rms_norm_eps);
    k = rms_norm(k, w[i + 1], cfg_.rms_norm_eps);
  }
  const at::Tensor c = t[1].select(0, 0), s = t[2].select(0, 0);  // (T, dh)
  return {apply_rope(q, c, s), apply_rope(k, c, s), v};
}

std::vector<at::Tensor> LlamaModel::post_attention_tile(const std::vector<at::Tensor>& t,
                                                        const std::vector<at::Tensor>& w) const {
  // t: attention output (B, T, H, dh) as attention left it, x the layer input (B, T, d);
  // w: o, post norm, gate, up, down [, o bias]
  const at::Tensor& x = t[1];
  const int64_t B = x.size(0), T = x.size(1);
  auto o = torch::linear(t[0].reshape({B, T, -1}), w[0], cfg_.o_bias() ? w[5] : at::Tensor());  // (B, T, d)
  auto x1 = x + o;
  o = at::Tensor();
  auto h2 = rms_norm(x1, w[1], cfg_.rms_norm_eps);
  return {x1 + tiled_mlp(h2, w[2], w[3], w[4], 0)};  // the MLP over this tile, untiled inside it
}

at::Tensor LlamaModel::layer_forward_tiled(int64_t l, const at::Tensor& x_in, const at::Tensor& cos,
                                           const at::Tensor& sin, Direction dir) {
  // proj_chunk_tokens: the layer holds its input, q, k, v and the attention output; the norms,
  // projections, RoPE, residual adds and the MLP exist one token tile at a time, in forward and
  // in backward (tiled_tokens). The backward marks time the q/k/v and attention-output edges
  // only (no separate o-projection and MLP backward ranges).
  const int64_t tile = mem_.proj_chunk_tokens;
  const bool marks_on = tracer_ && tracer_->active() && torch::GradMode::is_enabled();
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto& mk = marks_.layers[l];
  const auto L = static_cast<int32_t>(l);
  at::Tensor q, k, v;
  {
    ULYSSES_RANGE(tracer_, Phase::QkvProj, dir, L);
    std::vector<at::Tensor> w_in = {w(p + "input_layernorm.weight"), w(p + "self_attn.q_proj.weight"),
                                    w(p + "self_attn.k_proj.weight"), w(p + "self_attn.v_proj.weight")};
    if (cfg_.qkv_bias())
      for (const char* b : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
        w_in.push_back(w(p + b));
    if (cfg_.qk_norm())
      for (const char* b : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) w_in.push_back(w(p + b));
    auto qkv = tiled_tokens(&qkv_tile_fn_, {mark(x_in, &mk.qkv_end, marks_on), cos.unsqueeze(0), sin.unsqueeze(0)},
                            w_in, tile);
    q = mark(qkv[0], &mk.qkv_begin, marks_on);  // (B, n, H, dh)
    k = mark(qkv[1], &mk.qkv_begin, marks_on);  // (B, n, Hkv, dh)
    v = mark(qkv[2], &mk.qkv_begin, marks_on);
    replicate_kv(k, v);
  }
  // (B, n, H, dh), a view of what attention wrote: each tile below is reshaped, no whole copy
  at::Tensor a = attend(l, dir, q, k, v);
  q = k = v = at::Tensor();
  ULYSSES_RANGE(tracer_, Phase::OutProj, dir, L);
  std::vector<at::Tensor> w_out = {w(p + "self_attn.o_proj.weight"), w(p + "post_attention_layernorm.weight"),
                                   w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight"),
                                   w(p + "mlp.down_proj.weight")};
  if (cfg_.o_bias()) w_out.push_back(w(p + "self_attn.o_proj.bias"));
  auto y = tiled_tokens(&post_tile_fn_, {mark(a, &mk.o_end, marks_on), x_in}, w_out, tile)[0];  // (B, n, d)
  return mark(y, &mk.mlp_begin, marks_on);
}

at::Tensor LlamaModel::forward_logits(const at::Tensor& ids, int64_t pos0) {
  set_documents(nullptr);
  auto x = hidden_states(ids, torch::arange(pos0, pos0 + ids.size(1), at::TensorOptions().dtype(torch::kInt64)));
  const int head = static_cast<int>(cfg_.num_hidden_layers) + 1;
  x = unit_boundary(x, head, /*begin=*/false);
  if (units_) units_->forward_begin(head);
  x = rms_norm(x, w("model.norm.weight"), cfg_.rms_norm_eps);
  x = torch::linear(x, w(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"));
  if (units_) units_->forward_end(head);
  return unit_boundary(x, head, /*begin=*/true);
}

at::Tensor LlamaModel::forward_loss_sum(const at::Tensor& ids, const at::Tensor& labels, int64_t pos0) {
  return forward_loss_sum(ids, labels,
                          torch::arange(pos0, pos0 + ids.size(1), at::TensorOptions().dtype(torch::kInt64)));
}

void LlamaModel::set_documents(const DocumentMask* docs) {
  docs_ = docs ? *docs : DocumentMask();
  for (auto& o : attn_opts_) o.docs = docs ? &docs_ : nullptr;
  for (auto& o : recompute_opts_) o.docs = docs ? &docs_ : nullptr;
}

at::Tensor LlamaModel::forward_loss_sum(const at::Tensor& ids, const at::Tensor& labels, const at::Tensor& positions,
                                        const DocumentMask* docs) {
  const bool marks_on = tracer_ && tracer_->active() && torch::GradMode::is_enabled();
  set_documents(docs);
  // Packed documents: RoPE positions restart at every document, (B, n) (document_mask.hpp).
  auto x = hidden_states(ids, docs ? docs->positions(positions) : positions);
  // Stage 3: the final norm + lm_head are one gather unit, after the layers.
  const int head = static_cast<int>(cfg_.num_hidden_layers) + 1;
  x = unit_boundary(x, head, /*begin=*/false);
  if (units_) units_->forward_begin(head);
  at::Tensor loss = head_loss_sum(x, labels, marks_on);
  if (units_) units_->forward_end(head);
  return unit_boundary(loss, head, /*begin=*/true);
}

at::Tensor LlamaModel::head_loss_sum(const at::Tensor& x_in, const at::Tensor& labels, bool marks_on) {
  at::Tensor x = x_in;
  ULYSSES_RANGE(tracer_, Phase::Loss, Direction::Forward);
  mem::Scope logits_mem(mem::MemCategory::Logits);  // final norm, lm_head, logits, loss
  const at::Tensor head = w(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  if (mem_.loss_chunk_tokens > 0) {
    // lm_head + loss per tile of tokens, each tile's backward done now: no (B*n, V) tensor
    return tiled_logits_loss_sum(x, w("model.norm.weight"), cfg_.rms_norm_eps, head, labels, mem_.loss_chunk_tokens,
                                 tracer_);
  }
  x = mark(x, &marks_.head_end, marks_on);
  x = rms_norm(x, w("model.norm.weight"), cfg_.rms_norm_eps);
  auto logits = torch::linear(x, head);
  logits = mark(logits, &marks_.head_begin, marks_on);
  auto V = logits.size(-1);
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32).view({-1, V}), labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
}

}  // namespace ulysses
