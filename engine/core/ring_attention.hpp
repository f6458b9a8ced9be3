// Ring attention (docs/RING.md), one rank's part: causal attention of this rank's q chunks over
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
// The transport is an interface, with two c10d implementations over a ring group (Comm's
// ring group, made from parallel.ring_size; parallel.ring_transport picks one): point-to-point
// send/recv (p2p, Gloo) and one all-to-all with split sizes per exchange (alltoall: Gloo, and
// NCCL, where it is the default); tests run both on Gloo and the kernel in-process. The
// model runs it as the local attention of each Ulysses head chunk (UlyssesOptions::ring).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "document_mask.hpp"
#include "ring_geometry.hpp"
#include "comm_timing.hpp"
#include "torch_compat.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

// What a trace needs of one exchange, filled by the transport when asked for (a traced step).
struct ExchangeStamp {
  int64_t issued_ns = 0;  // when this rank posted the send and the receive (prof::Tracer clock)
  // When both had completed (prof::Tracer clock), stored by a thread that waits for them (p2p)
  // or by the collective's future (alltoall), so that it is the transfer's end and not when
  // the computing thread came to wait; 0 = not known.
  std::shared_ptr<std::atomic<int64_t>> done_ns;
  int32_t pg = -1;   // the ring's process group id in traces (Comm::ring_pg); -1: none
  int64_t seq = -1;  // the exchange's number on this ring, the same on every ring rank
  // A GPU rank (a transport with a DeviceTimer): the device's marks around the exchange, whose
  // times the trace takes at the end of the step instead of issued_ns / done_ns (NCCL
  // completes a work's future at enqueue, so host clocks would time the issue).
  std::shared_ptr<DeviceSpan> span;
};

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Non-blocking: sends `send` to rank+1 and receives rank-1's tensor (same shape and dtype)
  // into `recv` under `tag`; the returned function waits for both. `send` must not be
  // written and `recv` not read before the wait. `stamp` (nullptr: untraced) is filled for
  // the trace; the exchanges are numbered whether traced or not.
  virtual std::function<void()> exchange(const at::Tensor& send, at::Tensor& recv, int tag, ExchangeStamp* stamp) = 0;
};

// Tracing of ring steps (docs/RING.md): every exchange becomes a `ring_step` range on the
// comm lane, from its posting to its completion, with the attention's layer, head range and
// chunk, the bytes this rank sent (= received) and the ring's collective identity (pg, seq),
// so the overlap and waiting analyses count ring traffic as they count all-to-alls.
struct RingTrace {
  prof::Tracer* tracer = nullptr;  // nullptr or inactive: nothing recorded
  prof::RangeInfo info;            // layer, head range, chunk of the attention served (phase, dir, bytes set here)
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

// `trace` (nullptr: untraced): forward exchanges recorded with Direction::Forward, backward
// ones with Direction::Backward. `docs` (packed documents, document_mask.hpp; nullptr: one
// causal sequence): the mask of the whole ring's sequence, (B, n x ring) global positions;
// blocks and score tiles with no unmasked entry are skipped, tiles crossing a document border
// masked (per hop: the kv chunks that arrived against this rank's q chunks).
RingForward ring_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const RingLayout& layout, RingTransport& transport, RingFault fault = {},
                                   const RingTrace* trace = nullptr, const DocumentMask* docs = nullptr);

RingGrads ring_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingForward& fwd,
                                  const at::Tensor& dout, const RingLayout& layout, RingTransport& transport,
                                  const RingTrace* trace = nullptr, const DocumentMask* docs = nullptr);

// Differentiable ring attention: forward as ring_attention_forward (out and the fp32
// log-sum-exp saved), backward as ring_attention_backward. `layout` and `transport` must
// outlive the backward; every ring rank must run the backward too (it talks to its peers).
// `fault` (tests only) skips a K/V block in the forward. `trace` is copied: the backward's
// exchanges are traced with the same tracer and attention fields.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingLayout& layout,
                          RingTransport& transport, RingFault fault = {}, const RingTrace* trace = nullptr,
                          const DocumentMask* docs = nullptr);

enum class RingTransportKind {
  P2P,       // a send to rank+1 and a receive from rank-1 per exchange (Gloo only)
  AllToAll,  // one all-to-all with split sizes on the ring group per exchange (Gloo, NCCL)
};

// parallel.ring_transport for the backend Comm decided ("gloo" or "nccl"): auto gives
// AllToAll on nccl and P2P elsewhere (ring_transport_for, ring_geometry.hpp); throws
// ConfigError for p2p on nccl and for an unknown setting.
RingTransportKind ring_transport_kind(const std::string& setting, const std::string& backend);

// A transport over a process group whose ranks are the ring (group rank = ring rank); the
// wait it returns waits at most `timeout` for the exchange (then c10d throws). `pg` is the
// ring's process group id in traces (Comm::ring_pg). Both kinds use c10d calls present in
// 1.13 and 2.x (send/recv; alltoall_base with split sizes) and send the same bytes.
//  * P2P: non-blocking send to rank+1 and receive from rank-1 (tags keep the K/V and dK/dV
//    exchanges apart). A traced exchange is waited for by a thread of its own (std::async),
//    which stamps the completion: c10d's send/recv works have no future. Not for NCCL:
//    separate send and recv make each rank create its (r, r+1) pair communicator before its
//    (r-1, r) one, which can deadlock on the first exchange.
//  * AllToAll: one alltoall_base on the ring group, this rank's whole buffer to rank+1 and
//    rank-1's into `recv`, every other split 0 (NCCL: grouped send/recv on the group's one
//    communicator). The tag is unused: collectives of a group match by issue order, the same
//    on every ring rank. Completion stamped by the work's future (as Comm's all-to-alls).
//    Tested on Gloo; no GPU has run it yet (docs/RING.md).
//  `timer` (AllToAll only; Comm::device_timer_ptr on a GPU rank): device marks around each
//    traced exchange (ExchangeStamp::span).
std::unique_ptr<RingTransport> make_group_ring_transport(c10::intrusive_ptr<compat::Backend> group,
                                                         std::chrono::milliseconds timeout, int32_t pg = -1,
                                                         RingTransportKind kind = RingTransportKind::P2P,
                                                         std::shared_ptr<DeviceTimer> timer = nullptr);

// What a ring exchange's wait passes to c10d's Work::wait: on NCCL no timeout (0, kNoTimeout),
// which only makes the current stream wait for the collective (NCCL's watchdog enforces the
// group timeout); a timeout there makes ProcessGroupNCCL poll on the host until the collective
// is done, blocking the host. Elsewhere (Gloo) the timeout.
std::chrono::milliseconds ring_wait_timeout(const std::string& backend, std::chrono::milliseconds timeout);

// Rank 0 of a ring of `size` for shape-only runs (the memory planner on the meta device):
// exchanges move nothing and the received buffer keeps its shape; allocations are as in a run.
std::unique_ptr<RingTransport> make_shape_only_ring_transport(int64_t size);

// Global token positions rank r holds for a sequence of n_total tokens, in local order.
at::Tensor ring_positions(const RingLayout& layout, int64_t r, int64_t n_total);

}  // namespace ulysses
