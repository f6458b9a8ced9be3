#include "ring_attention.hpp"
#include "memory_categories.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace ulysses {
namespace {

constexpr int kTagKv = 36;
constexpr int kTagDkv = 37;

// Local q rows of chunk slot i: [i*c, (i+1)*c).
at::Tensor slot(const at::Tensor& t, int64_t i, int64_t c) { return t.narrow(-2, i * c, c); }

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingLayout& layout,
                  const RingTransport& transport) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) throw std::invalid_argument("ring attention: q, k, v must be 4-D");
  if (k.sizes() != v.sizes()) throw std::invalid_argument("ring attention: k and v shapes differ");
  if (q.size(1) % k.size(1) != 0) throw std::invalid_argument("ring attention: q heads not a multiple of kv heads");
  if (q.size(2) != k.size(2) || q.size(2) % layout.chunks_per_rank() != 0)
    throw std::invalid_argument("ring attention: local tokens differ between q and k or do not split in chunks");
  if (transport.size() != layout.ring) throw std::invalid_argument("ring attention: transport size != ring size");
}

void check_ring_documents(const at::Tensor& q, const RingLayout& layout, const DocumentMask* docs) {
  if (docs && (docs->batch() != q.size(0) || docs->tokens() != q.size(2) * layout.ring))
    throw std::invalid_argument("ring attention: the document mask covers " + std::to_string(docs->tokens()) +
                                " tokens, the ring " + std::to_string(q.size(2) * layout.ring));
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Calls f(i0, ti, j0, tj) for the score tiles of one c x c block, `tile` rows and columns at
// most: every tile, or with `diag` (q chunk == kv chunk) only those with an entry on or below
// the diagonal (column j0 + s <= row i0 + r for some entry).
// On the meta device (the memory planner) only the first, largest tile runs: every tile
// allocates the same, and a million-token plan would otherwise dispatch millions of tiles.
template <class F>
void for_each_tile(int64_t c, int64_t tile, bool diag, bool meta, F&& f) {
  const int64_t t = std::max<int64_t>(1, std::min(tile, c));
  if (meta) return f(0, t, 0, t);
  for (int64_t i0 = 0; i0 < c; i0 += t) {
    const int64_t ti = std::min(t, c - i0), jend = diag ? i0 + ti : c;
    for (int64_t j0 = 0; j0 < jend; j0 += t) f(i0, ti, j0, std::min(t, jend - j0));
  }
}

// The causal mask of tile (i0.., j0..) of a diagonal block: entry (r, s) is masked when
// j0 + s > i0 + r, i.e. s - r >= i0 - j0 + 1.
at::Tensor causal_mask(int64_t ti, int64_t tj, int64_t i0, int64_t j0, const c10::Device& dev) {
  return torch::ones({ti, tj}, torch::TensorOptions().dtype(torch::kBool).device(dev)).triu(i0 - j0 + 1);
}

// Whether the (q chunk, kv chunk) block of chunk size c has an unmasked entry: causal (kv
// chunk not after the q chunk), and with packed documents some key in a query's document.
bool block_live(const DocumentMask* docs, int64_t q_chunk, int64_t kv_chunk, int64_t c) {
  if (!docs) return kv_chunk <= q_chunk;
  return docs->live(q_chunk * c, (q_chunk + 1) * c, kv_chunk * c, (kv_chunk + 1) * c);
}

// Packed documents: a score tile of queries [q0, q0+ti) x keys [k0, k0+tj) (global positions)
// is skipped (fully masked), computed whole, or masked with (B, 1, 1, ti, tj). Without
// documents: never skipped, no mask here (the causal mask of diagonal tiles applies).
struct TileMask {
  bool skip = false;
  at::Tensor mask;
};
TileMask tile_mask(const DocumentMask* docs, int64_t q0, int64_t ti, int64_t k0, int64_t tj, const c10::Device& dev) {
  TileMask t;
  if (!docs) return t;
  if (!docs->live(q0, q0 + ti, k0, k0 + tj)) {
    t.skip = true;
    return t;
  }
  if (!docs->full(q0, q0 + ti, k0, k0 + tj)) t.mask = docs->masked(q0, ti, k0, tj, dev).view({-1, 1, 1, ti, tj});
  return t;
}

class GroupRingTransport : public RingTransport {
 public:
  GroupRingTransport(c10::intrusive_ptr<compat::Backend> group, std::chrono::milliseconds timeout, int32_t pg)
      : group_(std::move(group)), timeout_(ring_wait_timeout(group_->getBackendName(), timeout)), pg_(pg) {}
  int64_t rank() const override { return group_->getRank(); }
  int64_t size() const override { return group_->getSize(); }
  std::function<void()> exchange(const at::Tensor& send, at::Tensor& recv, int tag, ExchangeStamp* stamp) override {
    const int n = group_->getSize(), r = group_->getRank();
    const int64_t seq = seq_++;
    const int64_t issued = prof::Tracer::now_ns();
    auto sends = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{send});
    auto recvs = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{recv});
    auto ws = group_->send(*sends, (r + 1) % n, tag);
    auto wr = group_->recv(*recvs, (r - 1 + n) % n, tag);
    const std::chrono::milliseconds timeout = timeout_;
    if (!stamp) {
      return [ws, wr, sends, recvs, timeout] {
        wr->wait(timeout);
        ws->wait(timeout);
      };
    }
    stamp->issued_ns = issued;
    stamp->pg = pg_;
    stamp->seq = seq;
    stamp->done_ns = std::make_shared<std::atomic<int64_t>>(0);
    auto done = std::make_shared<std::shared_future<void>>(
        std::async(std::launch::async, [ws, wr, timeout, d = stamp->done_ns] {
          wr->wait(timeout);
          ws->wait(timeout);
          d->store(prof::Tracer::now_ns());
        }));
    return [done, sends, recvs] { done->get(); };  // rethrows the waiting thread's timeout
  }

 private:
  c10::intrusive_ptr<compat::Backend> group_;
  std::chrono::milliseconds timeout_;
  int32_t pg_;
  int64_t seq_ = 0;
};

