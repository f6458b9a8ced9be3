// Ring attention (docs/RING.md) against one process: every rank of a ring of R threads runs
// ring_attention_forward/backward on its zigzag (or contiguous) share of the sequence, K/V
// and dK/dV travelling through an in-process transport; outputs and the gradients of q, k
// and v, put back in sequence order, are compared with plain causal attention in fp64 with
// autograd (kv heads expanded there, never in the ring). A skipped ring block must fail the
// comparison. The zigzag layout gives every rank the same number of unmasked blocks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "ring_attention.hpp"
#include "rank_threads.hpp"
#include "ring_geometry.hpp"
#include "torch_compat.hpp"

namespace ulysses {
namespace {

// Mailboxes keyed by (destination rank, tag); a receive waits at most 30 s.
class Hub {
 public:
  void put(int64_t dst, int tag, at::Tensor t) {
    std::lock_guard<std::mutex> g(mu_);
    box_[{dst, tag}].push_back(std::move(t));
    cv_.notify_all();
  }
  at::Tensor take(int64_t dst, int tag) {
    std::unique_lock<std::mutex> g(mu_);
    auto& q = box_[{dst, tag}];
    if (!cv_.wait_for(g, std::chrono::seconds(30), [&] { return !q.empty(); }))
      throw std::runtime_error("ring test transport: receive timed out");
    at::Tensor t = q.front();
    q.pop_front();
    return t;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, int>, std::deque<at::Tensor>> box_;
};

class HubTransport : public RingTransport {
 public:
  HubTransport(Hub& hub, int64_t rank, int64_t size) : hub_(hub), rank_(rank), size_(size) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  std::function<void()> exchange(const at::Tensor& send, at::Tensor& recv, int tag, ExchangeStamp*) override {
    hub_.put((rank_ + 1) % size_, tag, send.clone());
    ++exchanges;
    bytes += send.numel() * static_cast<int64_t>(send.element_size());
    return [this, &recv, tag] { recv.copy_(hub_.take(rank_, tag)); };
  }
  int64_t exchanges = 0;
  int64_t bytes = 0;

