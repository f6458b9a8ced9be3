// Ulysses attention core: sequence-sharded q/k/v in, sequence-sharded attention output
// out, with the seq->head and head->seq all-to-alls in between. One autograd function
// whose backward runs the mirrored all-to-alls. Heads can be split into chunks so that
// the exchange of chunk i+1 is in flight while attention of chunk i computes; head_chunks
// may be any divisor of the local q heads, with GQA too (a kv head travels with the first
// chunk that needs it, its gradient with the last one that uses it).
//
// Shapes: B = batch, N = full sequence, P = sp_size, n = N/P, H = q heads,
// Hk = kv heads (already replicated to >= P when num_key_value_heads < P), dh = head dim.
#pragma once

#include <torch/torch.h>

#include "a2a_volume.hpp"
#include "comm.hpp"
#include "local_attention.hpp"
#include "ring_attention.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

struct UlyssesOptions {
  Comm* comm = nullptr;
  prof::Tracer* tracer = nullptr;
  int64_t head_chunks = 1;
  bool fused_qkv = true;  // one seq->head message per chunk for q, k, v (as ParallelConfig)
  int32_t layer = -1;
  AttentionKernel kernel;  // the local attention each chunk runs
  // Ring attention (parallel.ring_size > 1): each chunk's attention runs over the ring of
  // ranks holding the other parts of the sequence, with K/V blocks passed round (the
  // transport and layout must outlive the autograd graph). nullptr: local attention.
  RingTransport* ring = nullptr;
  RingLayout ring_layout;
  RingFault ring_fault;  // tests only: skip one ring block
  // Packed documents (document_mask.hpp; nullptr: one causal sequence): the mask of the whole
  // sequence. After the seq->head all-to-all every rank holds the whole sequence (or its ring
  // rank's chunks), so each chunk's attention takes it as is. Must outlive the backward.
  const DocumentMask* docs = nullptr;
};

// The attention of one head chunk: q (B, h, N, dh), k and v (B, hk, N, dh) -> (B, h, N, dh);
// ring attention over opt.ring when set, else causal attention with opt.kernel. `at` (the
// attention range's fields: layer, head range, chunk) labels the ring steps in the trace
// (opt.tracer); nullptr: the layer only.
at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const UlyssesOptions& opt,
                          const prof::RangeInfo* at = nullptr);

// q (B, n, H, dh), k and v (B, n, Hk, dh), RoPE already applied with global positions.
// Returns (B, n, H, dh): causal attention over the whole sequence, heads split over ranks.
at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const UlyssesOptions& opt);

// The two layout changes on their own, as autograd functions (backward = the reverse
// all-to-all). x (B, n, P*h, dh) -> (B, N, h, dh) and back.
at::Tensor seq_to_head(const at::Tensor& x, Comm* comm);
at::Tensor head_to_seq(const at::Tensor& x, Comm* comm);

// Bytes one rank sends (= receives) in an equal-split all-to-all: one definition, torch-free
// in engine/cost/a2a_volume.hpp (the studio's explainer shows the same figure).
using cost::a2a_bytes;

}  // namespace ulysses