// The same exchange as ONE collective of the ring group: an all-to-all with split sizes in
// which this rank's whole buffer goes to rank+1 and rank-1's whole buffer comes in, every other
// split 0. NCCL runs it as grouped send/recv on the ring group's single communicator (no pair
// communicators, so none of p2p's cyclic lazy creation); Gloo runs it as alltoallv. The
// exchange's (pg, seq) is the ring group's collective sequence: this transport is the only
// user of the group and every ring rank posts the same exchanges in the same order. bfloat16
// travels as float16 (same bytes; 1.13's Gloo has no bfloat16 all-to-all, as Comm::all_to_all).
class AllToAllRingTransport : public RingTransport {
 public:
  AllToAllRingTransport(c10::intrusive_ptr<compat::Backend> group, std::chrono::milliseconds timeout, int32_t pg,
                        std::shared_ptr<DeviceTimer> timer)
      : group_(std::move(group)),
        timeout_(ring_wait_timeout(group_->getBackendName(), timeout)),
        pg_(pg),
        timer_(std::move(timer)) {}
  int64_t rank() const override { return group_->getRank(); }
  int64_t size() const override { return group_->getSize(); }
  std::function<void()> exchange(const at::Tensor& send, at::Tensor& recv, int, ExchangeStamp* stamp) override {
    if (!send.is_contiguous() || !recv.is_contiguous() || send.numel() != recv.numel() ||
        send.scalar_type() != recv.scalar_type())
      throw std::invalid_argument("ring all-to-all: send and recv must be contiguous, of one size and dtype");
    const int n = group_->getSize(), r = group_->getRank();
    const int64_t seq = seq_++;
    at::Tensor in = send.reshape({-1}), out = recv.view({-1});
    if (in.scalar_type() == at::kBFloat16) {
      in = in.view(at::kHalf);
      out = out.view(at::kHalf);
    }
    std::vector<int64_t> in_splits(n, 0), out_splits(n, 0);
    in_splits[(r + 1) % n] = in.numel();
    out_splits[(r - 1 + n) % n] = out.numel();
    auto done = std::make_shared<std::atomic<int64_t>>(0);
    const int64_t issued = prof::Tracer::now_ns();
    std::shared_ptr<DeviceSpan> span = stamp && timer_ ? timer_->start() : nullptr;
    auto work = group_->alltoall_base(out, in, out_splits, in_splits);
    if (span) timer_->end(*span, *work);
    if (stamp) {
      stamp->span = span;
      stamp->issued_ns = issued;
      stamp->pg = pg_;
      stamp->seq = seq;
      stamp->done_ns = done;
      // Completion stamped by the work's own future where it has one (as Comm's all-to-alls).
      if (auto fut = work->getFuture())
        fut->addCallback([done](c10::ivalue::Future&) { done->store(prof::Tracer::now_ns()); });
    }
    const std::chrono::milliseconds timeout = timeout_;
    return [work, in, out, done, timeout] {
      work->wait(timeout);
      int64_t zero = 0;
      done->compare_exchange_strong(zero, prof::Tracer::now_ns());
    };
  }