 private:
  Hub& hub_;
  int64_t rank_, size_;
};

double rel(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(torch::kDouble) - want).norm().item<double>() / want.norm().item<double>();
}

struct Errors {
  double out = 0, dq = 0, dk = 0, dv = 0;
  int64_t exchanges = 0;               // in-process transport: exchanges posted over all ranks
  int64_t bytes = 0;                   //   and the bytes they sent
  std::vector<int64_t> blocks;         // per rank: unmasked blocks the kernel computed (not Autograd)
  at::Tensor out_t, dq_t, dk_t, dv_t;  // the ring's results in sequence order (fp64)
};

// Autograd: in-process, through ring_attention(). Gloo: the p2p transport (send/recv);
// GlooAllToAll: the all-to-all transport (one alltoall_base with split sizes per exchange).
enum class Wire { InProcess, Gloo, GlooAllToAll, Autograd };

Errors run_ring(int64_t R, bool zigzag, int64_t H, int64_t Hkv, RingFault fault = {}, Wire wire = Wire::InProcess,
                int64_t tile = 256) {
  const int64_t B = 2, N = 48, dh = 8;
  torch::manual_seed(36 + R * 10 + H + Hkv);
  auto d = torch::TensorOptions().dtype(torch::kDouble);
  at::Tensor q = torch::randn({B, H, N, dh}, d).requires_grad_(true);
  at::Tensor k = torch::randn({B, Hkv, N, dh}, d).requires_grad_(true);
  at::Tensor v = torch::randn({B, Hkv, N, dh}, d).requires_grad_(true);
  at::Tensor w = torch::randn({B, H, N, dh}, d);
  // Reference: one process, fp64, kv heads expanded, full causal mask.
  at::Tensor kk = k.repeat_interleave(H / Hkv, 1), vv = v.repeat_interleave(H / Hkv, 1);
  at::Tensor sc = torch::matmul(q, kk.transpose(-1, -2)) / std::sqrt(static_cast<double>(dh));
  sc = sc.masked_fill(torch::ones({N, N}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  at::Tensor ref = torch::matmul(torch::softmax(sc, -1), vv);
  (ref * w).sum().backward();

  RingLayout layout{R, zigzag};
  layout.tile = tile;
  at::Tensor out = torch::zeros({B, H, N, dh}, d), dq = torch::zeros_like(out);
  at::Tensor dk = torch::zeros({B, Hkv, N, dh}, d), dv = torch::zeros_like(dk);
  Hub hub;
  const int port = testing::free_port();
  const std::chrono::milliseconds timeout(30000);
  std::mutex mu;
  std::exception_ptr err;
  int64_t exchanges = 0, bytes = 0;
  std::vector<int64_t> blocks(static_cast<size_t>(R), -1);
  std::vector<std::thread> ts;
  for (int64_t r = 0; r < R; ++r) {
    ts.emplace_back([&, r] {
      try {
        at::Tensor pos = ring_positions(layout, r, N);
        auto local = [&](const at::Tensor& t) {
          return t.detach().index_select(2, pos).to(torch::kFloat).contiguous();
        };
        std::unique_ptr<RingTransport> owned;
        if (wire == Wire::Gloo || wire == Wire::GlooAllToAll) {
          auto store =
              compat::tcp_store("127.0.0.1", static_cast<uint16_t>(port), r == 0, static_cast<int>(R), timeout);
          owned = make_group_ring_transport(
              compat::make_gloo(store, static_cast<int>(r), static_cast<int>(R), timeout, "127.0.0.1"), timeout, -1,
              wire == Wire::Gloo ? RingTransportKind::P2P : RingTransportKind::AllToAll);
        } else {
          owned = std::make_unique<HubTransport>(hub, r, R);
        }
        RingTransport& tr = *owned;
        at::Tensor qr = local(q), kr = local(k), vr = local(v);
        RingForward f;
        RingGrads g;
        if (wire == Wire::Autograd) {  // the differentiable wrapper, gradients by autograd
          qr.requires_grad_(true);
          kr.requires_grad_(true);
          vr.requires_grad_(true);
          f.out = ring_attention(qr, kr, vr, layout, tr);
          (f.out * local(w)).sum().backward();
          g = RingGrads{qr.grad(), kr.grad(), vr.grad()};
          f.out = f.out.detach();
        } else {
          f = ring_attention_forward(qr, kr, vr, layout, tr, fault);
          g = ring_attention_backward(qr, kr, vr, f, local(w), layout, tr);
        }
        std::lock_guard<std::mutex> lk(mu);
        if (wire != Wire::Autograd) blocks[static_cast<size_t>(r)] = f.blocks;
        if (auto* hub_tr = dynamic_cast<HubTransport*>(owned.get())) {
          exchanges += hub_tr->exchanges;
          bytes += hub_tr->bytes;
        }
        out.index_copy_(2, pos, f.out.to(torch::kDouble));
        dq.index_copy_(2, pos, g.dq.to(torch::kDouble));
        dk.index_copy_(2, pos, g.dk.to(torch::kDouble));
        dv.index_copy_(2, pos, g.dv.to(torch::kDouble));
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err) err = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  if (err) std::rethrow_exception(err);
  return {rel(out, ref.detach()),
          rel(dq, q.grad()),
          rel(dk, k.grad()),
          rel(dv, v.grad()),
          exchanges,
          bytes,
          blocks,
          out,
          dq,
          dk,
          dv};
}

TEST(RingAttention, MatchesOneProcessForwardAndBackward) {
  for (int64_t R : {1, 2, 4, 8}) {
    for (bool zigzag : {true, false}) {
      for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {2, 1}, {4, 2}, {4, 1}}) {
        const Errors e = run_ring(R, zigzag, H, Hkv);
        SCOPED_TRACE("R=" + std::to_string(R) + " zigzag=" + std::to_string(zigzag) + " H=" + std::to_string(H) +
                     " Hkv=" + std::to_string(Hkv));
        std::printf("ring R=%lld zigzag=%d H=%lld Hkv=%lld: out %.2e dq %.2e dk %.2e dv %.2e\n",
                    static_cast<long long>(R), zigzag ? 1 : 0, static_cast<long long>(H), static_cast<long long>(Hkv),
                    e.out, e.dq, e.dk, e.dv);
        EXPECT_LT(e.out, 1e-5);
        EXPECT_LT(e.dq, 1e-4);
        EXPECT_LT(e.dk, 1e-4);
        EXPECT_LT(e.dv, 1e-4);
        // Per rank: R-1 K/V hops forward, R-1 K/V hops and R dK/dV hops backward.
        EXPECT_EQ(e.exchanges, R == 1 ? 0 : R * ((R - 1) + (R - 1) + R));
        // docs/RING.md's byte formula (fp32 K/V here) is what the ring sent: B 2, N 48, dh 8.
        const RingBytes f = ring_bytes_per_rank(R, 2, 48 / R, Hkv, 8, 4);
        EXPECT_EQ(e.bytes, R * (f.forward + f.backward));
      }
    }
  }
}

// The same on Gloo: K/V and dK/dV travel by c10d send/recv between thread ranks (p2p) and by
// one all-to-all of the ring group per exchange (the NCCL-safe transport); the two give the
// same results bit for bit (the same blocks arrive at the same steps).
TEST(RingAttention, MatchesOneProcessOnGloo) {
  for (int64_t R : {2, 4}) {
    for (bool zigzag : {true, false}) {
      for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {2, 1}}) {
        const Errors p2p = run_ring(R, zigzag, H, Hkv, {}, Wire::Gloo);
        for (Wire wire : {Wire::Gloo, Wire::GlooAllToAll}) {
          const Errors e = wire == Wire::Gloo ? p2p : run_ring(R, zigzag, H, Hkv, {}, wire);
          std::printf("gloo %s ring R=%lld zigzag=%d H=%lld Hkv=%lld: out %.2e dq %.2e dk %.2e dv %.2e\n",
                      wire == Wire::Gloo ? "p2p" : "alltoall", static_cast<long long>(R), zigzag ? 1 : 0,
                      static_cast<long long>(H), static_cast<long long>(Hkv), e.out, e.dq, e.dk, e.dv);
          EXPECT_LT(e.out, 1e-5);
          EXPECT_LT(e.dq, 1e-4);
          EXPECT_LT(e.dk, 1e-4);
          EXPECT_LT(e.dv, 1e-4);
          EXPECT_TRUE(e.out_t.equal(p2p.out_t) && e.dq_t.equal(p2p.dq_t) && e.dk_t.equal(p2p.dk_t) &&
                      e.dv_t.equal(p2p.dv_t))
              << "all-to-all and p2p differ at R=" << R;
        }
      }
    }
  }
  for (Wire wire : {Wire::Gloo, Wire::GlooAllToAll}) {
    const Errors skipped = run_ring(4, true, 2, 1, RingFault{2}, wire);
    EXPECT_GT(skipped.out, 1e-2);
  }
}

// parallel.ring_transport per backend: auto is p2p on Gloo and the all-to-all on NCCL; p2p on
// NCCL (separate send and recv can deadlock there) and unknown names are refused.
TEST(RingAttention, TransportKindPerBackend) {
  EXPECT_EQ(ring_transport_kind("auto", "gloo"), RingTransportKind::P2P);
  EXPECT_EQ(ring_transport_kind("auto", "nccl"), RingTransportKind::AllToAll);
  EXPECT_EQ(ring_transport_kind("alltoall", "gloo"), RingTransportKind::AllToAll);
  EXPECT_EQ(ring_transport_kind("alltoall", "nccl"), RingTransportKind::AllToAll);
  EXPECT_EQ(ring_transport_kind("p2p", "gloo"), RingTransportKind::P2P);
  EXPECT_THROW(ring_transport_kind("p2p", "nccl"), ConfigError);
  EXPECT_THROW(ring_transport_kind("ring", "gloo"), ConfigError);
}

// The differentiable wrapper (what a model calls): autograd's gradients equal the reference.
TEST(RingAttention, AutogradWrapperMatchesOneProcess) {
  for (int64_t R : {2, 4}) {
    for (bool zigzag : {true, false}) {
      const Errors e = run_ring(R, zigzag, 4, 2, {}, Wire::Autograd);
      EXPECT_LT(e.out, 1e-5);
      EXPECT_LT(e.dq, 1e-4);
      EXPECT_LT(e.dk, 1e-4);
      EXPECT_LT(e.dv, 1e-4);
    }
  }
}

// Score tiles smaller than a chunk (the block split into tile x tile pieces, the online softmax
// running across them): tile 5 on chunks of 24, 12 and 6 tokens (48 over R = 1, 2, 4 with
// zigzag) leaves ragged tiles and tiles crossing the diagonal; results as untiled.
TEST(RingAttention, ScoreTilesSmallerThanAChunkMatchOneProcess) {
  for (int64_t R : {1, 2, 4}) {
    for (int64_t tile : {1, 5, 7}) {
      const Errors e = run_ring(R, true, 4, 2, {}, Wire::InProcess, tile);
      const Errors a = run_ring(R, false, 4, 1, {}, Wire::Autograd, tile);
      SCOPED_TRACE("R=" + std::to_string(R) + " tile=" + std::to_string(tile));
      for (const Errors& x : {e, a}) {
        EXPECT_LT(x.out, 1e-5);
        EXPECT_LT(x.dq, 1e-4);
        EXPECT_LT(x.dk, 1e-4);
        EXPECT_LT(x.dv, 1e-4);
      }
    }
  }
}

// The check above must be able to fail: skipping one ring block (the test-only fault) moves
// the output far past its tolerance, for every step but the diagonal one.
TEST(RingAttention, SkippedBlockFailsTheComparison) {
  for (int64_t R : {2, 4}) {
    for (int64_t step = 1; step < R; ++step) {
      const Errors e = run_ring(R, true, 2, 1, RingFault{step});
      std::printf("ring R=%lld skip step %lld: out %.2e\n", static_cast<long long>(R), static_cast<long long>(step),
                  e.out);
      EXPECT_GT(e.out, 1e-2) << "R=" << R << " step " << step;
    }
  }
}

// What the kernel computed, counted by the kernel: with zigzag every rank of the ring
// computes the same number of unmasked (q chunk, kv chunk) blocks (2R + 1); without it rank
// r computes r + 1 (the last rank R times the first one's work), and the outputs are right
// both ways.
TEST(RingAttention, ZigzagGivesEveryRankTheSameComputedBlocks) {
  for (int64_t R : {2, 4}) {
    const Errors z = run_ring(R, true, 2, 1);
    const Errors c = run_ring(R, false, 2, 1);
    EXPECT_LT(z.out, 1e-5);
    EXPECT_LT(c.out, 1e-5);
    ASSERT_EQ(z.blocks.size(), static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(z.blocks[static_cast<size_t>(r)], 2 * R + 1) << "zigzag R=" << R << " rank " << r;
      EXPECT_EQ(c.blocks[static_cast<size_t>(r)], r + 1) << "contiguous R=" << R << " rank " << r;
    }
    std::printf("ring R=%lld blocks per rank: zigzag", static_cast<long long>(R));
    for (int64_t b : z.blocks) std::printf(" %lld", static_cast<long long>(b));
    std::printf(", contiguous");
    for (int64_t b : c.blocks) std::printf(" %lld", static_cast<long long>(b));
    std::printf("\n");
  }
}

TEST(RingGeometry, SeqShardRangesCoverTheSequenceOnceInRingOrder) {
  // Ring 1: the contiguous Ulysses shards.
  for (int64_t s = 0; s < 4; ++s)
    EXPECT_EQ(seq_shard_ranges(32, 4, RingLayout{1, true}, 0, s), (std::vector<TokenRange>{{8 * s, 8 * s + 8}}));
  // sp 2 x ring 2, zigzag: chunks of 8; ring rank 0 holds chunks 0 and 3, ring rank 1 chunks 1 and 2.
  EXPECT_EQ(seq_shard_ranges(32, 2, RingLayout{2, true}, 0, 0), (std::vector<TokenRange>{{0, 8}}));
  EXPECT_EQ(seq_shard_ranges(32, 2, RingLayout{2, true}, 0, 1), (std::vector<TokenRange>{{24, 32}}));
  EXPECT_EQ(seq_shard_ranges(32, 2, RingLayout{2, true}, 1, 0), (std::vector<TokenRange>{{8, 16}}));
  // sp 1 x ring 2: one rank holds two pieces; sp 4: pieces of half a chunk.
  EXPECT_EQ(seq_shard_ranges(32, 1, RingLayout{2, true}, 0, 0), (std::vector<TokenRange>{{0, 8}, {24, 32}}));
  EXPECT_EQ(seq_shard_ranges(32, 4, RingLayout{2, true}, 0, 3), (std::vector<TokenRange>{{28, 32}}));
  EXPECT_EQ(seq_shard_ranges(32, 4, RingLayout{2, false}, 1, 0), (std::vector<TokenRange>{{16, 20}}));
  for (int64_t sp : {1, 2, 4})
    for (int64_t R : {2, 4})
      for (bool zz : {true, false}) {
        std::vector<int> seen(64, 0);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t s = 0; s < sp; ++s)
            for (const auto& t : seq_shard_ranges(64, sp, RingLayout{R, zz}, r, s))
              for (int64_t i = t.begin; i < t.end; ++i) ++seen[static_cast<size_t>(i)];
        for (int x : seen) EXPECT_EQ(x, 1) << "sp " << sp << " ring " << R << " zigzag " << zz;
      }
}

TEST(RingGeometry, ZigzagBalancesUnmaskedBlocks) {
  EXPECT_EQ((RingLayout{1, true}.unmasked_blocks(0)), 1);  // a ring of 1: one block, zigzag or not
  for (int64_t R : {2, 3, 4, 8}) {
    const RingLayout z{R, true};
    for (int64_t r = 0; r < R; ++r) EXPECT_EQ(z.unmasked_blocks(r), 2 * R + 1) << "R=" << R << " r=" << r;
    // Without zigzag rank r computes r + 1 blocks: the last rank R times the first one's.
    const RingLayout c{R, false};
    for (int64_t r = 0; r < R; ++r) EXPECT_EQ(c.unmasked_blocks(r), r + 1);
  }
  // The layout covers every chunk once.
  const RingLayout z{4, true};
  std::vector<int> seen(8, 0);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t ch : z.chunks_of_rank(r)) ++seen[static_cast<size_t>(ch)];
  for (int s : seen) EXPECT_EQ(s, 1);
}

TEST(RingGeometry, RefusalsNameTheNumbers) {
  EXPECT_TRUE(ring_issues(64, 2, 2, true).empty());
  auto is = ring_issues(100, 2, 4, true);
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].field, "train.seq_length");
  EXPECT_NE(is[0].message.find("100"), std::string::npos);
  EXPECT_NE(is[0].message.find("= 16"), std::string::npos) << is[0].message;
  EXPECT_TRUE(ring_issues(104, 2, 4, false).empty());
  auto bad = ring_issues(64, 2, 0, true);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].field, "parallel.ring_size");
}

}  // namespace
}  // namespace ulysses
