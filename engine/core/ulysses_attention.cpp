// Ulysses attention: head-chunked, pipelined all-to-alls around causal SDPA.
#include "ulysses_attention.hpp"

#include <array>
#include <optional>

#include "torch_compat.hpp"
#include "ulysses_geometry.hpp"
#include "memory_categories.hpp"
#include "memory_labels.hpp"

namespace ulysses {
namespace {

using prof::Direction;
using prof::Phase;
using prof::RangeInfo;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// ---- layout helpers ---------------------------------------------------------------

// x (B, n, P*hx, dh): send buffer (P, B, n, len, dh) for heads [h0, h0 + len) of every
// rank's group of hx heads.
at::Tensor pack_seq_to_head(const at::Tensor& x, int64_t P, int64_t h0, int64_t len) {
  const auto B = x.size(0), n = x.size(1), dh = x.size(3);
  const auto hx = x.size(2) / P;
  return x.view({B, n, P, hx, dh}).narrow(3, h0, len).permute({2, 0, 1, 3, 4}).contiguous();
}
// The same written into dst (P, B, n, len, dh), a slice of a send buffer: no packed copy of
// its own before the message is put together.
void pack_seq_to_head_into(const at::Tensor& dst, const at::Tensor& x, int64_t P, int64_t h0, int64_t len) {
  const auto B = x.size(0), n = x.size(1), dh = x.size(3);
  const auto hx = x.size(2) / P;
  dst.copy_(x.view({B, n, P, hx, dh}).narrow(3, h0, len).permute({2, 0, 1, 3, 4}));
}
// recv (P, B, n, hc, dh) -> (B, hc, N, dh): the whole sequence for this rank's heads.
at::Tensor unpack_seq_to_head(const at::Tensor& r) {
  const auto P = r.size(0), B = r.size(1), n = r.size(2), hc = r.size(3), dh = r.size(4);
  return r.permute({1, 3, 0, 2, 4}).reshape({B, hc, P * n, dh});
}
// y (B, hc, N, dh) -> send buffer (P, B, n, hc, dh): sequence slice p goes to rank p.
at::Tensor pack_head_to_seq(const at::Tensor& y, int64_t P) {
  const auto B = y.size(0), hc = y.size(1), N = y.size(2), dh = y.size(3);
  return y.view({B, hc, P, N / P, dh}).permute({2, 0, 3, 1, 4}).contiguous();
}
// The same written into dst (P, B, n, hc, dh), a slice of a send buffer.
void pack_head_to_seq_into(const at::Tensor& dst, const at::Tensor& y, int64_t P) {
  const auto B = y.size(0), hc = y.size(1), N = y.size(2), dh = y.size(3);
  dst.copy_(y.view({B, hc, P, N / P, dh}).permute({2, 0, 3, 1, 4}));
}
// chunks of recv (P, B, n, hc, dh), chunk c holding heads [c*hc, (c+1)*hc) of every
// rank's group -> (B, n, P*h, dh) with h = sum of hc.
at::Tensor assemble_head_to_seq(const std::vector<at::Tensor>& chunks) {
  std::vector<at::Tensor> parts;
  for (const auto& r : chunks) parts.push_back(r.permute({1, 2, 0, 3, 4}));  // (B, n, P, hc, dh)
  auto cat = parts.size() == 1 ? parts[0] : at::cat(parts, 3);               // (B, n, P, h, dh)
  return cat.reshape({cat.size(0), cat.size(1), cat.size(2) * cat.size(3), cat.size(4)});
}

int64_t elem_bytes(const at::Tensor& t) { return static_cast<int64_t>(t.element_size()); }

// Tracks works on the SP group's queue (Gloo runs them one at a time, in order) so that
// each transfer's range starts when the previous one finished, not when it was queued.
struct CommTimeline {
  explicit CommTimeline(prof::Tracer* t) : tracer(t) {}
  prof::Tracer* tracer;
  int64_t last_done = 0;
  struct Pending {
    Comm::Work work;
    RangeInfo info;
    int64_t issued_ns;
    bool joins_next;      // part of one traced range with the next message (q, k, v sent apart)
    int64_t woke_ns = 0;  // when a wait that found the transfer unfinished returned (0: none did)
  };
  std::vector<Pending> pending;