 private:
  c10::intrusive_ptr<compat::Backend> group_;
  std::chrono::milliseconds timeout_;
  int32_t pg_;
  int64_t seq_ = 0;
  std::shared_ptr<DeviceTimer> timer_;
};

// Posts one exchange; traced (an active tracer), its wait also records it as a ring_step range.
// K/V exchanges go on the "ring kv" row, dK/dV ones on "ring dkv": the two cross in time.
std::function<void()> post(RingTransport& t, const at::Tensor& send, at::Tensor& recv, int tag, const RingTrace* trace,
                           prof::Direction dir) {
  if (!trace || !trace->tracer || !trace->tracer->active()) return t.exchange(send, recv, tag, nullptr);
  auto stamp = std::make_shared<ExchangeStamp>();
  std::function<void()> wait = t.exchange(send, recv, tag, stamp.get());
  prof::RangeInfo info = trace->info;
  info.phase = prof::Phase::RingStep;
  info.dir = dir;
  info.bytes_sent = info.bytes_recv = static_cast<int64_t>(send.nbytes());
  info.pg = stamp->pg;
  info.seq = stamp->seq;
  prof::Tracer* tracer = trace->tracer;
  const int32_t lane = tag == kTagDkv ? prof::Tracer::kRingGradLane : prof::Tracer::kRingLane;
  return [wait, stamp, info, tracer, lane] {
    wait();
    if (auto span = stamp->span) {  // a GPU rank: the device's times, at the end of the step
      tracer->record_range_later(
          info, [span](int64_t* s, int64_t* e) { return span->times(s, e); }, lane);
      return;
    }
    const int64_t seen = stamp->done_ns ? stamp->done_ns->load() : 0;
    const int64_t done = seen > 0 ? seen : prof::Tracer::now_ns();
    tracer->record_range(info, stamp->issued_ns, std::max(stamp->issued_ns, done), lane);
  };
}

// One ring step's block attention as a range of its own (phase attention, inside the caller's
// attention range), so that the time spent waiting for the next K/V block, between these
// ranges, is not counted as compute: the overlap analysis counts only leaf ranges as compute.
std::unique_ptr<prof::ScopedRange> block_range(const RingTrace* trace, prof::Direction dir) {
  if (!trace || !trace->tracer || !trace->tracer->active()) return nullptr;
  prof::RangeInfo info = trace->info;
  info.phase = prof::Phase::Attention;
  info.dir = dir;
  info.bytes_sent = info.bytes_recv = 0;
  info.pg = -1;
  info.seq = -1;
  return std::make_unique<prof::ScopedRange>(trace->tracer, info);
}

class RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v,
                            const RingLayout* layout, RingTransport* transport, int64_t skip_step,
                            const RingTrace* trace, const DocumentMask* docs) {
    RingFault fault;
    fault.skip_step = skip_step;
    RingForward f = ring_attention_forward(q, k, v, *layout, *transport, fault, trace, docs);
    ctx->saved_data["layout"] = reinterpret_cast<int64_t>(layout);
    ctx->saved_data["docs"] = reinterpret_cast<int64_t>(docs);
    ctx->saved_data["transport"] = reinterpret_cast<int64_t>(transport);
    if (trace && trace->tracer) {  // the backward's exchanges: same tracer and attention fields
      ctx->saved_data["tracer"] = reinterpret_cast<int64_t>(trace->tracer);
      ctx->saved_data["trace_fields"] =
          std::vector<int64_t>{trace->info.layer, trace->info.head_begin, trace->info.head_end, trace->info.chunk};
    }
    ctx->save_for_backward({q, k, v, f.out, f.lse});
    return f.out;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto* layout = reinterpret_cast<const RingLayout*>(ctx->saved_data["layout"].toInt());
    auto* transport = reinterpret_cast<RingTransport*>(ctx->saved_data["transport"].toInt());
    auto saved = ctx->get_saved_variables();
    RingForward f{saved[3], saved[4]};
    RingTrace trace;
    if (ctx->saved_data.count("tracer")) {
      trace.tracer = reinterpret_cast<prof::Tracer*>(ctx->saved_data["tracer"].toInt());
      const auto fields = ctx->saved_data["trace_fields"].toIntVector();
      trace.info.layer = static_cast<int32_t>(fields[0]);
      trace.info.head_begin = static_cast<int32_t>(fields[1]);
      trace.info.head_end = static_cast<int32_t>(fields[2]);
      trace.info.chunk = static_cast<int32_t>(fields[3]);
    }
    const auto* docs = reinterpret_cast<const DocumentMask*>(ctx->saved_data["docs"].toInt());
    RingGrads g = ring_attention_backward(saved[0], saved[1], saved[2], f, grads[0].contiguous(), *layout, *transport,
                                          &trace, docs);
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingLayout& layout,
                          RingTransport& transport, RingFault fault, const RingTrace* trace, const DocumentMask* docs) {
  return RingAttentionFn::apply(q, k, v, &layout, &transport, fault.skip_step, trace, docs);
}

std::unique_ptr<RingTransport> make_group_ring_transport(c10::intrusive_ptr<compat::Backend> group,
                                                         std::chrono::milliseconds timeout, int32_t pg,
                                                         RingTransportKind kind, std::shared_ptr<DeviceTimer> timer) {
  if (kind == RingTransportKind::AllToAll)
    return std::make_unique<AllToAllRingTransport>(std::move(group), timeout, pg, std::move(timer));
  return std::make_unique<GroupRingTransport>(std::move(group), timeout, pg);
}

RingTransportKind ring_transport_kind(const std::string& setting, const std::string& backend) {
  return ring_transport_for(setting, backend) == "alltoall" ? RingTransportKind::AllToAll : RingTransportKind::P2P;
}

std::chrono::milliseconds ring_wait_timeout(const std::string& backend, std::chrono::milliseconds timeout) {
  return backend == "nccl" ? std::chrono::milliseconds(0) : timeout;  // 0: c10d's kNoTimeout
}

std::unique_ptr<RingTransport> make_shape_only_ring_transport(int64_t size) {
  class ShapeOnly : public RingTransport {
   public:
    explicit ShapeOnly(int64_t n) : n_(n) {}
    int64_t rank() const override { return 0; }
    int64_t size() const override { return n_; }
    std::function<void()> exchange(const at::Tensor&, at::Tensor&, int, ExchangeStamp*) override {
      return [] {};
    }

   private:
    int64_t n_;
  };
  return std::make_unique<ShapeOnly>(size);
}

at::Tensor ring_positions(const RingLayout& layout, int64_t r, int64_t n_total) {
  const int64_t c = n_total / layout.chunks();
  std::vector<at::Tensor> parts;
  for (int64_t ch : layout.chunks_of_rank(r)) parts.push_back(torch::arange(ch * c, (ch + 1) * c, torch::kLong));
  return torch::cat(parts);
}

