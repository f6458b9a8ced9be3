// Causal attention of one rank's local heads over the whole sequence, with the kernel the
// run asks for: SDPA (flash / efficient on CUDA libtorch 2.x, the math kernel on 1.13) or a
// block-causal online-softmax kernel that keeps CPU memory O(N * block) instead of O(N^2).
// GQA: k and v may carry fewer heads than q (H % Hkv == 0); each kv head serves H/Hkv
// consecutive q heads, as Hugging Face's repeat_kv does.
//
// Shapes: B = batch, H = q heads, Hkv = kv heads, N = sequence, dh = head dim.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <torch/torch.h>

#include "document_mask.hpp"

namespace ulysses {

struct AttentionKernel {
  // FlashShapes: no math, only the allocations and saved tensors of flash attention on CUDA
  // (q, k, v, out, log-sum-exp) for meta-device dry runs of a GPU plan (flash_shapes.hpp).
  enum class Kind { Sdpa, Blocked, FlashShapes };
  Kind kind = Kind::Sdpa;
  int64_t block = 256;  // tokens per query/key block (Blocked only)
};

// q (B, H, N, dh); k, v (B, Hkv, N, dh) -> (B, H, N, dh), causal. Differentiable. `docs`
// (packed documents, document_mask.hpp; nullptr: one document): causal within each document
// only, over (B, N) global positions 0..N-1; it must outlive the backward.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionKernel& kernel, const DocumentMask* docs = nullptr);

// The blocked kernel itself (what causal_attention runs for Kind::Blocked off the meta device,
// where shapes stand in for it): q (B, H, N, dh); k, v (B, Hkv, N, dh) -> (B, H, N, dh).
at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t block,
                                    const DocumentMask* docs = nullptr);

// A varlen causal kernel: q, k, v (T, H, dh) over documents laid end to end, cu_seqlens
// (documents + 1) int32 on q's device, the longest document -> (T, H, dh).
using VarlenKernel = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const at::Tensor& cu_seqlens, int64_t max_seqlen)>;

// Packed documents through a varlen kernel (on CUDA libtorch 2.x, causal_attention's Sdpa
// kind runs compat::flash_varlen_causal here instead of SDPA with an N x N bias):
// q (B, H, N, dh); k, v (B, Hkv, N, dh) -> (B, H, N, dh), causal within each document of `docs`
// (its varlen layout: the B rows end to end).
at::Tensor varlen_document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const DocumentMask& docs, const VarlenKernel& kernel);

// The kernel for a run: train.attention (auto | sdpa | blocked) on a device. auto means
// Blocked on CPU and Sdpa on CUDA (flash).
AttentionKernel attention_kernel_for(const std::string& setting, int64_t block, bool on_cuda);

}  // namespace ulysses