  // The range's identity (pg, seq) and start are those of the collective as Comm issued it
  // (after any injected fault delay); joined messages keep the first one's identity.
  void issue(Comm& comm, at::Tensor& out, at::Tensor& in, const RangeInfo& info, bool joins_next = false) {
    prof::ScopedCorrelation corr(tracer, info);  // GPU: the NCCL kernels launched here carry `info`
    Comm::Work w = comm.all_to_all_async(out, in);
    RangeInfo ri = info;
    ri.pg = w.pg;
    ri.seq = w.seq;
    const int64_t t = w.issued_ns;
    pending.push_back({std::move(w), ri, t, joins_next, 0});
  }
  // Waits for p; when the transfer was still running, the rank was blocked in it until the wait
  // returned (the thread's wake-up included), and its range ends then, not at the completion
  // the transport's thread saw: no untraced gap after each blocking wait.
  static void wait_blocked(Pending& p) {
    const bool running = !p.work.done_ns || p.work.done_ns->load() == 0;
    p.work.wait();
    if (running && p.work.work) p.woke_ns = prof::Tracer::now_ns();
  }
  // Waits for work i and drops the process group's references to its tensors (Gloo's work holds
  // its send and receive buffers until it is destroyed), so the caller can free the send buffer
  // now rather than at flush(); the completion time stays for the range.
  void release(size_t i) {
    wait_blocked(pending[i]);
    pending[i].work.work.reset();
  }
  // Waits for every work and records them in issue order; a run of joined messages becomes
  // one range from the first one's start to the last one's completion.
  void flush() {
    if (!pending.empty() && pending.front().work.span) return flush_device();
    int64_t joined_start = -1, joined_first = -1;
    for (auto& p : pending) {
      wait_blocked(p);
      const int64_t done = std::max(p.woke_ns, p.work.done_ns ? p.work.done_ns->load() : prof::Tracer::now_ns());
      const int64_t start = std::max(p.issued_ns, last_done);
      last_done = std::max(last_done, done);
      if (p.joins_next) {
        if (joined_start < 0) {
          joined_start = start;
          joined_first = static_cast<int64_t>(&p - pending.data());
        }
        continue;
      }
      const int64_t s = joined_start >= 0 ? joined_start : start;
      joined_start = -1;
      RangeInfo info = p.info;
      if (joined_first >= 0) {  // identity of the first message of the joined range
        info.pg = pending[static_cast<size_t>(joined_first)].info.pg;
        info.seq = pending[static_cast<size_t>(joined_first)].info.seq;
        joined_first = -1;
      }
      if (tracer && tracer->active()) tracer->record_range(info, s, std::max(s, done));
    }
    pending.clear();
  }
  // GPU ranks: each range from its collectives' device marks (start of the first message,
  // end of the last of a joined run), known at the end of the step (Tracer::record_range_later).
  void flush_device() {
    std::shared_ptr<DeviceSpan> first;
    RangeInfo first_info;
    for (auto& p : pending) {
      p.work.wait();  // NCCL: the compute stream waits for the collective, the host does not
      if (!first) {
        first = p.work.span;
        first_info = p.info;
      }
      if (p.joins_next) continue;
      RangeInfo info = p.info;
      info.pg = first_info.pg;
      info.seq = first_info.seq;
      auto a = first, b = p.work.span;
      first.reset();
      if (!tracer || !tracer->active() || !a || !b) continue;
      tracer->record_range_later(info, [a, b](int64_t* s, int64_t* e) {
        int64_t s1 = 0, e1 = 0, s2 = 0, e2 = 0;
        if (!a->times(&s1, &e1) || !b->times(&s2, &e2)) return false;
        *s = s1;
        *e = std::max(s1, e2);
        return true;
      });
    }
    pending.clear();
  }
};

RangeInfo comm_info(Phase ph, Direction d, int32_t layer, int64_t h0, int64_t h1, int64_t c, int64_t bytes) {
  RangeInfo r;
  r.phase = ph;
  r.dir = d;
  r.layer = layer;
  r.head_begin = static_cast<int32_t>(h0);
  r.head_end = static_cast<int32_t>(h1);
  r.chunk = static_cast<int32_t>(c);
  r.bytes_sent = bytes;
  r.bytes_recv = bytes;
  return r;
}

// The layout work on the rank's own thread around the exchanges (packing a send buffer,
// assembling what arrived): a compute range of phase `other` (docs/TRACES.md), so that the
// time is neither untraced nor counted as communication or as the attention kernel.
RangeInfo layout_info(Direction d, int32_t layer) {
  RangeInfo r;
  r.phase = Phase::Other;
  r.dir = d;
  r.layer = layer;
  return r;
}

// Geometry shared by forward and backward: ulysses_geometry.hpp (torch-free, the same rules
// validate() checks) on the tensors' head counts. Local heads: h = H/P q heads, hk = Hk/P kv
// heads, G = h/hk q heads per kv head (local q head i uses local kv head i / G, as
// repeat_kv). Chunk c holds q heads [c*hc, (c+1)*hc) and needs kv heads
// [need_lo(c), need_hi(c)); a kv head travels seq->head with the first chunk that needs
// it (send range) and its dk/dv travel back with the last chunk that uses it
// (done range), accumulated over the chunks in between. Any hc works: a chunk may need
// no new kv head (G > hc) or several (hc > G), and a kv head may span chunks (then its q
// heads are paired with their kv heads by index: chunk_kv_index).
struct Geometry : UlyssesGeometry {
  int64_t Hk, h, hk, G, hc;
  int64_t sp_rank;
  Geometry(int64_t H_, int64_t Hk_, const UlyssesOptions& o)
      : UlyssesGeometry(ulysses_geometry(H_, Hk_, o.comm->sp_size(), o.head_chunks)) {
    TORCH_CHECK(ok(), "ulysses attention: ", refusal());
    TORCH_CHECK(!kv_replicated(), "ulysses attention: k and v carry ", Hk_, " kv heads, fewer than sp_size (", P,
                "); replicate them first (ulysses_geometry().replication)");
    sp_rank = o.comm->sp_rank();
    Hk = Hkv;
    h = local_q_heads;
    hk = local_kv_heads;
    G = q_per_kv;
    hc = chunk_q_heads;
  }
  int64_t head0(int64_t c) const { return sp_rank * h + c * hc; }
};

class UlyssesAttentionFn : public torch::autograd::Function<UlyssesAttentionFn> {
  // Forward's seq->head exchanges, one per chunk: the send buffers (freed once sent), the
  // receive buffers (one packed message, or q, k and v apart), the index of the chunk's first
  // pending message, and the kv heads each chunk brought, (B, nkv, N, dh): [send_lo, send_hi).
  struct SeqToHeadChunks {
    explicit SeqToHeadChunks(int64_t C)
        : recv_q(C), recv_k(C), recv_v(C), recv_qkv(C), work_of(C), send_of(C), k_got(C), v_got(C) {}
    std::vector<at::Tensor> recv_q, recv_k, recv_v, recv_qkv;
    std::vector<size_t> work_of;
    std::vector<std::vector<at::Tensor>> send_of;
    std::vector<at::Tensor> k_got, v_got;
  };

