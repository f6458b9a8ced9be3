// Ulysses head geometry (engine/config/ulysses_geometry): every answer against values
// written by hand for MHA, GQA with split kv heads, GQA with replicated kv heads and the
// refused settings, at several sp sizes; plus a brute-force check of the chunk schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "run_config.hpp"
#include "ulysses_geometry.hpp"

using namespace ulysses;

namespace {
struct Expect {
  int64_t H, Hkv, P;
  int64_t h, hk, R, sent, G;
  std::vector<HeadRange> q_of_rank, kv_of_rank;  // global heads, rank by rank
};

void check(const Expect& x) {
  SCOPED_TRACE("H=" + std::to_string(x.H) + " Hkv=" + std::to_string(x.Hkv) + " P=" + std::to_string(x.P));
  const auto g = ulysses_geometry(x.H, x.Hkv, x.P);
  ASSERT_TRUE(g.ok()) << g.refusal();
  EXPECT_EQ(g.refusal(), "");
  EXPECT_EQ(g.local_q_heads, x.h);
  EXPECT_EQ(g.local_kv_heads, x.hk);
  EXPECT_EQ(g.replication, x.R);
  EXPECT_EQ(g.kv_replicated(), x.R > 1);
  EXPECT_EQ(g.kv_heads_sent, x.sent);
  EXPECT_EQ(g.q_per_kv, x.G);
  ASSERT_EQ(static_cast<int64_t>(x.q_of_rank.size()), x.P);
  for (int64_t r = 0; r < x.P; ++r) {
    EXPECT_EQ(g.q_heads_of_rank(r), x.q_of_rank[r])
        << "rank " << r << " q: [" << g.q_heads_of_rank(r).begin << ", " << g.q_heads_of_rank(r).end << ")";
    EXPECT_EQ(g.kv_heads_of_rank(r), x.kv_of_rank[r])
        << "rank " << r << " kv: [" << g.kv_heads_of_rank(r).begin << ", " << g.kv_heads_of_rank(r).end << ")";
  }
}
}  // namespace

TEST(Geometry, Mha) {
  check({8, 8, 1, 8, 8, 1, 8, 1, {{0, 8}}, {{0, 8}}});
  check({8, 8, 2, 4, 4, 1, 8, 1, {{0, 4}, {4, 8}}, {{0, 4}, {4, 8}}});
  check({8, 8, 4, 2, 2, 1, 8, 1, {{0, 2}, {2, 4}, {4, 6}, {6, 8}}, {{0, 2}, {2, 4}, {4, 6}, {6, 8}}});
  check({4, 4, 4, 1, 1, 1, 4, 1, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}});
}

TEST(Geometry, GqaSplit) {
  // 8 q heads, 4 kv heads (groups of 2): kv heads split when P divides 4.
  check({8, 4, 2, 4, 2, 1, 4, 2, {{0, 4}, {4, 8}}, {{0, 2}, {2, 4}}});
  check({8, 4, 4, 2, 1, 1, 4, 2, {{0, 2}, {2, 4}, {4, 6}, {6, 8}}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}});
  // 32 q heads, 8 kv heads over 4 ranks: 8 q heads and 2 kv heads each.
  check({32, 8, 4, 8, 2, 1, 8, 4, {{0, 8}, {8, 16}, {16, 24}, {24, 32}}, {{0, 2}, {2, 4}, {4, 6}, {6, 8}}});
}

TEST(Geometry, GqaReplicated) {
  // 8 q heads, 2 kv heads over 4 ranks: each kv head copied twice; ranks 0,1 share kv head 0.
  check({8, 2, 4, 2, 1, 2, 4, 2, {{0, 2}, {2, 4}, {4, 6}, {6, 8}}, {{0, 1}, {0, 1}, {1, 2}, {1, 2}}});
  // MQA: 8 q heads, 1 kv head over 8 ranks: 8 copies, every rank kv head 0.
  check({8,
         1,
         8,
         1,
         1,
         8,
         8,
         1,
         {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}},
         {{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}}});
  // 16 q heads, 2 kv heads over 8 ranks: R = 4.
  check({16,
         2,
         8,
         2,
         1,
         4,
         8,
         2,
         {{0, 2}, {2, 4}, {4, 6}, {6, 8}, {8, 10}, {10, 12}, {12, 14}, {14, 16}},
         {{0, 1}, {0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 2}, {1, 2}, {1, 2}}});
  const auto g = ulysses_geometry(16, 2, 8);
  for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(g.kv_head_of_sent(j), j / 4);  // repeat_interleave(4)
}

