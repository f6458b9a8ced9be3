// The explainer's maths (ui/models/explain_model) against independent references: the
// bytes per rank per layer against the cost model's formula (the one tests/e2e checks the
// traced all-to-all bytes against) and a hand-written one; the head each rank owns against
// the engine's rules (local_q_heads / local_kv_heads) and a naive repeat_interleave; for MHA,
// GQA with kv heads replicated (Hkv < P) and split (P divides Hkv), P = 1, 2, 4, 8.
#include <gtest/gtest.h>

#include <set>

#include "cost_model.hpp"
#include "explain_model.hpp"
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
  const Case cases[] = {{4, 4, 1}, {4, 4, 2}, {8, 8, 4}, {16, 16, 8},     // MHA
                        {4, 1, 2}, {8, 2, 4}, {16, 2, 8}, {8, 1, 8},      // GQA, kv replicated
                        {8, 4, 2}, {16, 8, 4}, {16, 4, 4}, {32, 8, 8}};   // GQA, kv split
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

TEST(Explain, RefusedSettingsSayWhy) {
  auto e = ui::explain(config(12, 12, 8, 512, 384));
  EXPECT_FALSE(e.ok);
  ASSERT_FALSE(e.problems.empty());
  EXPECT_NE(e.problems.front().find("num_attention_heads (12) must be divisible by parallel.sp_size (8)"), std::string::npos)
      << e.problems.front();
  e = ui::explain(config(12, 3, 2, 512, 384));  // 3 kv heads over 2 ranks: neither divides
  EXPECT_FALSE(e.ok);
  ASSERT_FALSE(e.problems.empty());
  EXPECT_NE(e.problems.front().find("num_key_value_heads (3)"), std::string::npos) << e.problems.front();
  EXPECT_TRUE(e.stages.empty());
}