  // seq->head for every chunk, issued up front: chunk c+1 travels while c computes.
  static void issue_seq_to_head(const UlyssesOptions& o, const Geometry& g, CommTimeline& tl, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v, SeqToHeadChunks& x) {
    Comm& comm = *o.comm;
    for (int64_t c = 0; c < g.C; ++c) {
      const int64_t nkv = g.send_hi(c) - g.send_lo(c);
      const int64_t h0 = g.head0(c), h1 = h0 + g.hc;
      const bool one_message = o.fused_qkv || nkv == 0;
      // Each chunk's send buffers, freed as soon as its exchange is done (before its attention):
      // what attention reads is the receive buffer, viewed in head layout (a view for B = 1).
      auto& snd = x.send_of[static_cast<size_t>(c)];
      {
        prof::ScopedRange packing(o.tracer, layout_info(Direction::Forward, o.layer));
        mem::Label send_label("all-to-all send buffer");
        if (one_message) {
          // One message (P, B, n, hc + 2 nkv, dh): q, k and v packed straight into it.
          snd.push_back(at::empty({g.P, q.size(0), q.size(1), g.hc + 2 * nkv, q.size(3)}, q.options()));
          pack_seq_to_head_into(snd[0].narrow(3, 0, g.hc), q, g.P, g.hc * c, g.hc);
          if (nkv > 0) {
            pack_seq_to_head_into(snd[0].narrow(3, g.hc, nkv), k, g.P, g.send_lo(c), nkv);
            pack_seq_to_head_into(snd[0].narrow(3, g.hc + nkv, nkv), v, g.P, g.send_lo(c), nkv);
          }
        } else {  // (B, n, H, dh) -> (P, B, n, hc, dh) per tensor
          snd = {pack_seq_to_head(q, g.P, g.hc * c, g.hc), pack_seq_to_head(k, g.P, g.send_lo(c), nkv),
                 pack_seq_to_head(v, g.P, g.send_lo(c), nkv)};
        }
      }
      if (one_message) {
        x.recv_qkv[c] = mem::comm_buffer_like(snd[0]);
        auto info = comm_info(Phase::A2ASeqToHead, Direction::Forward, o.layer, h0, h1, c,
                              a2a_bytes(snd[0].numel(), elem_bytes(snd[0]), g.P));
        tl.issue(comm, x.recv_qkv[c], snd[0], info);
        x.work_of[c] = tl.pending.size() - 1;
      } else {
        // Three messages traced as one range: from the first's start to the last's end.
        x.recv_q[c] = mem::comm_buffer_like(snd[0]);
        x.recv_k[c] = mem::comm_buffer_like(snd[1]);
        x.recv_v[c] = mem::comm_buffer_like(snd[2]);
        const int64_t bytes = a2a_bytes(snd[0].numel() + snd[1].numel() + snd[2].numel(), elem_bytes(snd[0]), g.P);
        auto info = comm_info(Phase::A2ASeqToHead, Direction::Forward, o.layer, h0, h1, c, bytes);
        const size_t first = tl.pending.size();
        tl.issue(comm, x.recv_q[c], snd[0], info, /*joins_next=*/true);
        tl.issue(comm, x.recv_k[c], snd[1], info, /*joins_next=*/true);
        tl.issue(comm, x.recv_v[c], snd[2], info);
        x.work_of[c] = first;
      }
    }
  }

