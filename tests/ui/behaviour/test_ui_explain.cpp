// The explainer's maths (ui/models/explain_model) against independent references: the
// bytes per rank per layer against the cost model's formula (the one tests/e2e checks the
// traced all-to-all bytes against) and a hand-written one; the head each rank owns against
// the engine's rules (local_q_heads / local_kv_heads) and a naive repeat_interleave; for MHA,
// GQA with kv heads replicated (Hkv < P) and split (P divides Hkv), P = 1, 2, 4, 8.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "cost_model.hpp"
#include "explain_model.hpp"
#include "weights_model.hpp"
#include "ulysses_geometry.hpp"

using namespace ulysses;
using ui::HeadBlock;

namespace {
RunConfig config(int64_t H, int64_t Hkv, int64_t P, int64_t N = 512, int64_t d = 256, int64_t B = 1) {
  RunConfig c;
  c.model.num_attention_heads = H;
  c.model.num_key_value_heads = Hkv;
  c.model.hidden_size = d;
  c.model.intermediate_size = 2 * d;
  c.model.num_hidden_layers = 2;
  c.model.vocab_size = 256;
  c.parallel.sp_size = P;
  c.train.seq_length = N;
  c.train.micro_batch_size = B;
  return c;
}

struct Case {
  int64_t H, Hkv, P;
};
}  // namespace

TEST(Explain, BytesAndHeadsMatchEngineRulesAndCostModel) {
  const Case cases[] = {{4, 4, 1}, {4, 4, 2},  {8, 8, 4},  {16, 16, 8},  // MHA
                        {4, 1, 2}, {8, 2, 4},  {16, 2, 8}, {8, 1, 8},    // GQA, kv replicated
                        {8, 4, 2}, {16, 8, 4}, {16, 4, 4}, {32, 8, 8}};  // GQA, kv split
  for (const auto& k : cases) {
    SCOPED_TRACE("H=" + std::to_string(k.H) + " Hkv=" + std::to_string(k.Hkv) + " P=" + std::to_string(k.P));
    const RunConfig cfg = config(k.H, k.Hkv, k.P);
    const auto e = ui::explain(cfg);
    ASSERT_TRUE(e.ok) << (e.problems.empty() ? "" : e.problems.front());
    ASSERT_EQ(e.stages.size(), 6u);
    // Bytes: the cost model's formula, and by hand: each rank sends (P-1)/P of its q, k, v
    // (Hkv_sent = max(Hkv, P) heads) and of its output, fp32.
    const int64_t hkv_sent = std::max(k.Hkv, k.P), dh = 256 / k.H, n = 512 / k.P;
    const int64_t by_hand = (n * (k.H + 2 * hkv_sent) * dh + n * k.H * dh) * 4 * (k.P - 1) / k.P;
    EXPECT_EQ(e.a2a_bytes_per_layer_fwd, by_hand);
    EXPECT_EQ(e.a2a_bytes_per_layer_fwd, cost::estimate(cfg).a2a_bytes_per_layer_fwd);
    EXPECT_EQ(e.stages[2].bytes_sent + e.stages[4].bytes_sent, by_hand);
    EXPECT_EQ(e.stages[2].bytes_sent, e.stages[2].bytes_recv);
    // Heads after seq->head: rank r owns q heads [r*h, (r+1)*h) with h = local_q_heads, and
    // local_kv_heads kv heads; naive repeat_interleave of the kv heads to hkv_sent copies.
    std::vector<int64_t> expanded;
    for (int64_t j = 0; j < k.Hkv; ++j)
      for (int64_t c = 0; c < hkv_sent / k.Hkv; ++c) expanded.push_back(j);
    std::multiset<int64_t> q_seen;
    for (int64_t r = 0; r < k.P; ++r) {
      const auto& blocks = e.stages[2].ranks[static_cast<size_t>(r)];
      ASSERT_EQ(blocks.size(), 2u);
      EXPECT_EQ(blocks[0].kind, HeadBlock::Q);
      EXPECT_EQ(blocks[0].tok_begin, 0);
      EXPECT_EQ(blocks[0].tok_end, 512);  // the whole sequence
      EXPECT_EQ(blocks[0].head_begin, r * ulysses_geometry(cfg).local_q_heads);
      EXPECT_EQ(blocks[0].head_end - blocks[0].head_begin, ulysses_geometry(cfg).local_q_heads);
      for (int64_t q = blocks[0].head_begin; q < blocks[0].head_end; ++q) q_seen.insert(q);
      EXPECT_EQ(blocks[1].kind, HeadBlock::KV);
      EXPECT_EQ(blocks[1].head_end - blocks[1].head_begin, ulysses_geometry(cfg).local_kv_heads);
      const int64_t per_rank = hkv_sent / k.P;
      EXPECT_EQ(blocks[1].head_begin, expanded[static_cast<size_t>(r * per_rank)]);
      EXPECT_EQ(blocks[1].replicated, k.Hkv < k.P);
      // Every q head of the rank finds its kv head (GQA group) among the rank's kv heads.
      const int64_t group = k.H / k.Hkv;
      for (int64_t q = blocks[0].head_begin; q < blocks[0].head_end; ++q) {
        EXPECT_GE(q / group, blocks[1].head_begin);
        EXPECT_LT(q / group, blocks[1].head_end);
      }
      // Before and after: sequence shards of n tokens.
      EXPECT_EQ(e.stages[0].ranks[static_cast<size_t>(r)][0].tok_begin, r * n);
      EXPECT_EQ(e.stages[4].ranks[static_cast<size_t>(r)][0].tok_end, (r + 1) * n);
    }
    EXPECT_EQ(q_seen.size(), static_cast<size_t>(k.H));
    EXPECT_EQ(std::set<int64_t>(q_seen.begin(), q_seen.end()).size(), static_cast<size_t>(k.H));  // each once
  }
}

