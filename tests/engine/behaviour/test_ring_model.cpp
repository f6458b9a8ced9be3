// Ulysses x ring attention (docs/RING.md) against one process, through the whole model and
// trainer: every rank a thread with its own Gloo groups (world = sp x ring x dp), the
// sequence over sp x ring ranks (zigzag or contiguous), ring attention as the local
// attention of each Ulysses head chunk. On a model with 2 q heads (MHA: 2 kv heads, GQA: 1)
// the loss of step 0 and of 3 optimizer steps must be within 1e-5 relative of one process
// and every parameter gradient of step 0 within 1e-4 (norm of the difference over the norm),
// for (sp, ring) = (1, 2), (2, 2), (1, 4), (2, 4), zigzag on and off, head_chunks 2 where the
// local heads allow it (sp 1). A skipped ring block (the test-only fault) must fail the same
// comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/rank_threads.hpp"
#include "ring_attention.hpp"
#include "trainer.hpp"

using namespace ulysses;
using ulysses::testing::run_ranks;

namespace {

RunConfig tiny(int64_t kv_heads, int64_t sp, int64_t ring, bool zigzag) {
  RunConfig c;
  c.model.vocab_size = 64;
  c.model.hidden_size = 16;  // 2 heads of 8
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 2;
  c.model.num_key_value_heads = kv_heads;
  c.parallel.sp_size = sp;
  c.parallel.ring_size = ring;
  c.parallel.ring_zigzag = zigzag;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;  // divisible by 2 x sp x ring = 16 for (2, 4)
  c.train.micro_batch_size = 1;
  c.train.steps = 3;
  c.train.lr = 1e-2;
  c.train.warmup_steps = 1;
  c.train.min_lr = 1e-3;
  c.data.kind = "synthetic";
  c.profile.enabled = false;
  return c;
}

struct Result {
  double loss0 = 0;
  std::vector<double> losses;
  std::map<std::string, at::Tensor> grads0;
};

// One run of cfg on sp x ring x dp thread ranks, as rank 0 sees it; `fault` on every rank.
Result train(const RunConfig& cfg, int steps, RingFault fault = {}) {
  Result res;
  std::mutex mu;
  run_ranks(static_cast<int>(cfg.parallel.world_size()), [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
              std::chrono::milliseconds(60000), static_cast<int>(cfg.parallel.ring_size));
    Trainer tr(cfg, comm, nullptr);
    tr.model().set_ring_fault(fault);
    const double l0 = tr.loss_and_grads(0);
    std::map<std::string, at::Tensor> g;
    for (auto& [n, p] : tr.model().named_parameters()) g[n] = p.grad().clone();
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(tr.step(s).loss);
    if (env.rank == 0) {
      std::lock_guard<std::mutex> lk(mu);
      res.loss0 = l0;
      res.grads0 = g;
      res.losses = losses;
    }
  });
  return res;
}

struct Diff {
  double loss = 0;  // worst relative loss difference (step 0 and every step)
  double grad = 0;  // worst ||g - g_ref|| / ||g_ref|| over parameters
  std::string worst_grad;
};

Diff diff(const Result& ref, const Result& got) {
  Diff d;
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(1e-30, std::abs(b)); };
  d.loss = rel(got.loss0, ref.loss0);
  EXPECT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < std::min(got.losses.size(), ref.losses.size()); ++s)
    d.loss = std::max(d.loss, rel(got.losses[s], ref.losses[s]));
  for (const auto& [n, g] : ref.grads0) {
    EXPECT_TRUE(got.grads0.count(n)) << n;
    if (!got.grads0.count(n)) continue;
    const double e = (got.grads0.at(n) - g).norm().item<double>() / std::max(1e-30, g.norm().item<double>());
    if (e > d.grad) {
      d.grad = e;
      d.worst_grad = n;
    }
  }
  return d;
}