  // Waits for chunk c's q (and k, v), frees its send buffers and returns its attention's
  // inputs, detached leaves: q (B, hc, N, dh) and its kv heads [need_lo, need_hi), gathered
  // from the chunks that brought them.
  static std::array<at::Tensor, 3> arrived_chunk(const UlyssesOptions& o, const Geometry& g, CommTimeline& tl,
                                                 SeqToHeadChunks& x, int64_t c) {
    const size_t w0 = x.work_of[c];
    const size_t nw = x.recv_q[c].defined() ? 3 : 1;
    for (size_t i = 0; i < nw; ++i) tl.release(w0 + i);
    x.send_of[static_cast<size_t>(c)].clear();  // sent: freed before this chunk's attention
    prof::ScopedRange unpacking(o.tracer, layout_info(Direction::Forward, o.layer));
    at::Tensor qc;
    const int64_t nkv = g.send_hi(c) - g.send_lo(c);
    if (x.recv_qkv[c].defined()) {
      auto r = x.recv_qkv[c];
      qc = unpack_seq_to_head(r.narrow(3, 0, g.hc));  // (B, hc, N, dh)
      if (nkv > 0) {
        x.k_got[c] = unpack_seq_to_head(r.narrow(3, g.hc, nkv));  // (B, nkv, N, dh)
        x.v_got[c] = unpack_seq_to_head(r.narrow(3, g.hc + nkv, nkv));
      }
    } else {
      qc = unpack_seq_to_head(x.recv_q[c]);
      x.k_got[c] = unpack_seq_to_head(x.recv_k[c]);
      x.v_got[c] = unpack_seq_to_head(x.recv_v[c]);
    }
    auto gather = [&](const std::vector<at::Tensor>& got) {
      std::vector<at::Tensor> parts;
      for (int64_t c2 = 0; c2 <= c; ++c2) {
        const int64_t lo = std::max(g.need_lo(c), g.send_lo(c2)), hi = std::min(g.need_hi(c), g.send_hi(c2));
        if (hi > lo) parts.push_back(got[c2].narrow(1, lo - g.send_lo(c2), hi - lo));
      }
      return parts.size() == 1 ? parts[0] : at::cat(parts, 1);  // (B, need_hi - need_lo, N, dh)
    };
    return {qc.detach().requires_grad_(true), gather(x.k_got).detach().requires_grad_(true),
            gather(x.v_got).detach().requires_grad_(true)};
  }