TEST(Explain, TinyDemoAtSp2WithGqaByHand) {
  // resources/configs/tiny.json: hidden 64, 4 heads, 2 kv heads, seq 512, sp 2, fp32.
  const auto e = ui::explain(config(4, 2, 2, 512, 64));
  ASSERT_TRUE(e.ok);
  // q,k,v send buffer 256 tokens x (4 + 2 + 2) heads x 16 = 32768 floats; half leaves: 65536 B.
  EXPECT_EQ(e.stages[2].bytes_sent, 65536);
  // output 256 x 4 x 16 floats, half leaves: 32768 B.
  EXPECT_EQ(e.stages[4].bytes_sent, 32768);
  EXPECT_NE(e.stages[2].shapes.find("(1, 512, 2, 16)"), std::string::npos) << e.stages[2].shapes;
  EXPECT_FALSE(e.kv_replicated);
}

// An explicit head_dim (Qwen3): heads are head_dim wide, not hidden_size / heads. The
// explainer drew 16-wide heads and taught half the bytes for resources/configs/qwen3-tiny.json.
TEST(Explain, AnExplicitHeadDimIsTheHeadsWidth) {
  RunConfig cfg = config(4, 2, 2, 512, 64);
  cfg.model.explicit_head_dim = 32;  // 4 x 32 = 128 wide q, twice hidden_size
  const auto e = ui::explain(cfg);
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.dh, 32);
  // q,k,v send buffer 256 tokens x (4 + 2 + 2) heads x 32 = 65536 floats; half leaves: 131072 B.
  EXPECT_EQ(e.stages[2].bytes_sent, 131072);
  // output 256 x 4 x 32 floats, half leaves: 65536 B.
  EXPECT_EQ(e.stages[4].bytes_sent, 65536);
  EXPECT_NE(e.stages[2].shapes.find("(1, 512, 2, 32)"), std::string::npos) << e.stages[2].shapes;
  EXPECT_EQ(e.a2a_bytes_per_layer_fwd, cost::estimate(cfg).a2a_bytes_per_layer_fwd);
}

TEST(Explain, RefusedSettingsSayWhy) {
  auto e = ui::explain(config(12, 12, 8, 512, 384));
  EXPECT_FALSE(e.ok);
  ASSERT_FALSE(e.problems.empty());
  EXPECT_NE(e.problems.front().find("num_attention_heads (12) must be divisible by parallel.sp_size (8)"),
            std::string::npos)
      << e.problems.front();
  e = ui::explain(config(12, 3, 2, 512, 384));  // 3 kv heads over 2 ranks: neither divides
  EXPECT_FALSE(e.ok);
  ASSERT_FALSE(e.problems.empty());
  EXPECT_NE(e.problems.front().find("num_key_value_heads (3)"), std::string::npos) << e.problems.front();
  EXPECT_TRUE(e.stages.empty());
}

