// Ring attention (issue 36), one rank's part: causal attention of this rank's q chunks over
// the whole ring's K/V, with the K/V blocks travelling round the ring (rank r sends to r+1
// and receives from r-1) while the current block is computed (double-buffered exchanges
// posted before the compute, waited after). Softmax statistics in fp32: a running max and
// sum in the forward, the log-sum-exp saved for the backward. GQA without expanding kv
// heads: q is viewed as (B, Hkv, G, n, dh) and broadcast against (B, Hkv, 1, m, dh).
// Backward as ring-flash-attention: the K/V blocks go round again and the dK/dV accumulators
// travel with them, one hop behind; after R hops every rank holds the gradients of its own
// K/V. Blocks are (q chunk, kv chunk) pairs of ring_geometry.hpp's layout; masked pairs
// (kv chunk after q chunk) are not computed.
//
// Shapes: B batch, H q heads, Hkv kv heads, n = local tokens (chunks_per_rank x N/chunks),
// dh head dim. q (B, H, n, dh); k, v (B, Hkv, n, dh); rows in the layout's local order.
//
// The transport is an interface, with a c10d implementation (Gloo on CPU; NCCL compiles the
// same calls) over a ring group's point-to-point send/recv (Comm's ring group, made from
// parallel.ring_size); tests run it on Gloo and in-process. The model runs it as the local
// attention of each Ulysses head chunk (UlyssesOptions::ring).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "ring_geometry.hpp"
#include "torch_compat.hpp"

namespace ulysses {

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Non-blocking: sends `send` to rank+1 and receives rank-1's tensor (same shape and dtype)
  // into `recv` under `tag`; the returned function waits for both. `send` must not be
  // written and `recv` not read before the wait.
  virtual std::function<void()> exchange(const at::Tensor& send, at::Tensor& recv, int tag) = 0;
};

struct RingForward {
  at::Tensor out;      // (B, H, n, dh), q's dtype
  at::Tensor lse;      // (B, H, n), fp32 log-sum-exp of each row's scaled scores
  int64_t blocks = 0;  // (q chunk, kv chunk) blocks with unmasked entries this rank computed
};

struct RingGrads {
  at::Tensor dq, dk, dv;  // shapes and dtypes of q, k, v
};

// Test-only fault: skip the K/V block of ring step `skip_step` (-1: none) in the forward.
struct RingFault {
  int64_t skip_step = -1;
};

RingForward ring_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const RingLayout& layout, RingTransport& transport, RingFault fault = {});

RingGrads ring_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingForward& fwd,
                                  const at::Tensor& dout, const RingLayout& layout, RingTransport& transport);

// Differentiable ring attention: forward as ring_attention_forward (out and the fp32
// log-sum-exp saved), backward as ring_attention_backward. `layout` and `transport` must
// outlive the backward; every ring rank must run the backward too (it talks to its peers).
// `fault` (tests only) skips a K/V block in the forward.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingLayout& layout,
                          RingTransport& transport, RingFault fault = {});

// A transport over a process group whose ranks are the ring (group rank = ring rank):
// non-blocking send to rank+1 and receive from rank-1 (c10d send/recv, in 1.13 and 2.x);
// the wait waits for both, each at most `timeout` (then c10d throws).
// Tested on Gloo only. On NCCL, separate send and recv calls make each rank create its
// (r, r+1) pair communicator before its (r-1, r) one, which can deadlock on the first
// exchange; the NCCL path needs the pair calls coalesced (batch_isend_irecv's
// start/endCoalescing, whose API differs between 1.13 and 2.x: torch_compat.hpp) first.
std::unique_ptr<RingTransport> make_group_ring_transport(c10::intrusive_ptr<compat::Backend> group,
                                                         std::chrono::milliseconds timeout);

// Global token positions rank r holds for a sequence of n_total tokens, in local order.
at::Tensor ring_positions(const RingLayout& layout, int64_t r, int64_t n_total);

}  // namespace ulysses
