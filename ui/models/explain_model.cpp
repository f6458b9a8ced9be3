// Explainer maths (see explain_model.hpp).
#include "explain_model.hpp"

#include <algorithm>

#include "a2a_volume.hpp"
#include "ring_geometry.hpp"
#include "ulysses_geometry.hpp"

namespace ulysses::ui {

namespace {
std::string tuple(std::initializer_list<int64_t> v) {
  std::string s = "(";
  for (auto it = v.begin(); it != v.end(); ++it) s += (it == v.begin() ? "" : ", ") + std::to_string(*it);
  return s + ")";
}
}  // namespace

// Head ownership: the engine's rules (ulysses_geometry.hpp), not a copy of them.
std::pair<int64_t, int64_t> q_heads_of_rank(int64_t r, int64_t H, int64_t P) {
  const HeadRange q = ulysses_geometry(H, H, P).q_heads_of_rank(r);
  return {q.begin, q.end};
}

std::pair<int64_t, int64_t> kv_heads_of_rank(int64_t r, int64_t Hkv, int64_t P) {
  const HeadRange k = ulysses_geometry(P * Hkv, Hkv, P).kv_heads_of_rank(r);  // H only needs to be valid
  return {k.begin, k.end};
}

namespace {
// The settings the picture is drawn from, and the validation problems that refuse it (heads,
// kv heads, chunks, sizes); false when it cannot be drawn.
bool read_explain_settings(const RunConfig& cfg, Explanation& e) {
  for (const auto& issue : validate(cfg)) {
    const auto& f = issue.field;
    if (f.rfind("model.", 0) == 0 || f == "parallel.sp_size" || f == "parallel.head_chunks" ||
        f == "parallel.ring_size" || f == "train.seq_length" || f == "train.micro_batch_size" || f == "train.dtype")
      e.problems.push_back(issue.message);
  }
  const auto& m = cfg.model;
  e.P = cfg.parallel.sp_size;
  e.H = m.num_attention_heads;
  e.Hkv = m.num_key_value_heads;
  e.N = cfg.train.seq_length;
  e.B = cfg.train.micro_batch_size;
  e.d = m.hidden_size;
  e.chunks = cfg.parallel.head_chunks;
  e.R = std::max<int64_t>(1, cfg.parallel.ring_size);
  e.zigzag = cfg.parallel.ring_zigzag;
  e.elem_bytes = cfg.train.dtype == "bfloat16" ? 2 : 4;
  if (!e.problems.empty() || e.P < 1 || e.H < 1 || e.Hkv < 1 || e.H % e.P || e.N % (e.P * e.R)) {
    if (e.problems.empty()) e.problems.push_back("these settings cannot be split over the ranks");
    return false;
  }
  return true;
}

template <class Make>
std::vector<std::vector<HeadBlock>> blocks_per_rank(int64_t P, Make make) {
  std::vector<std::vector<HeadBlock>> v(static_cast<size_t>(P));
  for (int64_t r = 0; r < P; ++r) v[static_cast<size_t>(r)] = make(r);
  return v;
}

// 1. q/k/v projection: every head of the local tokens (kv heads replicated when Hkv < P).
ExplainStage projection_stage(const Explanation& e, const UlyssesGeometry& geo) {
  const int64_t P = e.P, H = e.H, Hkv = e.Hkv, B = e.B, n = e.n, dh = e.dh;
  std::vector<std::vector<HeadBlock>> proj = blocks_per_rank(P, [&](int64_t r) {
    std::vector<HeadBlock> b{{HeadBlock::Q, r * n, (r + 1) * n, 0, H, false}};
    if (e.kv_replicated) {
      for (int64_t j = 0; j < P; ++j) {  // expanded kv head j = kv head j / (P/Hkv)
        const int64_t k = geo.kv_head_of_sent(j);
        b.push_back({HeadBlock::KV, r * n, (r + 1) * n, k, k + 1, true});
      }
    } else {
      b.push_back({HeadBlock::KV, r * n, (r + 1) * n, 0, Hkv, false});
    }
    return b;
  });
  return {"q/k/v projection",
          e.kv_replicated
              ? "q for all H heads; k, v for the Hkv kv heads, repeated to P copies so every rank gets one"
              : "q for all H heads, k and v for all Hkv kv heads, of the local tokens (RoPE with global positions)",
          "q (B, N/P, H, dh) = " + tuple({B, n, H, dh}) + ";  k, v (B, N/P, " +
              (e.kv_replicated ? std::string("P") : std::string("Hkv")) + ", dh) = " + tuple({B, n, e.Hkv_sent, dh}),
          proj,
          0,
          0};
}

// 3. attention over the whole sequence for the local heads (ring attention with a ring; sets
// the ring's bytes as the engine sends them: each head chunk passes its kv heads round).
ExplainStage attention_stage(Explanation& e) {
  const int64_t P = e.P, H = e.H, N = e.Ng, B = e.B, dh = e.dh, h = H / P, hk_sent = e.Hkv_sent / P;
  auto out_blocks = blocks_per_rank(P, [&](int64_t r) {
    const auto [q0, q1] = q_heads_of_rank(r, H, P);
    return std::vector<HeadBlock>{{HeadBlock::Out, 0, N, q0, q1, false}};
  });
  if (e.R <= 1)
    return {"attention",
            "causal attention over all N tokens for the rank's H/P heads" +
                (e.chunks > 1
                     ? " (in " + std::to_string(e.chunks) + " head chunks, each overlapping the next chunk's exchange)"
                     : std::string()),
            "out (B, N, H/P, dh) = " + tuple({B, N, h, dh}),
            out_blocks,
            0,
            0};
  const UlyssesGeometry cg = ulysses_geometry(H, e.Hkv_sent, P, std::max<int64_t>(1, e.chunks));
  for (int64_t c = 0; c < cg.C; ++c)
    e.ring_bytes_per_layer_fwd +=
        ring_bytes_per_rank(e.R, B, N, cg.chunk_attention_kv_heads(c), e.dh, e.elem_bytes).forward;
  return {"ring attention",
          "causal attention for the rank's H/P heads over all N tokens: the group holds N/R of them, the rest "
          "live on the " +
              std::to_string(e.R - 1) +
              " other ring rank(s) with the same heads; their K/V blocks travel round the "
              "ring (" +
              std::to_string(e.R - 1) + " hop(s)) while each block is computed" +
              (e.zigzag ? " (zigzag: ring rank r holds chunks r and 2R-1-r)" : std::string()),
          "out (B, N/R, H/P, dh) = " + tuple({B, N, h, dh}) + ";  K/V block (2, B, " + std::to_string(hk_sent) +
              ", N/R, dh) = " + tuple({2, B, hk_sent, N, dh}),
          out_blocks,
          e.ring_bytes_per_layer_fwd,
          e.ring_bytes_per_layer_fwd};
}
}  // namespace

Explanation explain(const RunConfig& cfg) {
  Explanation e;
  if (!read_explain_settings(cfg, e)) return e;
  e.ok = true;
  // N below is the tokens of the Ulysses group drawn (ring rank 0's N/R; all of them without a ring).
  e.Ng = e.N / e.R;
  const int64_t P = e.P, H = e.H, Hkv = e.Hkv, N = e.Ng, B = e.B, d = e.d, eb = e.elem_bytes;
  e.dh = cfg.model.head_dim();  // an explicit head_dim (Qwen3) is not hidden_size / heads
  e.n = N / P;
  const UlyssesGeometry geo = ulysses_geometry(H, Hkv, P);
  e.kv_replicated = geo.kv_replicated();
  e.Hkv_sent = geo.kv_heads_sent;  // kv heads after replication, before the all-to-all
  const int64_t n = e.n, dh = e.dh, h = H / P, hk_sent = e.Hkv_sent / P;
  auto kv_block = [&](int64_t r, int64_t tb, int64_t te) {
    const auto [k0, k1] = kv_heads_of_rank(r, Hkv, P);
    return HeadBlock{HeadBlock::KV, tb, te, k0, k1, e.kv_replicated};
  };

  // 0. shard: rank r holds tokens [r n, (r+1) n) of the hidden states.
  e.stages.push_back(
      {"sequence shard", "each rank holds a contiguous 1/P of the sequence (all of the hidden size)",
       "x (B, N/P, d) = " + tuple({B, n, d}),
       blocks_per_rank(P,
                       [&](int64_t r) {
                         return std::vector<HeadBlock>{{HeadBlock::Hidden, r * n, (r + 1) * n, 0, H, false}};
                       }),
       0, 0});
  e.stages.push_back(projection_stage(e, geo));
  // 2. seq->head all-to-all: rank r gets every token of its heads.
  const int64_t qkv_elements = B * n * (H + 2 * e.Hkv_sent) * dh;  // this rank's send buffer (q, k, v)
  const int64_t s2h = cost::a2a_bytes(qkv_elements, eb, P);
  e.stages.push_back(
      {"all-to-all seq→head",
       "blocks move to the rank that owns their heads: rank r receives tokens of every rank for heads "
       "r·H/P.. (own 1/P stays)",
       "q (B, N, H/P, dh) = " + tuple({B, N, h, dh}) + ";  k, v (B, N, " + std::to_string(hk_sent) +
           ", dh) = " + tuple({B, N, hk_sent, dh}),
       blocks_per_rank(P,
                       [&](int64_t r) {
                         const auto [q0, q1] = q_heads_of_rank(r, H, P);
                         return std::vector<HeadBlock>{{HeadBlock::Q, 0, N, q0, q1, false}, kv_block(r, 0, N)};
                       }),
       s2h, s2h});
  e.stages.push_back(attention_stage(e));
  // 4. head->seq all-to-all: back to the sequence shard, all heads.
  const int64_t h2s = cost::a2a_bytes(B * n * H * dh, eb, P);
  e.stages.push_back(
      {"all-to-all head→seq", "each rank sends every other rank its tokens' slice of the attention output",
       "out (B, N/P, H, dh) = " + tuple({B, n, H, dh}),
       blocks_per_rank(P,
                       [&](int64_t r) {
                         return std::vector<HeadBlock>{{HeadBlock::Out, r * n, (r + 1) * n, 0, H, false}};
                       }),
       h2s, h2s});
  // 5. output projection.
  e.stages.push_back(
      {"output projection", "o_proj mixes the heads back into the hidden size, still sequence-sharded",
       "y (B, N/P, d) = " + tuple({B, n, d}),
       blocks_per_rank(P,
                       [&](int64_t r) {
                         return std::vector<HeadBlock>{{HeadBlock::Hidden, r * n, (r + 1) * n, 0, H, false}};
                       }),
       0, 0});
  e.a2a_bytes_per_layer_fwd = s2h + h2s;
  return e;
}

bool is_all_to_all_stage(const Explanation& e, int stage) {
  return e.ok && (stage == 2 || stage == 4) && static_cast<size_t>(stage) < e.stages.size();
}

std::vector<MovedPiece> stage_pieces(const Explanation& e, int stage) {
  std::vector<MovedPiece> out;
  if (!e.ok || stage < 0 || static_cast<size_t>(stage) >= e.stages.size() || e.n <= 0) return out;
  const bool a2a = is_all_to_all_stage(e, stage);
  const auto& after = e.stages[static_cast<size_t>(stage)].ranks;
  const auto& before = e.stages[static_cast<size_t>(a2a ? stage - 1 : stage)].ranks;
  // The rank that held head h of token shard t before (r itself first: what a rank keeps does not
  // move), and the end of the heads that block covers.
  auto source = [&](HeadBlock::Kind kind, int64_t r, int64_t t, int64_t h) -> std::pair<int64_t, int64_t> {
    for (int64_t i = -1; i < e.P; ++i) {
      const int64_t q = i < 0 ? r : i;
      if (i == r) continue;
      for (const auto& b : before[static_cast<size_t>(q)])
        if (b.kind == kind && b.tok_begin <= t * e.n && (t + 1) * e.n <= b.tok_end && b.head_begin <= h &&
            h < b.head_end)
          return {q, b.head_end};
    }
    return {-1, h + 1};
  };
  for (int64_t r = 0; r < static_cast<int64_t>(after.size()); ++r)
    for (const auto& b : after[static_cast<size_t>(r)])
      for (int64_t t = b.tok_begin / e.n; t * e.n < b.tok_end; ++t) {
        if (!a2a) {
          out.push_back({b.kind, t, b.head_begin, b.head_end, b.replicated, r, r});
          continue;
        }
        for (int64_t h = b.head_begin; h < b.head_end;) {
          const auto [q, end] = source(b.kind, r, t, h);
          const int64_t stop = std::min(end, b.head_end);
          out.push_back({b.kind, t, h, stop, b.replicated, q, r});
          h = stop;
        }
      }
  return out;
}

RingHops ring_hops(int64_t R, bool zigzag) {
  RingHops h;
  RingLayout L;
  L.ring = std::max<int64_t>(1, R);
  L.zigzag = zigzag;
  h.R = L.ring;
  h.chunks = L.chunks();
  for (int64_t r = 0; r < h.R; ++r) h.q_chunks.push_back(L.chunks_of_rank(r));
  for (int64_t k = 0; k < h.R; ++k) {
    RingHop hop;
    for (int64_t r = 0; r < h.R; ++r) {
      const int64_t from = ((r - k) % h.R + h.R) % h.R;  // K/V travel to the next ring rank
      hop.kv_chunks.push_back(h.q_chunks[static_cast<size_t>(from)]);
      std::vector<RingBlock> blocks;
      for (int64_t a : h.q_chunks[static_cast<size_t>(r)])
        for (int64_t b : hop.kv_chunks.back())
          if (b <= a) blocks.push_back({a, b, a == b});
      hop.computed.push_back(std::move(blocks));
    }
    h.hops.push_back(std::move(hop));
  }
  return h;
}

}  // namespace ulysses::ui