// ---- measured stage times and the range -> stage mapping (explain_times) ----------------
#include "explain_times.hpp"

namespace {
prof::LayerRow layer_row(int32_t layer, prof::Direction dir, int64_t samples, int64_t qkv, int64_t s2h, int64_t att,
                         int64_t h2s, int64_t out) {
  prof::LayerRow r;
  r.layer = layer;
  r.dir = dir;
  r.samples = samples;
  r.qkv_proj_ns = qkv;
  r.a2a_seq_to_head_ns = s2h;
  r.attention_ns = att;
  r.a2a_head_to_seq_ns = h2s;
  r.out_proj_ns = out;
  return r;
}
}  // namespace

TEST(ExplainTimes, MedianOverForwardLayersOfThePerSampleMean) {
  using prof::Direction;
  // Four forward layers, 4 samples each (2 ranks x 2 steps); per-sample attention times
  // 400, 100, 300, 200 ns: median (even count) = (200 + 300) / 2 = 250 ns. A backward row
  // with huge times and a forward row without samples must not count.
  const std::vector<prof::LayerRow> rows = {
      layer_row(0, Direction::Forward, 4, 0, 40, 1600, 80, 0),
      layer_row(1, Direction::Forward, 4, 0, 44, 400, 80, 0),
      layer_row(2, Direction::Forward, 4, 0, 48, 1200, 80, 0),
      layer_row(3, Direction::Forward, 4, 0, 52, 800, 80, 12),
      layer_row(0, Direction::Backward, 4, 999999, 999999, 999999, 999999, 999999),
      layer_row(4, Direction::Forward, 0, 5, 5, 5, 5, 5)};
  const auto t = ui::stage_times(rows);
  ASSERT_EQ(t.size(), size_t(ui::kExplainStageCount));
  EXPECT_FALSE(t[0].measured);  // the shard has no range
  EXPECT_FALSE(t[1].measured);  // no layer traced q/k/v projections
  EXPECT_TRUE(t[2].measured);
  EXPECT_DOUBLE_EQ(t[2].median_ns, (11.0 + 12.0) / 2);  // 10, 11, 12, 13
  EXPECT_EQ(t[2].layers, 4);
  EXPECT_DOUBLE_EQ(t[3].median_ns, 250.0);
  EXPECT_DOUBLE_EQ(t[4].median_ns, 20.0);
  EXPECT_TRUE(t[5].measured);  // one layer only: its value
  EXPECT_EQ(t[5].layers, 1);
  EXPECT_DOUBLE_EQ(t[5].median_ns, 3.0);
  // Odd count: the middle value.
  const auto odd = ui::stage_times({rows[0], rows[1], rows[2]});
  EXPECT_DOUBLE_EQ(odd[3].median_ns, 300.0);
  EXPECT_TRUE(ui::stage_times({}).size() == size_t(ui::kExplainStageCount));
  EXPECT_FALSE(ui::stage_times({})[3].measured);
}