TEST(Geometry, RefusedWithTheEngineMessages) {
  // 6 kv heads over 4 ranks: neither divides the other (12 q heads split fine).
  auto g = ulysses_geometry(12, 6, 4);
  EXPECT_FALSE(g.ok());
  ASSERT_EQ(g.issues.size(), 1u);
  EXPECT_EQ(g.issues[0].field, "model.num_key_value_heads");
  EXPECT_EQ(g.refusal(),
            "model.num_key_value_heads (6) must be divisible by parallel.sp_size (4), or divide it so that kv heads "
            "can be replicated");
  EXPECT_EQ(g.local_q_heads, 0);  // nothing derived from a refused geometry
  // 2 kv heads over 3 ranks (and 6 q heads): 3 % 2 != 0, so no replication either.
  g = ulysses_geometry(6, 2, 3);
  ASSERT_EQ(g.issues.size(), 1u);
  EXPECT_EQ(g.issues[0].field, "model.num_key_value_heads");
  // 12 q heads over 8 ranks; 12 kv heads neither: both reported, heads first.
  g = ulysses_geometry(12, 12, 8);
  ASSERT_EQ(g.issues.size(), 2u);
  EXPECT_EQ(g.issues[0].field, "parallel.sp_size");
  EXPECT_EQ(g.issues[0].message, "model.num_attention_heads (12) must be divisible by parallel.sp_size (8)");
  EXPECT_EQ(g.issues[1].field, "model.num_key_value_heads");
  // GQA groups: 12 q heads cannot share 5 kv heads.
  g = ulysses_geometry(12, 5, 1);
  ASSERT_EQ(g.issues.size(), 1u);
  EXPECT_EQ(g.issues[0].message, "model.num_attention_heads (12) must be divisible by model.num_key_value_heads (5)");
  // head chunks must divide the local q heads (8 / 4 = 2 local heads; 3 chunks refused).
  g = ulysses_geometry(8, 8, 4, 3);
  ASSERT_EQ(g.issues.size(), 1u);
  EXPECT_EQ(g.issues[0].field, "parallel.head_chunks");
  EXPECT_EQ(g.issues[0].message,
            "parallel.head_chunks (3) must divide the local heads per rank, num_attention_heads/sp_size = 2");
  EXPECT_TRUE(ulysses_geometry(8, 8, 4, 2).ok());
  // non-positive sizes
  EXPECT_FALSE(ulysses_geometry(0, 1, 1).ok());
  EXPECT_FALSE(ulysses_geometry(8, 8, 0).ok());
  EXPECT_FALSE(ulysses_geometry(8, 8, 1, 0).ok());
}

// validate() reports exactly the geometry's refusals (no second copy of the rule).
TEST(Geometry, ValidateReportsTheGeometryIssues) {
  for (int64_t H : {4, 6, 8, 12, 16})
    for (int64_t Hkv : {1, 2, 3, 4, 6, 8, 12, 16})
      for (int64_t P : {1, 2, 3, 4, 8})
        for (int64_t C : {1, 2, 3}) {
          RunConfig c;
          c.model.num_attention_heads = H;
          c.model.num_key_value_heads = Hkv;
          c.model.hidden_size = H * 16;
          c.parallel.sp_size = P;
          c.parallel.head_chunks = C;
          c.train.seq_length = 48 * P;
          const auto g = ulysses_geometry(c);
          const auto v = validate(c);
          for (const auto& i : g.issues) {
            const bool found = std::any_of(
                v.begin(), v.end(), [&](const ConfigIssue& x) { return x.field == i.field && x.message == i.message; });
            EXPECT_TRUE(found) << i.message;
          }
          for (const auto& x : v)
            EXPECT_TRUE(x.field == "model.num_key_value_heads" || x.field == "parallel.sp_size" ||
                        x.field == "parallel.head_chunks")
                << x.field << ": " << x.message;
          EXPECT_EQ(v.empty(), g.ok()) << H << " " << Hkv << " " << P << " " << C;
        }
}

// The chunk schedule against brute force: chunk c's q heads need exactly kv heads
// [need_lo, need_hi) (local q head i uses kv head i / G); every kv head is sent with the
// first chunk that needs it and done with the last one.
TEST(Geometry, ChunkScheduleMatchesBruteForce) {
  for (int64_t H : {4, 8, 12, 16})
    for (int64_t Hkv : {1, 2, 4, 8, 16})
      for (int64_t P : {1, 2, 4})
        for (int64_t C : {1, 2, 3, 4}) {
          const auto g = ulysses_geometry(H, Hkv, P, C);
          if (!g.ok()) continue;
          int64_t sent = 0;
          for (int64_t c = 0; c < C; ++c) {
            int64_t lo = INT64_MAX, hi = -1;
            for (int64_t i = c * (g.local_q_heads / C); i < (c + 1) * (g.local_q_heads / C); ++i) {
              lo = std::min(lo, i / g.q_per_kv);
              hi = std::max(hi, i / g.q_per_kv + 1);
            }
            EXPECT_EQ(g.need_lo(c), lo);
            EXPECT_EQ(g.need_hi(c), hi);
            EXPECT_EQ(g.send_lo(c), sent);
            sent = std::max(sent, hi);
            EXPECT_EQ(g.send_hi(c), sent);
            // done in chunk c: kv heads whose last user is c
            for (int64_t k = 0; k < g.local_kv_heads; ++k) {
              const int64_t last_user = ((k + 1) * g.q_per_kv - 1) / (g.local_q_heads / C);
              EXPECT_EQ(k >= g.done_lo(c) && k < g.done_hi(c), last_user == c) << "kv " << k << " chunk " << c;
            }
          }
          EXPECT_EQ(sent, g.local_kv_heads);
        }
}
