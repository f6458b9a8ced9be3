// Cost model of one Ulysses training step, computed from a RunConfig before launch:
// parameter/optimizer and activation memory per rank, all-to-all traffic, FLOPs and a
// predicted step time from a user-supplied throughput. Torch-free and Qt-free.
//
// Notation (llm.c style): b = micro_batch_size, N = seq_length, P = sp_size, D = dp_size,
// W = P*D ranks, n = N/P local tokens, d = hidden_size, f = intermediate_size,
// L = num_hidden_layers, V = vocab_size, H = num_attention_heads, Hkv = num_key_value_heads,
// dh = head_dim (hidden_size / H unless the config sets it), qd = H*dh (the width of q and of
// the attention output: d, or another width with an explicit head_dim), G =
// gradient_accumulation_steps, e = bytes per activation element (4 float32, 2 bfloat16).
//
// Memory per rank, replicated (train.zero_stage 0):
//   float32:  params 4 + grads 4 + AdamW m 4 + v 4                    = 16 B / param
//   bfloat16: params 2 + grads 2 + fp32 master 4 + AdamW m 4 + v 4     = 16 B / param
// ZeRO over all W ranks (docs/ZERO.md), S = ceil(params / W) elements per rank:
//   stage 1: master and m, v of S elements; stage 2: + gradients of S; stage 3: + params of S,
//   plus the gathered weights (gathered_param_bytes): two consecutive gather units live at once
//   (the one computing and the prefetched next; units = embedding, each decoder layer, final
//   norm + lm_head) and one unit's full gradients before its reduce-scatter.
//   offload_optimizer moves master, m and v to CPU memory (an fp32 master copy of S there in
//   float32 training too: AdamW steps it on the CPU), offload_params the stage-3 param
//   shard: they are counted in host_bytes, not in the device's total.
// Activations per rank, per micro-batch:
//   per layer per local token: 4d + 4qd + 4dkv + 3f elements, where dkv = Hkv_sent*dh
//     4d   = layer input, attn-norm output, MLP input, MLP-norm output
//     4qd  = q before and after the all-to-all, attention output before and after the
//            head->seq all-to-all
//     4dkv = k and v before and after the seq->head all-to-all
//     3f   = gate, up and silu(gate)*up; with TiledMLP (mlp_chunk_tokens = c) none are kept,
//            one tile's b*min(n, c)*3f exist instead
//   activation_checkpointing = layer keeps only each layer's input (b*n*L*d; none on the
//   device with offload_activations) plus one layer's activations while backward recomputes
//   it; plus the embedding output (d) and the logits (V in dtype + V fp32 for the loss; with
//   loss_chunk_tokens = c, those of min(n, c) tokens);
//   attention itself keeps, per layer (one layer with checkpointing), by kernel:
//     math SDPA (train.attention = sdpa on CPU: libtorch 1.13's kernel) keeps the N x N
//       scores and probabilities of the local heads: 2 * b * (H/P) * N^2 elements (dtype e);
//     flash (CUDA: sdpa or auto) and blocked (auto or blocked on CPU) keep no N x N
//       matrix, only the log-sum-exp per query row: b * (H/P) * N fp32 values.
// All-to-all elements sent per rank per layer, forward (each rank keeps 1/P of its shard):
//   q: b*N*qd*(P-1)/P^2, k and v: b*N*dkv*(P-1)/P^2 each, o: b*N*qd*(P-1)/P^2
//   => b*N*(2qd + 2dkv)*(P-1)/P^2  (= 4*N*d*(P-1)/P^2 for MHA, fewer for GQA)
//   backward mirrors forward (dq, dk, dv head->seq, do seq->head): the same count; with
//   checkpointing the recomputed forward exchanges again (3x the forward per layer); every
//   micro-batch of a step exchanges (x G).
//   Hkv_sent = Hkv, or P when Hkv < P (kv heads replicated to one per rank before the a2a).
// Ring attention (parallel.ring_size R > 1; W = P*R*D, N/(P*R) local tokens): every head
// chunk c passes its kv heads hk_c (ulysses_geometry's chunk_attention_kv_heads) over N/R
// tokens round the ring: forward e*2*b*(N/R)*hk_c*dh*(R-1), backward the same plus the fp32
// dK/dV, 4*2*b*(N/R)*hk_c*dh*R; per layer and micro-batch, the forward again when
// checkpointing recomputes it (ring_bytes_per_rank, docs/RING.md).
// Gradient all-reduce over all W ranks (ring): 2*(W-1)/W * params * 4 B per rank (the
// gradients are one fp32 buffer in either dtype; the loss sum and token count are a separate
// 16-byte fp64 all-reduce, not counted).
// ZeRO (allreduce_bytes_per_step holds all of a stage's gradient and parameter collectives):
// stage 1 adds an all-gather of the fp32 parameters, (W-1)/W * params * 4; stage 2 is a
// reduce-scatter plus that all-gather (the all-reduce's bytes); stage 3 is, per micro-batch, as
// the engine runs it: every gather unit (embedding, each layer, norm + lm_head; S_u =
// ceil(numel_u / W) elements per rank) all-gathered for its forward, the layers again for their
// backward, every unit reduce-scattered, each (W-1) * S_u * 4 bytes (fp32 in either dtype); with
// tied embeddings the embedding is gathered once more for the head.
// FLOPs per step (all ranks together), T = b*N*D*G tokens per step:
//   dense     = 6 * matmul_params * T   (matmul_params = params - V*d embedding table,
//                                        unless tied, when lm_head uses it); 8 with
//                                        checkpointing (the forward runs twice)
//   attention = 12 * L * N^2 * qd * b*D*G  (QK^T and AV: 2 * 2*N^2*qd forward, x3 with
//                                        backward; 16 with checkpointing), halved for causal
//                                        and times CostOptions::attention_fraction (packed
//                                        documents: the pairs the document mask keeps)
// Predicted step time = FLOPs per rank / throughput + comm bytes / bandwidth (no overlap;
// bandwidth 0 = communication ignored). `ulysses-run --plan` measures one step's memory on
// the meta device; this is the formula that explains it.
#pragma once

