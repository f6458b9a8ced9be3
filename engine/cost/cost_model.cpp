// Cost model of one Ulysses training step (formulas in cost_model.hpp).
#include "cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "documents_manifest.hpp"
#include "ring_geometry.hpp"
#include "ulysses_geometry.hpp"
#include <cstdio>

namespace ulysses::cost {
namespace {
void check_sizes(const RunConfig& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  const auto& t = cfg.train;
  if (m.hidden_size <= 0 || m.num_attention_heads <= 0 || m.num_key_value_heads <= 0 || m.num_hidden_layers <= 0 ||
      m.vocab_size <= 0 || m.intermediate_size <= 0 || p.sp_size <= 0 || p.dp_size <= 0 || t.seq_length <= 0 ||
      t.micro_batch_size <= 0)
    throw ConfigError("cost model: model, parallel and train sizes must be positive");
  if ((m.explicit_head_dim == 0 && m.hidden_size % m.num_attention_heads != 0) ||
      m.num_attention_heads % p.sp_size != 0)
    throw ConfigError("cost model: hidden_size must divide by num_attention_heads and heads by sp_size");
}

// The symbols of cost_model.hpp's notation, read once from the config.
struct Symbols {
  explicit Symbols(const RunConfig& cfg) : m(cfg.model), p(cfg.parallel), t(cfg.train) {}
  const ModelConfig& m;
  const ParallelConfig& p;
  const TrainConfig& t;
  // Ring attention splits the sequence over sp x ring ranks; the ring ranks are further ranks.
  const int64_t R = std::max<int64_t>(1, p.ring_size);
  const int64_t b = t.micro_batch_size, N = t.seq_length, P = p.sp_size, D = p.dp_size, W = P * R * D;
  const int64_t d = m.hidden_size, f = m.intermediate_size, L = m.num_hidden_layers, V = m.vocab_size;
  const int64_t H = m.num_attention_heads, Hkv = m.num_key_value_heads, dh = m.head_dim();
  const int64_t qd = H * dh;  // q and attention-output width: d, or H x an explicit head_dim (Qwen3)
  const int64_t G = std::max<int64_t>(1, t.gradient_accumulation_steps);  // micro-batches per step
  const bool ckpt = t.activation_checkpointing == "layer";
  const bool bf16 = t.dtype == "bfloat16";
  const int64_t e = bf16 ? 2 : 4;
  // Stage 3's bytes per element: gathers, unit gradients, reduce-scatters (train.*_dtype, resolved)
  const int64_t ge = t.bf16_gathers() ? 2 : 4, ae = t.bf16_unit_grads() ? 2 : 4;
  const int64_t re = t.bf16_unit_grads() && t.grad_reduce_dtype == "bfloat16" ? 2 : 4;
  const int64_t Z = t.zero_stage;
  const int64_t n = N / (P * R);
  const int64_t hkv_sent = ulysses_geometry(H, Hkv, P).kv_heads_sent;  // Hkv, or P when replicated
  const int64_t dkv = hkv_sent * dh;
};

// Weights, gradients, master copy and AdamW state (16 B/param either way), sharded over the
// W ranks from the ZeRO stage on that shards each.
void add_state_memory(const Symbols& s, CostEstimate& c) {
  const auto& m = s.m;
  const auto& t = s.t;
  const int64_t Z = s.Z, W = s.W, V = s.V, d = s.d, L = s.L, S = (c.params + W - 1) / W;
  c.zero_stage = Z;
  c.param_bytes = (Z >= 3 ? S : c.params) * s.e;
  c.grad_bytes = (Z >= 2 ? S : c.params) * s.e;
  c.master_bytes = s.bf16 ? (Z >= 1 ? S : c.params) * 4 : 0;
  c.optimizer_bytes = (Z >= 1 ? S : c.params) * 8;
  if (Z >= 1 && t.offload_optimizer) {
    // The CPU holds the fp32 masters AdamW steps (also in float32 training, where the device's
    // parameters are the masters) and m, v.
    c.host_bytes += S * 4 + c.optimizer_bytes;
    c.master_bytes = c.optimizer_bytes = 0;
  }
  if (Z >= 3) {
    // Gather units in forward order: embedding, the layers, final norm + lm_head.
    const int64_t embed = V * d, layer = (c.params - embed - (m.tie_word_embeddings ? 0 : V * d) - d) / L;
    const int64_t head = d + (m.tie_word_embeddings ? embed : V * d);
    const int64_t pair = std::max({embed + layer, L > 1 ? 2 * layer : layer, layer + head});
    c.gathered_param_bytes = pair * s.ge + std::max({embed, layer, head}) * s.ae;
    if (t.offload_params) {
      c.host_bytes += c.param_bytes;
      c.param_bytes = 0;
    }
    // offload_gradients: the gradient shard beside the offloaded optimizer, in CPU memory
    if (t.offload_optimizer && t.offload_gradients) c.host_bytes += std::exchange(c.grad_bytes, 0);
  }
}

// Activations, and the device rank 0 will use (which decides the attention kernel).
void add_activation_memory(const RunConfig& cfg, const CostOptions& opt, const Symbols& s, CostEstimate& c) {
  const auto& t = s.t;
  const int64_t b = s.b, n = s.n, d = s.d, f = s.f, L = s.L, V = s.V, e = s.e, W = s.W;
  // TiledMLP (mlp_chunk_tokens) keeps no MLP intermediates: one tile's exist at a time.
  const bool tiled_mlp = t.mlp_chunk_tokens > 0;
  const int64_t per_token_layer = 4 * d + 4 * s.qd + 4 * s.dkv + (tiled_mlp ? 0 : 3 * f);
  const int64_t mlp_tile = tiled_mlp ? b * std::min(n, t.mlp_chunk_tokens) * 3 * f : 0;
  // Checkpointing keeps each layer's input (in CPU memory with offload_activations), and one
  // layer's activations while its backward recomputes it.
  const int64_t kept_layers =
      s.ckpt ? b * n * (t.offload_activations ? 0 : L * d) + b * n * per_token_layer : b * n * L * per_token_layer;
  // The tiled loss (loss_chunk_tokens) holds one chunk's logits at a time.
  const int64_t logit_tokens = t.loss_chunk_tokens > 0 ? std::min(n, t.loss_chunk_tokens) : n;
  c.activation_bytes = (kept_layers + mlp_tile + b * n * d) * e + b * logit_tokens * V * (e + 4);
  // Every rank of the run is local (ulysses-run), so rank 0 decides with W local ranks.
  DeviceFacts host = opt.facts ? *opt.facts : DeviceFacts::detect(0, static_cast<int>(W));
  host.local_rank = 0;
  host.local_world_size = static_cast<int>(W);
  const DeviceDecision dev = decide_device(cfg, host, nullptr);  // refusals are validation's business
  c.device = dev.device;
  // Math SDPA (N x N scores) only for train.attention=sdpa on a CPU rank; auto/blocked on CPU run
  // the block-causal kernel, CUDA runs flash.
  const bool math_attn = opt.math_attention >= 0 ? opt.math_attention != 0 : (!dev.cuda && t.attention == "sdpa");
  c.flash_attention = !math_attn;
  const int64_t attn_layers = s.ckpt ? 1 : L;  // checkpointed: one layer's at a time
  if (math_attn)
    c.attention_score_bytes = 2 * b * (s.H / s.P) * s.N * s.N * e * attn_layers;
  else
    c.attention_lse_bytes = b * (s.H / s.P) * s.N * 4 * attn_layers;
  c.activation_bytes += c.attention_score_bytes + c.attention_lse_bytes;
}

// All-to-all and ring attention bytes per rank and step.
void add_sequence_traffic(const Symbols& s, CostEstimate& c) {
  const int64_t b = s.b, N = s.N, P = s.P, R = s.R, L = s.L, G = s.G;
  // All-to-all: q, k, v seq->head and o head->seq, each rank keeps 1/P of its shard.
  // elements = b*N*(2d + 2dkv)*(P-1)/P^2, computed in integers as b*(N/P)*(2d+2dkv)*(P-1)/P.
  const int64_t shard = b * s.n * (2 * s.qd + 2 * s.dkv);  // this rank's q,k,v,o elements
  c.a2a_elements_per_layer_fwd = shard * (P - 1) / P;
  c.a2a_bytes_per_layer_fwd = c.a2a_elements_per_layer_fwd * s.e;
  // Forward and backward per micro-batch, and the forward again when checkpointing recomputes it.
  c.a2a_bytes_per_step = (s.ckpt ? 3 : 2) * L * c.a2a_bytes_per_layer_fwd * G;
  if (R > 1) {  // each head chunk's attention passes its kv heads round the ring (N/R tokens a block)
    const UlyssesGeometry g = ulysses_geometry(s.H, s.hkv_sent, P, std::max<int64_t>(1, s.p.head_chunks));
    int64_t fwd = 0, bwd = 0;
    for (int64_t ch = 0; ch < g.C; ++ch) {
      const RingBytes rb = ring_bytes_per_rank(R, b, N / R, g.chunk_attention_kv_heads(ch), s.dh, s.e);
      fwd += rb.forward;
      bwd += rb.backward;
    }
    c.ring_bytes_per_step = ((s.ckpt ? 2 : 1) * fwd + bwd) * L * G;
  }
}

// The gradients are one fp32 buffer whatever the dtype (the loss sum and token count: 16 bytes, apart).
// ZeRO: stage 1 all-reduces and then all-gathers the updated fp32 parameters; stage 2
// reduce-scatters and all-gathers (the all-reduce's bytes); stage 3 gathers each unit's
// weights for forward and again for backward and reduce-scatters its gradients, per micro-batch.
void add_data_parallel_traffic(const Symbols& s, CostEstimate& c) {
  const int64_t Z = s.Z, W = s.W, V = s.V, d = s.d, L = s.L;
  const double ring = W > 1 ? double(W - 1) / double(W) : 0.0;
  const double grads4 = double(c.params) * 4, params4 = double(c.params) * 4;
  c.allreduce_bytes_per_step = static_cast<int64_t>(Z == 0   ? 2.0 * ring * grads4
                                                    : Z == 1 ? 2.0 * ring * grads4 + ring * params4
                                                    : Z == 2 ? ring * grads4 + ring * params4
                                                             : 0.0);
  if (Z >= 3) {
    // As the engine runs stage 3 (docs/ZERO.md): pieces of S_u = ceil(numel_u / W) elements per
    // unit; per micro-batch every unit is gathered for its forward, the layers again for their
    // backward (head stays gathered, embedding needs none), every unit reduce-scattered: (W-1) x S_u
    // elements each, in ge and re bytes. Tied embeddings: the head's use gathers the embedding too.
    const int64_t embed = V * d, head = d + (s.m.tie_word_embeddings ? 0 : V * d);
    const int64_t layer = (c.params - embed - head) / L;
    auto piece = [&](int64_t numel) { return (numel + W - 1) / W; };
    const int64_t tied = s.m.tie_word_embeddings ? piece(embed) : 0;
    const int64_t all = piece(embed) + L * piece(layer) + piece(head);
    c.allreduce_bytes_per_step = s.G * (W - 1) * (s.ge * (all + L * piece(layer) + tied) + s.re * all);
  }
}

// FLOPs, and the predicted times from the options' throughput and bandwidth.
void add_flops_and_time(const RunConfig& cfg, const CostOptions& opt, const Symbols& s, CostEstimate& c) {
  const int64_t N = s.N;
  // Checkpointing runs each layer's forward twice: 8 instead of 6 FLOPs per parameter and token
  // (the lm_head is not recomputed; counted with the layers, a small over-estimate).
  c.dense_flops_per_step = (s.ckpt ? 8.0 : 6.0) * double(c.matmul_params) * double(c.tokens_per_step);
  c.attention_fraction = opt.attention_fraction >= 0 ? opt.attention_fraction : documents_attention_fraction(cfg);
  c.attention_flops_per_step = (s.ckpt ? 16.0 : 12.0) * double(s.L) * double(N) * double(N) * double(s.qd) *
                               double(s.b * s.D * s.G) * (opt.causal ? 0.5 : 1.0) * c.attention_fraction;
  c.flops_per_rank = c.flops_per_step() / double(s.W);
  c.compute_s = opt.tflops_per_rank > 0 ? c.flops_per_rank / (opt.tflops_per_rank * 1e12) : 0.0;
  c.comm_s = opt.link_gbytes_per_s > 0
                 ? double(c.a2a_bytes_per_step + c.allreduce_bytes_per_step + c.ring_bytes_per_step) /
                       (opt.link_gbytes_per_s * 1e9)
                 : 0.0;
  c.step_s = c.compute_s + c.comm_s;
  c.tokens_per_s = c.step_s > 0 ? double(c.tokens_per_step) / c.step_s : 0.0;
}
}  // namespace

CostEstimate estimate(const RunConfig& cfg, const CostOptions& opt) {
  check_sizes(cfg);
  const Symbols s(cfg);
  CostEstimate c;
  c.params = s.m.num_parameters();
  c.matmul_params = s.m.tie_word_embeddings ? c.params : c.params - s.V * s.d;
  c.tokens_per_step = s.b * s.N * s.D * s.G;
  c.local_tokens = s.n;
  add_state_memory(s, c);
  add_activation_memory(cfg, opt, s, c);
  add_sequence_traffic(s, c);
  add_data_parallel_traffic(s, c);
  add_flops_and_time(cfg, opt, s, c);
  return c;
}

std::string format_flops(double flops) {
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int u = 0;
  double v = flops;
  while (std::fabs(v) >= 1000.0 && u < 6) {
    v /= 1000.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 ? "%.0f %s" : "%.3g %s", v, units[u]);
  return buf;
}

std::string format_seconds(double s) {
  char buf[64];
  if (!(s >= 0) || std::isinf(s)) return "-";
  if (s < 1.0)
    std::snprintf(buf, sizeof buf, "%.0f ms", s * 1e3);
  else if (s < 60.0)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600.0)
    std::snprintf(buf, sizeof buf, "%d min %02d s", int(s) / 60, int(s) % 60);
  else if (s < 1e9)  // int(s) of more than 2^31 is undefined ("-596523 h" for a run.json's 1e20)
    std::snprintf(buf, sizeof buf, "%d h %02d min", int(s) / 3600, (int(s) % 3600) / 60);
  else
    std::snprintf(buf, sizeof buf, "%.3g h", s / 3600.0);
  return buf;
}

}  // namespace ulysses::cost