  // Chunk c's attention, traced as its heads' attention range: (B, hc, N, dh).
  static at::Tensor chunk_attention(const UlyssesOptions& o, const Geometry& g, int64_t c, const at::Tensor& qd,
                                    const at::Tensor& kd, const at::Tensor& vd) {
    const int64_t h0 = g.head0(c);
    prof::RangeInfo ai;
    ai.phase = Phase::Attention;
    ai.dir = Direction::Forward;
    ai.layer = o.layer;
    ai.head_begin = static_cast<int32_t>(h0);
    ai.head_end = static_cast<int32_t>(h0 + g.hc);
    ai.chunk = static_cast<int32_t>(c);
    prof::ScopedRange r(o.tracer, ai);
    torch::AutoGradMode grad_on(true);
    // The kernels pair q head i with kv head i / (hc / nneed): right only when the chunk
    // holds whole groups or lies inside one. Otherwise (hc and G dividing neither way:
    // H 12, kv 4, hc 4 paired heads 3 and 7 with the wrong kv head; kv 6, hc 3 threw) each
    // q head gets its own kv head by index, and autograd sums the gradients back.
    const auto kv_index = g.chunk_kv_index(c);
    if (kv_index.empty()) return attention_core(qd, kd, vd, o, &ai);  // (B, hc, N, dh)
    const at::Tensor idx = at::tensor(kv_index, at::TensorOptions().dtype(at::kLong)).to(kd.device());
    return attention_core(qd, kd.index_select(1, idx), vd.index_select(1, idx), o, &ai);
  }

