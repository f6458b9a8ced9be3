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

}  // namespace ulysses