// Every case of one (sp, ring): MHA and GQA, zigzag on and off, head_chunks 1 and (when the
// sp rank's 2 / sp local heads allow it) 2, each against one process of the same model.
void check_grid(int64_t sp, int64_t ring) {
  for (int64_t kv : {2, 1}) {
    const Result ref = train(tiny(kv, 1, 1, true), 3);
    ASSERT_GT(ref.losses.front(), ref.losses.back()) << "the reference must learn for the curve to mean something";
    for (bool zigzag : {true, false}) {
      for (int64_t chunks : {1, 2}) {
        if ((2 / sp) % chunks != 0 || 2 / sp < chunks) continue;
        RunConfig c = tiny(kv, sp, ring, zigzag);
        c.parallel.head_chunks = chunks;
        const auto issues = validate(c);
        ASSERT_TRUE(issues.empty()) << issues[0].message;
        const Diff d = diff(ref, train(c, 3));
        const std::string what = "sp " + std::to_string(sp) + " x ring " + std::to_string(ring) +
                                 (kv == 2 ? " MHA" : " GQA") + (zigzag ? " zigzag" : " contiguous") + " chunks " +
                                 std::to_string(chunks);
        std::printf("%s: loss rel %.2e, worst gradient rel %.2e (%s)\n", what.c_str(), d.loss, d.grad,
                    d.worst_grad.c_str());
        EXPECT_LT(d.loss, 1e-5) << what;
        EXPECT_LT(d.grad, 1e-4) << what << ": " << d.worst_grad;
      }
    }
  }
}

}  // namespace

TEST(UlyssesRing, Sp1Ring2MatchesOneProcess) { check_grid(1, 2); }
TEST(UlyssesRing, Sp2Ring2MatchesOneProcess) { check_grid(2, 2); }
TEST(UlyssesRing, Sp1Ring4MatchesOneProcess) { check_grid(1, 4); }
TEST(UlyssesRing, Sp2Ring4MatchesOneProcess) { check_grid(2, 4); }

// The comparison above must be able to fail: the same runs with one ring block skipped in
// every ring attention's forward (RingFault, tests only) are far outside the tolerances.
TEST(UlyssesRing, SkippedRingBlockFailsTheComparison) {
  for (auto [sp, ring] : std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 2}}) {
    const Result ref = train(tiny(1, 1, 1, true), 1);
    const Diff d = diff(ref, train(tiny(1, sp, ring, true), 1, RingFault{1}));
    std::printf("sp %lld x ring %lld, ring step 1 skipped: loss rel %.2e, worst gradient rel %.2e (%s)\n",
                static_cast<long long>(sp), static_cast<long long>(ring), d.loss, d.grad, d.worst_grad.c_str());
    EXPECT_TRUE(d.loss > 1e-5 || d.grad > 1e-4) << "a skipped ring block went unnoticed";
    EXPECT_GT(d.grad, 1e-2);
  }
}

// Data parallel replicas of sp x ring groups, with activation checkpointing (the ring runs
// again in the recompute) and gradient accumulation: the same global batch as one process.
TEST(UlyssesRing, Dp2Ring2WithCheckpointingMatchesOneProcess) {
  RunConfig one = tiny(1, 1, 1, true);
  one.train.micro_batch_size = 2;  // one process sees both sequences of the global batch
  const Result ref = train(one, 3);
  RunConfig c = tiny(1, 1, 2, true);
  c.parallel.dp_size = 2;
  c.train.activation_checkpointing = "layer";
  ASSERT_TRUE(validate(c).empty()) << validate(c)[0].message;
  const Diff d = diff(ref, train(c, 3));
  std::printf("dp 2 x ring 2, checkpointing: loss rel %.2e, worst gradient rel %.2e (%s)\n", d.loss, d.grad,
              d.worst_grad.c_str());
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.grad, 1e-4) << d.worst_grad;
}

// Refusals before launch name the numbers (the launcher exits 2 on them).
TEST(UlyssesRing, ConfigRefusalsNameTheNumbers) {
  RunConfig c = tiny(1, 2, 2, true);
  EXPECT_TRUE(validate(c).empty());
  EXPECT_EQ(c.parallel.world_size(), 4);
  c.train.seq_length = 36;  // divisible by sp x ring = 4, not by 2 x sp x ring = 8
  auto is = validate(c);
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].field, "train.seq_length");
  EXPECT_NE(is[0].message.find("36"), std::string::npos) << is[0].message;
  EXPECT_NE(is[0].message.find("= 8"), std::string::npos) << is[0].message;
  c.parallel.ring_zigzag = false;  // contiguous: 4 is enough
  EXPECT_TRUE(validate(c).empty()) << validate(c)[0].message;
  c.parallel.ring_size = 0;
  is = validate(c);
  ASSERT_FALSE(is.empty());
  EXPECT_EQ(is[0].field, "parallel.ring_size");
  c.parallel.ring_size = 512;
  c.parallel.dp_size = 4;
  is = validate(c);
  ASSERT_FALSE(is.empty());
  EXPECT_NE(is[0].message.find("sp_size x ring_size x dp_size = 4096"), std::string::npos) << is[0].message;
}