TEST(ExplainTimes, RangeToStageByPhaseThenName) {
  using prof::Phase;
  // Every phase the explainer draws, in the explain model's stage order.
  const auto e = ui::explain(config(8, 8, 2));
  ASSERT_EQ(e.stages.size(), size_t(ui::kExplainStageCount));
  EXPECT_EQ(e.stages[size_t(ui::explain_stage_of_phase(Phase::QkvProj))].name, "q/k/v projection");
  EXPECT_EQ(e.stages[size_t(ui::explain_stage_of_phase(Phase::A2ASeqToHead))].name, "all-to-all seq→head");
  EXPECT_EQ(e.stages[size_t(ui::explain_stage_of_phase(Phase::Attention))].name, "attention");
  EXPECT_EQ(e.stages[size_t(ui::explain_stage_of_phase(Phase::A2AHeadToSeq))].name, "all-to-all head→seq");
  EXPECT_EQ(e.stages[size_t(ui::explain_stage_of_phase(Phase::OutProj))].name, "output projection");
  for (Phase p : {Phase::Step, Phase::Embedding, Phase::Mlp, Phase::Norm, Phase::LmHead, Phase::Loss, Phase::Backward,
                  Phase::GradAllReduce, Phase::Optimizer, Phase::Other})
    EXPECT_EQ(ui::explain_stage_of_phase(p), -1) << prof::phase_name(p);
  // The phase wins over the name; names only for ranges without a phase (foreign traces).
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Attention, "o_proj"), 3);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Mlp, "attention"), -1);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "a2a_head_to_seq"), 4);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "ulysses all-to-all seq_to_head L3"), 2);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "self_attn.o_proj"), 5);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "layers.0.self_attn.q_proj"), 1);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "FlashAttnFwd"), 3);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, "ncclDevKernel_AllReduce"), -1);
  EXPECT_EQ(ui::explain_stage_of_range(Phase::Other, ""), -1);
}

// Ulysses x ring (docs/RING.md): the picture is ring rank 0's Ulysses group, N/R tokens over P
// ranks; the attention stage is ring attention and its bytes are what the ring sends per rank
// and layer forward, by hand: K and V of the rank's kv heads over N/R tokens, R-1 hops.
TEST(Explain, RingAttentionStageByHand) {
  RunConfig cfg = config(8, 4, 2, 1024, 256);  // dh 32, 2 kv heads per rank after the all-to-all
  cfg.parallel.ring_size = 4;
  const auto e = ui::explain(cfg);
  ASSERT_TRUE(e.ok) << (e.problems.empty() ? "" : e.problems.front());
  EXPECT_EQ(e.R, 4);
  EXPECT_EQ(e.Ng, 256);
  EXPECT_EQ(e.n, 128);
  ASSERT_EQ(e.stages.size(), 6u);
  EXPECT_EQ(e.stages[3].name, "ring attention");
  const int64_t by_hand = 2 /* k, v */ * 256 /* N/R */ * 2 /* kv heads */ * 32 /* dh */ * 4 /* fp32 */ * 3 /* hops */;
  EXPECT_EQ(e.stages[3].bytes_sent, by_hand);
  EXPECT_EQ(e.ring_bytes_per_layer_fwd, by_hand);
  // The all-to-alls of the group move its n = N/(P R) tokens per rank (the cost model's figure).
  EXPECT_EQ(e.a2a_bytes_per_layer_fwd, cost::estimate(cfg).a2a_bytes_per_layer_fwd);
  EXPECT_EQ(e.stages[2].ranks[1][0].tok_end, 256);  // the group's whole N/R after seq->head
  EXPECT_EQ(e.stages[0].ranks[1][0].tok_begin, 128);
  EXPECT_EQ(ui::explain_stage_of_phase(prof::Phase::RingStep), 3);  // a selected ring step names the stage
  // Without a ring the same config draws plain attention over all N tokens.
  cfg.parallel.ring_size = 1;
  const auto u = ui::explain(cfg);
  EXPECT_EQ(u.stages[3].name, "attention");
  EXPECT_EQ(u.stages[3].bytes_sent, 0);
  EXPECT_EQ(u.n, 512);
}

