// The attention mask of packed documents (data.kind = "documents", documents.hpp): query t
// attends to key s when s <= t and s >= start[t], the first token of t's document, i.e.
// causal within each document only (Hugging Face's flattening collator with flash-attention's
// varlen kernel). Documents are contiguous, so start[] never decreases along a sequence and a
// block of queries [q0, q1) x keys [k0, k1) (global positions of the sequence) has:
//   an unmasked entry  iff  k0 <= q1 - 1  and  k1 - 1 >= start[q0]
//   no masked entry    iff  k1 - 1 <= q0  and  k0 >= start[q1 - 1]
// (over a batch: start[q0] of the row with the smallest, start[q1-1] of the row with the
// largest), which is what lets the kernels skip fully masked blocks and leave whole ones
// unmasked. Every query sees itself, so no row is ever fully masked.
//
// Shapes: B batch, N the whole sequence (global positions 0..N-1).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace ulysses {

// Flash-attention's varlen layout of a document mask: the B rows laid end to end (B*N tokens,
// row b's token t at b*N + t), each document (padding is one of its own) a causal sequence.
// cu_seqlens: where each document begins, then B*N (int32, as the kernel takes it);
// max_seqlen: the longest document.
struct VarlenLayout {
  std::vector<int32_t> cu_seqlens;
  int64_t max_seqlen = 0;
};

class DocumentMask {
 public:
  DocumentMask() = default;
  // start (B, N) int64: the index of the first token of each token's document.
  explicit DocumentMask(const at::Tensor& start);
  bool defined() const { return start_.defined(); }
  int64_t batch() const { return start_.size(0); }
  int64_t tokens() const { return start_.size(1); }
  const at::Tensor& start() const { return start_; }  // (B, N) int64 on the CPU

  // Block [q0, q1) x [k0, k1) in global positions: some entry unmasked in some row.
  bool live(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    return k0 <= q1 - 1 && k1 - 1 >= min_start_[static_cast<size_t>(q0)];
  }
  // No entry masked in any row (needs no mask at all).
  bool full(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    return k1 - 1 <= q0 && k0 >= max_start_[static_cast<size_t>(q1 - 1)];
  }
  // Row b alone: the same two tests.
  bool live(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    return k0 <= q1 - 1 && k1 - 1 >= at(b, q0);
  }
  bool full(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
    return k1 - 1 <= q0 && k0 >= at(b, q1 - 1);
  }
  int64_t at(int64_t b, int64_t t) const { return start_ptr_[b * tokens() + t]; }

  // True where query q0 + r may not see key k0 + c: (B, nq, nk) bool, or (nq, nk) for row b.
  at::Tensor masked(int64_t q0, int64_t nq, int64_t k0, int64_t nk, const c10::Device& dev) const;
  at::Tensor masked(int64_t b, int64_t q0, int64_t nq, int64_t k0, int64_t nk, const c10::Device& dev) const;
  // The same for any global positions qpos (nq), kpos (nk) int64: (B, nq, nk) bool on dev.
  at::Tensor masked(const at::Tensor& qpos, const at::Tensor& kpos, const c10::Device& dev) const;
  // Position ids that restart at every document, for the tokens at global positions
  // `positions` (n) int64: (B, n) = positions - start[:, positions].
  at::Tensor positions(const at::Tensor& positions) const;
  // Unmasked (query, key) pairs over the whole mask (every row); over B x N(N+1)/2 (causal)
  // it is the share of attention FLOPs a packed run does (bench_documents prints it).
  int64_t unmasked_pairs() const;
  // The varlen layout of this mask (computed once, at construction).
  const VarlenLayout& varlen() const { return varlen_; }

 private:
  at::Tensor start_;  // (B, N) int64 contiguous CPU
  const int64_t* start_ptr_ = nullptr;
  std::vector<int64_t> min_start_, max_start_;  // (N): over the rows
  VarlenLayout varlen_;
};

}  // namespace ulysses