 public:
  static tensor_list forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v,
                             const UlyssesOptions* optp) {
    const UlyssesOptions& o = *optp;
    Comm& comm = *o.comm;
    Geometry g(q.size(2), k.size(2), o);
    CommTimeline tl{o.tracer};
    SeqToHeadChunks arriving(g.C);
    issue_seq_to_head(o, g, tl, q, k, v, arriving);

    std::vector<at::Tensor> out_recv(g.C);
    std::vector<at::Tensor> sends;
    tensor_list saved;  // per chunk: out, q, k, v of its attention (k, v: kv heads [need_lo, need_hi))
    for (int64_t c = 0; c < g.C; ++c) {
      const auto [qd, kd, vd] = arrived_chunk(o, g, tl, arriving, c);
      at::Tensor oc = chunk_attention(o, g, c, qd, kd, vd);
      saved.push_back(oc);
      saved.push_back(qd);
      saved.push_back(kd);
      saved.push_back(vd);
      // head->seq for this chunk, in flight while the next chunk computes
      {
        prof::ScopedRange packing(o.tracer, layout_info(Direction::Forward, o.layer));
        mem::Label send_label("all-to-all send buffer");
        sends.push_back(pack_head_to_seq(oc.detach(), g.P));
      }
      out_recv[c] = mem::comm_buffer_like(sends.back());
      auto info = comm_info(Phase::A2AHeadToSeq, Direction::Forward, o.layer, g.head0(c), g.head0(c) + g.hc, c,
                            a2a_bytes(sends.back().numel(), elem_bytes(oc), g.P));
      tl.issue(comm, out_recv[c], sends.back(), info);
    }
    tl.flush();
    sends.clear();  // sent: freed before the output is assembled
    at::Tensor out;
    {
      prof::ScopedRange assembling(o.tracer, layout_info(Direction::Forward, o.layer));
      mem::Label out_label("attention output");  // memory_labels.hpp: the peak table's name
      out = assemble_head_to_seq(out_recv);      // (B, n, H, dh)
      out_recv.clear();
    }
    ctx->saved_data["opt"] = reinterpret_cast<int64_t>(optp);
    ctx->saved_data["saved"] = saved;
    ctx->saved_data["kshape"] = k.sizes().vec();
    return {out};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const UlyssesOptions& o = *reinterpret_cast<const UlyssesOptions*>(ctx->saved_data["opt"].toInt());
    Comm& comm = *o.comm;
    auto saved = ctx->saved_data["saved"].toTensorList().vec();
    const auto kshape = ctx->saved_data["kshape"].toIntVector();
    at::Tensor gout = grads[0].contiguous();  // (B, n, H, dh)
    Geometry g(gout.size(2), kshape[2], o);
    CommTimeline tl{o.tracer};

    // grad of the output: seq->head for every chunk, issued up front
    std::vector<at::Tensor> sends, recv(g.C);
    for (int64_t c = 0; c < g.C; ++c) {
      {
        prof::ScopedRange packing(o.tracer, layout_info(Direction::Backward, o.layer));
        mem::Label send_label("all-to-all send buffer");
        sends.push_back(pack_seq_to_head(gout, g.P, c * g.hc, g.hc));
      }
      recv[c] = mem::comm_buffer_like(sends.back());
      auto info = comm_info(Phase::A2AHeadToSeq, Direction::Backward, o.layer, g.head0(c), g.head0(c) + g.hc, c,
                            a2a_bytes(sends.back().numel(), elem_bytes(gout), g.P));
      tl.issue(comm, recv[c], sends.back(), info);
    }
    std::vector<at::Tensor> dqkv_recv(g.C);
    std::vector<at::Tensor> dsends;
    at::Tensor dk_acc, dv_acc;  // (B, hk, N, dh) in fp32 (fp64 for double): kv grads summed over chunks
    for (int64_t c = 0; c < g.C; ++c) {
      tl.release(static_cast<size_t>(c));
      sends[static_cast<size_t>(c)] = at::Tensor();  // sent: freed before this chunk's attention backward
      at::Tensor go = unpack_seq_to_head(recv[c]);   // (B, hc, N, dh)
      at::Tensor oc = saved[4 * c], qd = saved[4 * c + 1], kd = saved[4 * c + 2], vd = saved[4 * c + 3];
      tensor_list d;
      {
        prof::RangeInfo ai;
        ai.phase = Phase::Attention;
        ai.dir = Direction::Backward;
        ai.layer = o.layer;
        ai.head_begin = static_cast<int32_t>(g.head0(c));
        ai.head_end = static_cast<int32_t>(g.head0(c) + g.hc);
        ai.chunk = static_cast<int32_t>(c);
        prof::ScopedRange r(o.tracer, ai);
        d = torch::autograd::grad({oc}, {qd, kd, vd}, {go});
      }
      const int64_t lo = g.need_lo(c), nneed = g.need_hi(c) - lo;
      const int64_t dlo = g.done_lo(c), ndone = g.done_hi(c) - dlo;
      at::Tensor dk, dv;  // (B, ndone, N, dh): gradients complete after this chunk
      if ((c * g.hc) % g.G == 0 && nneed == ndone) {
        // no other chunk uses this chunk's kv heads (the chunk starts and ends on a group)
        dk = d[1];
        dv = d[2];
      } else {
        if (!dk_acc.defined()) {
          const auto acc = d[1].scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
          dk_acc = at::zeros({d[1].size(0), g.hk, d[1].size(2), d[1].size(3)}, d[1].options().dtype(acc));
          dv_acc = at::zeros_like(dk_acc);
        }
        dk_acc.narrow(1, lo, nneed).add_(d[1]);
        dv_acc.narrow(1, lo, nneed).add_(d[2]);
        if (ndone > 0) {
          dk = dk_acc.narrow(1, dlo, ndone).to(d[1].scalar_type());
          dv = dv_acc.narrow(1, dlo, ndone).to(d[2].scalar_type());
        }
      }
      // head->seq of dq (and the finished dk, dv), in flight while the next chunk computes
      // One message (P, B, n, hc + 2 ndone, dh), dq, dk and dv packed straight into it.
      at::Tensor send;
      {
        prof::ScopedRange packing(o.tracer, layout_info(Direction::Backward, o.layer));
        mem::Label send_label("all-to-all send buffer");
        send = at::empty({g.P, d[0].size(0), d[0].size(2) / g.P, g.hc + 2 * ndone, d[0].size(3)}, d[0].options());
        pack_head_to_seq_into(send.narrow(3, 0, g.hc), d[0], g.P);
        if (ndone > 0) {
          pack_head_to_seq_into(send.narrow(3, g.hc, ndone), dk, g.P);
          pack_head_to_seq_into(send.narrow(3, g.hc + ndone, ndone), dv, g.P);
        }
      }
      d.clear();
      dk = dv = at::Tensor();
      dsends.push_back(send);
      dqkv_recv[c] = mem::comm_buffer_like(send);
      auto info = comm_info(Phase::A2ASeqToHead, Direction::Backward, o.layer, g.head0(c), g.head0(c) + g.hc, c,
                            a2a_bytes(send.numel(), elem_bytes(send), g.P));
      tl.issue(comm, dqkv_recv[c], dsends.back(), info);
    }
    tl.flush();
    dsends.clear();  // sent: freed before the gradients are assembled
    prof::ScopedRange assembling(o.tracer, layout_info(Direction::Backward, o.layer));
    mem::Label grad_label("dq, dk, dv");
    std::vector<at::Tensor> qparts, kparts, vparts;
    for (int64_t c = 0; c < g.C; ++c) {
      auto r = dqkv_recv[c];
      const int64_t ndone = g.done_hi(c) - g.done_lo(c);
      qparts.push_back(r.narrow(3, 0, g.hc));
      if (ndone > 0) {
        kparts.push_back(r.narrow(3, g.hc, ndone));
        vparts.push_back(r.narrow(3, g.hc + ndone, ndone));
      }
    }
    return {assemble_head_to_seq(qparts), assemble_head_to_seq(kparts), assemble_head_to_seq(vparts), at::Tensor()};
  }
};

// ---- standalone layout changes ------------------------------------------------------

class SeqToHeadFn : public torch::autograd::Function<SeqToHeadFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    const int64_t P = comm->sp_size();
    auto send = pack_seq_to_head(x.contiguous(), P, 0, x.size(2) / P);
    auto recv = mem::comm_buffer_like(send);
    comm->all_to_all(recv, send);
    return unpack_seq_to_head(recv).transpose(1, 2).contiguous();  // (B, N, h, dh)
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g);
};