// "Where the weights are" (docs/ZERO.md): the units, pieces and bytes per rank of ZeRO stages 0-3,
// worked out by hand from the Llama parameter formula (V 256, d 64, f 128, 2 layers, 4 heads,
// 2 kv heads of 16): embedding 16384; a layer q 4096 + k 2048 + v 2048 + o 4096 + MLP 24576 +
// two norms 128 = 36992; final norm 64 + lm_head 16384 = 16448; 106816 in all. W = sp 2 x dp 2.
TEST(ExplainWeights, UnitsPiecesAndBytesPerRankByHand) {
  RunConfig c = config(4, 2, 2, 512, 64);
  c.model.intermediate_size = 128;
  c.parallel.dp_size = 2;
  const int64_t params = 106816, layer = 36992, W = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    c.train.zero_stage = stage;
    const auto w = ui::weight_placement(c);
    ASSERT_TRUE(w.ok);
    EXPECT_EQ(w.W, W);
    EXPECT_EQ(w.params, params);
    ASSERT_EQ(w.units.size(), 4u);  // embedding, 2 layers, norm + lm_head
    EXPECT_EQ(w.units[0].numel, 16384);
    EXPECT_EQ(w.units[1].numel, layer);
    EXPECT_EQ(w.units[2].numel, layer);
    EXPECT_EQ(w.units[3].numel, 16448);
    EXPECT_EQ(w.units[1].piece, layer / W);  // 9248: divides evenly
    EXPECT_EQ(w.params_sharded, stage >= 3);
    EXPECT_EQ(w.grads_sharded, stage >= 2);
    EXPECT_EQ(w.optimizer_sharded, stage >= 1);
    const int64_t S = params / W;  // 26704, also the sum of the unit pieces
    EXPECT_EQ(w.units[0].piece + w.units[1].piece + w.units[2].piece + w.units[3].piece, S);
    // fp32: weights 4, gradients 4, AdamW m and v 8 B per parameter, each on a 1/W piece from
    // its stage on (16, 10, 7 and 4 B per parameter).
    EXPECT_EQ(w.param_bytes, (stage >= 3 ? S : params) * 4);
    EXPECT_EQ(w.grad_bytes, (stage >= 2 ? S : params) * 4);
    EXPECT_EQ(w.optimizer_bytes, (stage >= 1 ? S : params) * 8);
    EXPECT_EQ(w.master_bytes, 0);
    EXPECT_EQ(w.host_bytes, 0);
    const int64_t per_param[] = {16, 10, 7, 4};  // B/param (params divides by 4 here)
    EXPECT_EQ(w.device_static_bytes(), per_param[stage] * params);
    // Stage 3 gathers a layer from 3 other ranks' pieces of 9248 fp32 elements.
    EXPECT_EQ(w.gather_bytes_per_layer, stage >= 3 ? 3 * 9248 * 4 : 0);
    EXPECT_EQ(w.reduce_scatter_bytes_per_layer, w.gather_bytes_per_layer);
    if (stage == 3) {
      // Per step: every unit gathered for the forward (26704 elements), the layers again for
      // the backward (2 x 9248), every unit reduce-scattered (26704): x (W-1) x 4 B.
      EXPECT_EQ(w.collective_bytes_per_step, (2 * S + 2 * 9248) * 3 * 4);
      // Rank 3 holds the last piece of each layer.
      EXPECT_EQ(w.piece_of(1, 3), std::make_pair(int64_t{3 * 9248}, int64_t{layer}));
    }
  }
  // Over W = 3 (sp 1 x dp 3) a layer does not divide: pieces of ceil(36992 / 3) = 12331, the
  // last rank's short (36992 - 2 x 12331 = 12330).
  {
    RunConfig c3 = c;
    c3.parallel.sp_size = 1;
    c3.parallel.dp_size = 3;
    c3.train.zero_stage = 3;
    const auto w3 = ui::weight_placement(c3);
    EXPECT_EQ(w3.units[1].piece, 12331);
    EXPECT_EQ(w3.piece_of(1, 2), std::make_pair(int64_t{24662}, int64_t{layer}));
    EXPECT_EQ(w3.gather_bytes_per_layer, 2 * 12331 * 4);
  }
  // bf16 at stage 1 with the optimizer offloaded: bf16 weights and gradients of all
  // parameters on the device, the fp32 master and m, v of the rank's piece in host memory.
  c.train.dtype = "bfloat16";
  c.train.zero_stage = 1;
  c.train.offload_optimizer = true;
  auto w = ui::weight_placement(c);
  EXPECT_EQ(w.device_static_bytes(), params * 2 + params * 2);
  EXPECT_EQ(w.host_bytes, (params / W) * (4 + 8));
  // Stage 3 with both offloads: the bf16 weights piece leaves the device too, and (with
  // train.offload_gradients, the default) the gradient piece beside the offloaded optimizer.
  c.train.zero_stage = 3;
  c.train.offload_params = true;
  c.train.offload_gradients = false;
  w = ui::weight_placement(c);
  EXPECT_EQ(w.param_bytes, 0);
  EXPECT_EQ(w.grad_bytes, (params / W) * 2);
  EXPECT_EQ(w.host_bytes, (params / W) * (4 + 8 + 2));
  c.train.offload_gradients = true;
  w = ui::weight_placement(c);
  EXPECT_EQ(w.grad_bytes, 0);
  EXPECT_EQ(w.host_bytes, (params / W) * (4 + 8 + 2 + 2));
  // Tied embeddings: the head unit is the final norm alone.
  c.model.tie_word_embeddings = true;
  w = ui::weight_placement(c);
  EXPECT_EQ(w.params, params - 16384);
  EXPECT_EQ(w.units.back().numel, 64);
}