// bf16 compute (fp32 master weights): K/V blocks of bf16 travel the ring through Gloo; the
// sp 2 x ring 2 run follows the one-process bf16 run closely and learns.
TEST(UlyssesRing, Bfloat16TracksOneProcess) {
  RunConfig one = tiny(1, 1, 1, true);
  one.train.dtype = "bfloat16";
  const Result ref = train(one, 3);
  RunConfig c = tiny(1, 2, 2, true);
  c.train.dtype = "bfloat16";
  const Result got = train(c, 3);
  ASSERT_EQ(got.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) EXPECT_NEAR(got.losses[s], ref.losses[s], 2e-2 * ref.losses[s]) << "step " << s;
  EXPECT_LT(got.losses.back(), got.losses.front());
}

// The ring on NCCL / CUDA passes validation (it exchanges by all-to-all there: auto picks
// it); p2p on NCCL and an unknown transport are refused before launch, naming the field.
TEST(UlyssesRing, NcclRingIsAcceptedWithTheAllToAllTransport) {
  RunConfig c = tiny(1, 2, 2, true);
  for (const char* transport : {"auto", "alltoall"}) {
    c.parallel.ring_transport = transport;
    c.train.device = "cuda";
    c.parallel.backend = "auto";
    EXPECT_TRUE(validate(c).empty()) << transport << ": " << validate(c)[0].message;
    c.train.device = "auto";
    c.parallel.backend = "nccl";
    EXPECT_TRUE(validate(c).empty()) << transport << ": " << validate(c)[0].message;
  }
  EXPECT_EQ(ring_transport_kind("auto", "nccl"), RingTransportKind::AllToAll);
  EXPECT_EQ(ring_transport_kind("auto", "gloo"), RingTransportKind::P2P);
  c.parallel.ring_transport = "p2p";
  auto is = validate(c);
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].field, "parallel.ring_transport");
  EXPECT_NE(is[0].message.find("parallel.ring_transport p2p runs on Gloo only"), std::string::npos) << is[0].message;
  c.parallel.backend = "gloo";
  c.train.device = "cpu";
  EXPECT_TRUE(validate(c).empty());
  c.parallel.ring_transport = "ring";
  is = validate(c);
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].field, "parallel.ring_transport");
  EXPECT_EQ(is[0].message, "parallel.ring_transport must be auto, p2p or alltoall, got 'ring'");
}

// The all-to-all transport (NCCL's; here on Gloo by parallel.ring_transport=alltoall) through
// the model and trainer: the same losses and gradients as one process within the grid's
// limits, and bit for bit those of the p2p transport (the same blocks meet in the same order).
TEST(UlyssesRing, AllToAllTransportMatchesOneProcessAndP2pBitForBit) {
  for (auto [sp, ring] : std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 2}, {1, 4}}) {
    for (int64_t kv : {2, 1}) {
      const Result ref = train(tiny(kv, 1, 1, true), 3);
      RunConfig c = tiny(kv, sp, ring, true);
      c.parallel.ring_transport = "p2p";
      const Result p2p = train(c, 3);
      c.parallel.ring_transport = "alltoall";
      ASSERT_TRUE(validate(c).empty()) << validate(c)[0].message;
      const Result a2a = train(c, 3);
      const Diff d = diff(ref, a2a), between = diff(p2p, a2a);
      const std::string what =
          "sp " + std::to_string(sp) + " x ring " + std::to_string(ring) + (kv == 2 ? " MHA" : " GQA");
      std::printf("%s alltoall: loss rel %.2e, worst gradient rel %.2e (%s); vs p2p: loss %.2e, gradient %.2e\n",
                  what.c_str(), d.loss, d.grad, d.worst_grad.c_str(), between.loss, between.grad);
      EXPECT_LT(d.loss, 1e-5) << what;
      EXPECT_LT(d.grad, 1e-4) << what << ": " << d.worst_grad;
      EXPECT_EQ(a2a.loss0, p2p.loss0) << what;
      EXPECT_EQ(a2a.losses, p2p.losses) << what;
      for (const auto& [n, g] : p2p.grads0)
        EXPECT_TRUE(a2a.grads0.count(n) && a2a.grads0.at(n).equal(g)) << what << ": " << n;
    }
  }
}