class HeadToSeqFn : public torch::autograd::Function<HeadToSeqFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor y, Comm* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    const int64_t P = comm->sp_size();
    auto send = pack_head_to_seq(y.transpose(1, 2).contiguous(), P);  // y (B, N, h, dh)
    auto recv = mem::comm_buffer_like(send);
    comm->all_to_all(recv, send);
    return assemble_head_to_seq({recv}).contiguous();  // (B, n, P*h, dh)
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Comm* comm = reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
    return {SeqToHeadFn::apply(g[0], comm), at::Tensor()};
  }
};

tensor_list SeqToHeadFn::backward(AutogradContext* ctx, tensor_list g) {
  Comm* comm = reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
  return {HeadToSeqFn::apply(g[0], comm), at::Tensor()};
}

}  // namespace

at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const UlyssesOptions& opt,
                          const prof::RangeInfo* at) {
  if (opt.ring) {
    RingTrace trace;
    trace.tracer = opt.tracer;
    if (at) trace.info = *at;
    trace.info.layer = opt.layer;
    return ring_attention(q, k, v, opt.ring_layout, *opt.ring, opt.ring_fault, &trace, opt.docs);
  }
  return causal_attention(q, k, v, opt.kernel, opt.docs);
}

at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const UlyssesOptions& opt) {
  return UlyssesAttentionFn::apply(q.contiguous(), k.contiguous(), v.contiguous(), &opt)[0];
}

at::Tensor seq_to_head(const at::Tensor& x, Comm* comm) { return SeqToHeadFn::apply(x, comm); }
at::Tensor head_to_seq(const at::Tensor& x, Comm* comm) { return HeadToSeqFn::apply(x, comm); }

}  // namespace ulysses