RingForward ring_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const RingLayout& layout, RingTransport& transport, RingFault fault,
                                   const RingTrace* trace, const DocumentMask* docs) {
  check_inputs(q, k, v, layout, transport);
  check_ring_documents(q, layout, docs);
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), dh = q.size(3), Hkv = k.size(1), G = H / Hkv;
  const int64_t R = layout.ring, r = transport.rank(), slots = layout.chunks_per_rank(), c = n / slots;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(q.device());
  at::Tensor q5 = q.to(torch::kFloat).reshape({B, Hkv, G, n, dh});
  at::Tensor m = torch::full({B, Hkv, G, n}, -std::numeric_limits<float>::infinity(), f32);
  at::Tensor l = torch::zeros({B, Hkv, G, n}, f32);
  at::Tensor acc = torch::zeros({B, Hkv, G, n, dh}, f32);
  at::Tensor cur = torch::stack({k, v}).contiguous();
  at::Tensor nxt = mem::comm_buffer_like(cur);
  const std::vector<int64_t> q_chunks = layout.chunks_of_rank(r);
  int64_t blocks = 0;
  for (int64_t s = 0; s < R; ++s) {
    const int64_t src = ((r - s) % R + R) % R;
    std::function<void()> wait;
    if (s + 1 < R) wait = post(transport, cur, nxt, kTagKv, trace, prof::Direction::Forward);
    if (s != fault.skip_step) {
      auto range = block_range(trace, prof::Direction::Forward);
      const std::vector<int64_t> kv_chunks = layout.chunks_of_rank(src);
      at::Tensor kf = cur[0].to(torch::kFloat).unsqueeze(2), vf = cur[1].to(torch::kFloat).unsqueeze(2);
      for (int64_t a = 0; a < slots; ++a) {
        for (int64_t b = 0; b < slots; ++b) {
          if (!block_live(docs, q_chunks[a], kv_chunks[b], c)) continue;  // masked block
          ++blocks;
          const bool diag = kv_chunks[b] == q_chunks[a];
          for_each_tile(c, layout.tile, diag, q.is_meta(), [&](int64_t i0, int64_t ti, int64_t j0, int64_t tj) {
            const TileMask tm = tile_mask(docs, q_chunks[a] * c + i0, ti, kv_chunks[b] * c + j0, tj, q.device());
            if (tm.skip) return;  // before the documents of these queries
            at::Tensor sc =
                torch::matmul(slot(q5, a, c).narrow(-2, i0, ti), slot(kf, b, c).narrow(-2, j0, tj).transpose(-1, -2)) *
                scale;
            if (tm.mask.defined())
              sc = sc.masked_fill(tm.mask, kNegInf);
            else if (!docs && diag && j0 + tj > i0)
              sc = sc.masked_fill(causal_mask(ti, tj, i0, j0, q.device()), kNegInf);
            at::Tensor ma = m.narrow(-1, a * c + i0, ti), la = l.narrow(-1, a * c + i0, ti);
            at::Tensor acca = acc.narrow(-2, a * c + i0, ti);
            at::Tensor m_new = torch::maximum(ma, std::get<0>(sc.max(-1)));
            // A row with no unmasked score yet has max -inf; exp(-inf - 0) = 0 keeps it empty
            // (eq and masked_fill, not isinf and where: libtorch 1.13 has no meta kernels for
            // those, and the memory planner runs this on meta).
            at::Tensor m_safe = m_new.masked_fill(m_new.eq(kNegInf), 0.0);
            at::Tensor p = torch::exp(sc - m_safe.unsqueeze(-1));
            at::Tensor alpha = torch::exp(ma - m_safe);
            la.mul_(alpha).add_(p.sum(-1));
            acca.mul_(alpha.unsqueeze(-1)).add_(torch::matmul(p, slot(vf, b, c).narrow(-2, j0, tj)));
            ma.copy_(m_new);
          });
        }
      }
    }
    if (wait) {
      wait();
      std::swap(cur, nxt);
    }
  }
  RingForward f;
  f.out = (acc / l.unsqueeze(-1)).reshape({B, H, n, dh}).to(q.scalar_type());
  f.lse = (m + torch::log(l)).reshape({B, H, n});
  f.blocks = blocks;
  return f;
}