#include <cstdint>
#include <string>

#include "device_decision.hpp"
#include "run_config.hpp"
#include "ulysses/common/units.hpp"

namespace ulysses::cost {

struct CostOptions {
  double tflops_per_rank = 100.0;  // sustained TFLOP/s a rank achieves (editable)
  double link_gbytes_per_s = 0.0;  // all-to-all bandwidth per rank, GB/s; 0 = ignore comm
  bool causal = true;              // Llama attention is causal
  // The share of causal attention's (query, key) pairs computed: data.kind = documents masks
  // attention at document borders, and the kernels skip fully masked blocks. -1 = from the
  // config's prepared folder (packed_attention_fraction, documents_manifest.hpp; 1 when the
  // kind is another or the folder cannot be read).
  double attention_fraction = -1;
  // Whether attention materializes the N x N scores (math SDPA). -1 = from the device the
  // run will use (decide_device, as the workers decide it) and train.attention: yes only for
  // train.attention = sdpa on a CPU rank; auto and blocked on CPU run the block-causal kernel
  // and flash runs on CUDA (no N x N).
  int math_attention = -1;
  // Host facts for that decision (build, visible GPUs); nullptr = this host. Local ranks
  // are always sp_size x dp_size (every rank runs on this host).
  const DeviceFacts* facts = nullptr;
};

struct CostEstimate {
  // Sizes
  int64_t params = 0;         // trainable parameters (ModelConfig::num_parameters)
  int64_t matmul_params = 0;  // parameters that take part in matmuls
  int64_t tokens_per_step = 0;
  int64_t local_tokens = 0;  // n = N/P
  // Memory per rank, bytes
  int64_t param_bytes = 0;           // model weights in the training dtype
  int64_t grad_bytes = 0;            // gradients in the training dtype
  int64_t master_bytes = 0;          // fp32 master weights (bfloat16 only)
  int64_t optimizer_bytes = 0;       // AdamW m and v, fp32
  int64_t gathered_param_bytes = 0;  // ZeRO-3: gathered weights and one unit's gradients in flight
  int64_t host_bytes = 0;            // offloaded state in CPU memory (per rank; not in total_bytes)
  int64_t zero_stage = 0;
  int64_t activation_bytes = 0;       // saved activations, including logits and attention scores
  int64_t attention_score_bytes = 0;  // part of activation_bytes from math attention (N x N)
  int64_t attention_lse_bytes = 0;    // part of activation_bytes: log-sum-exp of flash / blocked
  std::string device;                 // decided device of rank 0 ("cpu", "cuda:0")
  bool flash_attention = false;       // attention counted as flash (no N x N scores kept)
  int64_t static_bytes() const { return param_bytes + grad_bytes + master_bytes + optimizer_bytes; }
  int64_t total_bytes() const { return static_bytes() + gathered_param_bytes + activation_bytes; }
  // Communication per rank, bytes sent
  int64_t a2a_elements_per_layer_fwd = 0;
  int64_t a2a_bytes_per_layer_fwd = 0;
  int64_t a2a_bytes_per_step = 0;        // forward + backward, all layers
  int64_t allreduce_bytes_per_step = 0;  // gradient all-reduce (ring)
  // Ring attention (parallel.ring_size > 1): the K/V and dK/dV exchanges of every layer, head
  // chunk and micro-batch (ring_bytes_per_rank, docs/RING.md), the recompute's again.
  int64_t ring_bytes_per_step = 0;
  // Compute
  double dense_flops_per_step = 0;      // all ranks
  double attention_flops_per_step = 0;  // all ranks (after the document mask's saving)
  double attention_fraction = 1;        // the share of causal attention counted (CostOptions)
  double flops_per_step() const { return dense_flops_per_step + attention_flops_per_step; }
  double flops_per_rank = 0;
  double compute_s = 0;     // flops_per_rank / throughput
  double comm_s = 0;        // (a2a + allreduce + ring) bytes / bandwidth
  double step_s = 0;        // compute_s + comm_s
  double tokens_per_s = 0;  // tokens_per_step / step_s
};

// Estimates for a config that validate() accepts. Throws ConfigError when the sizes
// make no sense (non-positive, heads not dividing), so callers validate first.
CostEstimate estimate(const RunConfig& cfg, const CostOptions& opt = {});

// "1.50 GiB", "512 MiB", "3.20 KiB", "12 B": the one byte formatter (common/, units.hpp)
using ulysses::format_bytes;
// "1.23 TFLOP", "45.6 GFLOP"
std::string format_flops(double flops);
// "850 ms", "2.5 s", "3 min 20 s", "1 h 05 min"
std::string format_seconds(double s);

}  // namespace ulysses::cost
