// Shape-only stand-in for flash attention (CUDA SDPA) in meta-device dry runs: the memory
// planner runs a GPU run's forward and backward on `meta`, where the CPU math SDPA would
// count the N x N probabilities flash never stores. This function allocates and saves
// exactly what the CUDA path does, computes nothing:
//   before the kernel: k, v expanded to H heads (GQA), as causal_attention's expand_kv
//                      materializes them for SDPA;
//   forward:  out (B, H, N, dh) in q's dtype + log-sum-exp (B, H, N) fp32;
//             saved for backward: q, k, v (expanded), out, lse;
//   backward: dq, dk, dv (B, H, N, dh) + the kernel's fp32 scratch: dq accumulator
//             (B, H, N, dh) and softmax_d (B, H, N), freed when backward returns.
// Shapes: B batch, H q heads, Hkv kv heads, N sequence, dh head dim.
#pragma once

#include <torch/torch.h>

namespace ulysses {

// q (B, H, N, dh); k, v (B, Hkv, N, dh) with H % Hkv == 0 -> (B, H, N, dh), values undefined.
at::Tensor flash_shapes_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The kernels shape_attention stands in for (causal_attention maps its AttentionKernel::Kind,
// local_attention.hpp, onto these).
enum class ShapeKernel { Sdpa, Blocked, FlashShapes };

// Attention on meta tensors, counted as each kernel holds memory (libtorch 1.13's C++ has no
// meta kernels for the math SDPA's logical_not / where, nor repeat_interleave):
//   FlashShapes: flash_shapes_attention above;
//   Sdpa (the math kernel of a CPU run): the same composite on meta-capable ops: q*scale,
//     scores = q k^T (B, H, N, N), causal masked_fill, softmax (saved), probs v;
//   Blocked: the block-causal online softmax keeps what flash keeps (q, k, v, out, fp32
//     log-sum-exp) plus one (B, H, block, block) fp32 score tile at a time.
// k and v are expanded to H heads first in every case, as expand_kv materializes them.
at::Tensor shape_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ShapeKernel kind,
                           int64_t block);

// Embedding lookup for meta tensors (libtorch's C++ has no meta kernel for index_select):
// weight (V, d), ids (B, n) -> (B, n, d) in weight's dtype, values undefined; saves nothing
// but the ids (as the real embedding does); backward allocates the dense (V, d) weight
// gradient as embedding_dense_backward does.
at::Tensor embedding_shapes(const at::Tensor& weight, const at::Tensor& ids);

}  // namespace ulysses