RingGrads ring_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RingForward& fwd,
                                  const at::Tensor& dout, const RingLayout& layout, RingTransport& transport,
                                  const RingTrace* trace, const DocumentMask* docs) {
  check_inputs(q, k, v, layout, transport);
  check_ring_documents(q, layout, docs);
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), dh = q.size(3), Hkv = k.size(1), G = H / Hkv;
  const int64_t R = layout.ring, r = transport.rank(), slots = layout.chunks_per_rank(), c = n / slots;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  at::Tensor q5 = q.to(torch::kFloat).reshape({B, Hkv, G, n, dh});
  at::Tensor do5 = dout.to(torch::kFloat).reshape({B, Hkv, G, n, dh});
  at::Tensor lse = fwd.lse.reshape({B, Hkv, G, n});
  at::Tensor D = (do5 * fwd.out.to(torch::kFloat).reshape({B, Hkv, G, n, dh})).sum(-1);
  at::Tensor dq = torch::zeros_like(q5);
  at::Tensor cur = torch::stack({k, v}).contiguous();
  at::Tensor nxt = mem::comm_buffer_like(cur);
  at::Tensor dkv = torch::zeros(cur.sizes(), cur.options().dtype(torch::kFloat));
  at::Tensor dkv_nxt = mem::comm_buffer_like(dkv);
  std::function<void()> dkv_wait;
  const std::vector<int64_t> q_chunks = layout.chunks_of_rank(r);
  for (int64_t s = 0; s < R; ++s) {
    const int64_t src = ((r - s) % R + R) % R;
    std::function<void()> wait;
    if (s + 1 < R) wait = post(transport, cur, nxt, kTagKv, trace, prof::Direction::Backward);
    at::Tensor kf = cur[0].to(torch::kFloat).unsqueeze(2), vf = cur[1].to(torch::kFloat).unsqueeze(2);
    // This step's partial dK/dV (of block src), added to the accumulator arriving from r-1.
    at::Tensor part = torch::zeros_like(dkv);
    const std::vector<int64_t> kv_chunks = layout.chunks_of_rank(src);
    auto range = block_range(trace, prof::Direction::Backward);
    for (int64_t a = 0; a < slots; ++a) {
      for (int64_t b = 0; b < slots; ++b) {
        if (!block_live(docs, q_chunks[a], kv_chunks[b], c)) continue;
        const bool diag = kv_chunks[b] == q_chunks[a];
        for_each_tile(c, layout.tile, diag, q.is_meta(), [&](int64_t i0, int64_t ti, int64_t j0, int64_t tj) {
          const TileMask tm = tile_mask(docs, q_chunks[a] * c + i0, ti, kv_chunks[b] * c + j0, tj, q.device());
          if (tm.skip) return;
          at::Tensor qa = slot(q5, a, c).narrow(-2, i0, ti), doa = slot(do5, a, c).narrow(-2, i0, ti);
          at::Tensor kb = slot(kf, b, c).narrow(-2, j0, tj), vb = slot(vf, b, c).narrow(-2, j0, tj);
          at::Tensor sc = torch::matmul(qa, kb.transpose(-1, -2)) * scale;
          if (tm.mask.defined())
            sc = sc.masked_fill(tm.mask, kNegInf);
          else if (!docs && diag && j0 + tj > i0)
            sc = sc.masked_fill(causal_mask(ti, tj, i0, j0, q.device()), kNegInf);
          at::Tensor p = torch::exp(sc - lse.narrow(-1, a * c + i0, ti).unsqueeze(-1));
          at::Tensor dp = torch::matmul(doa, vb.transpose(-1, -2));
          at::Tensor ds = p * (dp - D.narrow(-1, a * c + i0, ti).unsqueeze(-1));
          dq.narrow(-2, a * c + i0, ti).add_(torch::matmul(ds, kb) * scale);
          part[0].narrow(-2, b * c + j0, tj).add_(torch::matmul(ds.transpose(-1, -2), qa).sum(2) * scale);
          part[1].narrow(-2, b * c + j0, tj).add_(torch::matmul(p.transpose(-1, -2), doa).sum(2));
        });
      }
    }
    range.reset();   // the waits below are not compute
    if (dkv_wait) {  // the accumulator of block src, from rank r-1
      dkv_wait();
      std::swap(dkv, dkv_nxt);
    }
    if (s > 0) part.add_(dkv);
    dkv = part;
    if (R > 1) dkv_wait = post(transport, dkv, dkv_nxt, kTagDkv, trace, prof::Direction::Backward);
    if (wait) {
      wait();
      std::swap(cur, nxt);
    }
  }
  if (dkv_wait) {  // the last hop: rank r-1 holds r's accumulator after R steps
    dkv_wait();
    std::swap(dkv, dkv_nxt);
  }
  RingGrads g;
  g.dq = dq.reshape({B, H, n, dh}).to(q.scalar_type());
  g.dk = dkv[0].to(k.scalar_type());
  g.dv = dkv[1].to(v.scalar_type());
  return g;
}

}  // namespace ulysses