// The ring stage hop by hop (docs/RING.md): by hand for R = 2 with zigzag (chunks 0..3,
// rank 0 holds 0 and 3, rank 1 holds 1 and 2), and for R = 4: every unmasked (q, kv) block of
// the causal triangle is computed exactly once over all ranks and hops, zigzag gives every
// rank 2R+1 blocks (the engine's RingAttention test's count), contiguous gives rank r r+1.
TEST(ExplainRing, HopsByHandAndTheTriangleCoveredOnce) {
  const auto h = ui::ring_hops(2, true);
  ASSERT_EQ(h.chunks, 4);
  EXPECT_EQ(h.q_chunks[0], (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(h.q_chunks[1], (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(h.hops.size(), 2u);
  auto blocks = [](const std::vector<ui::RingBlock>& v) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto& b : v) out.push_back({b.q_chunk, b.kv_chunk});
    return out;
  };
  using P = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(blocks(h.hops[0].computed[0]), (P{{0, 0}, {3, 0}, {3, 3}}));
  EXPECT_EQ(blocks(h.hops[0].computed[1]), (P{{1, 1}, {2, 1}, {2, 2}}));
  EXPECT_EQ(h.hops[1].kv_chunks[0], (std::vector<int64_t>{1, 2}));  // rank 1's K/V reached rank 0
  EXPECT_EQ(blocks(h.hops[1].computed[0]), (P{{3, 1}, {3, 2}}));
  EXPECT_EQ(blocks(h.hops[1].computed[1]), (P{{1, 0}, {2, 0}}));
  EXPECT_TRUE(h.hops[0].computed[0][0].diagonal);
  EXPECT_FALSE(h.hops[0].computed[0][1].diagonal);
  for (bool zigzag : {true, false}) {
    const int64_t R = 4;
    const auto g = ui::ring_hops(R, zigzag);
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t r = 0; r < R; ++r) {
      size_t n = 0;
      for (const auto& hop : g.hops) {
        n += hop.computed[size_t(r)].size();
        for (const auto& b : hop.computed[size_t(r)]) EXPECT_TRUE(seen.insert({b.q_chunk, b.kv_chunk}).second);
      }
      EXPECT_EQ(n, size_t(zigzag ? 2 * R + 1 : r + 1)) << "rank " << r << (zigzag ? " zigzag" : " contiguous");
    }
    EXPECT_EQ(seen.size(), size_t(g.chunks * (g.chunks + 1) / 2));
  }
}

// The measured hop: the median of the forward ring exchanges, head-range copies and backward
// exchanges left out (hand-built trace).
TEST(ExplainRing, HopTimeIsTheMedianOfTheForwardExchanges) {
  prof::TraceModel m;
  m.strings = {"ring_step"};
  prof::Lane ring, copy;
  ring.name = "ring kv";
  copy.name = "heads 0-1";
  copy.kind = prof::LaneKind::HeadRange;
  m.lanes = {ring, copy};
  auto add = [&](int32_t lane, int64_t dur, prof::Direction dir) {
    prof::TraceRange r;
    r.lane = lane;
    r.start_ns = 1000;
    r.end_ns = 1000 + dur;
    r.phase = prof::Phase::RingStep;
    r.dir = dir;
    m.ranges.push_back(r);
  };
  add(0, 10, prof::Direction::Forward);
  add(0, 30, prof::Direction::Forward);
  add(0, 20, prof::Direction::Forward);
  add(0, 500, prof::Direction::Backward);
  add(1, 1000, prof::Direction::Forward);
  add(1, 1000, prof::Direction::Forward);
  const auto t = ui::ring_hop_time(m);
  EXPECT_TRUE(t.measured);
  EXPECT_EQ(t.layers, 3);
  EXPECT_DOUBLE_EQ(t.median_ns, 20.0);
  EXPECT_FALSE(ui::ring_hop_time(prof::TraceModel{}).measured);
}

// The all-to-all stages as movement (the explainer's animation): every piece of a stage's blocks
// comes from a rank that held it (same tensor, token shard and heads) in the stage before; the
// pieces' origins are exactly what the stage before holds and their destinations exactly what the
// stage holds (per rank, tensor, token shard and head); and the pieces that change rank carry, per
// rank, the bytes the stage says it sends and receives (cost::a2a_bytes, the engine's labels), by
// hand: q and the output one tensor, k and v two.
TEST(Explain, AllToAllPiecesMoveWhatTheStageBeforeHeldToWhatTheStageHolds) {
  const Case cases[] = {{4, 4, 1}, {4, 4, 2}, {8, 8, 4}, {8, 2, 4}, {16, 2, 8}, {8, 1, 8}, {16, 8, 4}, {32, 8, 8}};
  using Unit = std::tuple<int64_t, int, int64_t, int64_t>;  // rank, kind, token shard, head
  for (const auto& k : cases) {
    SCOPED_TRACE("H=" + std::to_string(k.H) + " Hkv=" + std::to_string(k.Hkv) + " P=" + std::to_string(k.P));
    const auto e = ui::explain(config(k.H, k.Hkv, k.P));
    ASSERT_TRUE(e.ok);
    auto held = [&](int stage) {
      std::set<Unit> u;
      for (int64_t r = 0; r < e.P; ++r)
        for (const auto& b : e.stages[size_t(stage)].ranks[size_t(r)])
          for (int64_t t = b.tok_begin / e.n; t * e.n < b.tok_end; ++t)
            for (int64_t h = b.head_begin; h < b.head_end; ++h) u.insert({r, int(b.kind), t, h});
      return u;
    };
    for (int s = 0; s < 6; ++s) {
      SCOPED_TRACE("stage " + std::to_string(s));
      const auto pieces = ui::stage_pieces(e, s);
      ASSERT_FALSE(pieces.empty());
      const bool a2a = ui::is_all_to_all_stage(e, s);
      EXPECT_EQ(a2a, s == 2 || s == 4);
      std::set<Unit> from, to;
      std::vector<int64_t> sent(size_t(e.P), 0), recv(size_t(e.P), 0);
      for (const auto& p : pieces) {
        ASSERT_GE(p.from, 0) << "a piece no rank held before";
        ASSERT_LT(p.head_begin, p.head_end);
        if (!a2a) {
          EXPECT_EQ(p.from, p.to);
        }
        for (int64_t h = p.head_begin; h < p.head_end; ++h) {
          from.insert({p.from, int(p.kind), p.shard, h});
          to.insert({p.to, int(p.kind), p.shard, h});
        }
        if (p.from != p.to) {
          const int64_t tensors = p.kind == HeadBlock::KV ? 2 : 1;
          const int64_t bytes = tensors * e.B * e.n * (p.head_end - p.head_begin) * e.dh * e.elem_bytes;
          sent[size_t(p.from)] += bytes;
          recv[size_t(p.to)] += bytes;
        }
      }
      EXPECT_EQ(to, held(s)) << "the pieces land on what the stage holds";
      EXPECT_EQ(from, held(a2a ? s - 1 : s)) << "the pieces start from what the stage before held";
      for (int64_t r = 0; r < e.P; ++r) {
        EXPECT_EQ(sent[size_t(r)], a2a ? e.stages[size_t(s)].bytes_sent : 0) << "rank " << r;
        EXPECT_EQ(recv[size_t(r)], a2a ? e.stages[size_t(s)].bytes_recv : 0) << "rank " << r;
      }
      for (const auto& p : pieces) {
        if (s == 2) {  // seq->head: token shard t comes from rank t
          EXPECT_EQ(p.from, p.shard);
        } else if (s == 4) {  // head->seq: the output goes back to the rank of its token shard
          EXPECT_EQ(p.to, p.shard);
        }
      }
    }
  }
}
