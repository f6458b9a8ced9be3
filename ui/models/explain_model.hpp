// The explainer's model (docs/STUDIO.md): for a run config, what each of the P ranks holds at
// each stage of one Ulysses attention layer (forward), as blocks [tokens × heads], with the
// tensor shapes and the bytes each rank sends and receives. Qt-free and widget-free: the
// explain view only draws this. Head ownership follows the engine (rank r owns q heads
// [r·H/P, (r+1)·H/P); kv heads split Hkv/P per rank when P divides Hkv, else replicated:
// repeat_interleave(P/Hkv) so rank r gets kv head r·Hkv/P); bytes are cost::a2a_bytes,
// the function the engine labels its traced all-to-alls with. Refused settings carry the
// engine's own validation messages (config::validate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses::ui {

// A block of a tensor a rank holds: tokens [tok_begin, tok_end) × heads [head_begin, head_end).
struct HeadBlock {
  enum Kind { Hidden, Q, KV, Out } kind = Q;
  int64_t tok_begin = 0, tok_end = 0;
  int64_t head_begin = 0, head_end = 0;  // q heads for Q/Out, kv heads for KV; hidden: all heads
  bool replicated = false;               // KV: this kv head is a copy (Hkv < P)
};

struct ExplainStage {
  std::string name;                           // "shard", "q/k/v projection", "all-to-all seq→head", ...
  std::string detail;                         // one sentence
  std::string shapes;                         // per rank: "q (B, N/P, H, dh) = (1, 256, 4, 16)"
  std::vector<std::vector<HeadBlock>> ranks;  // [P] blocks each rank holds after the stage
  int64_t bytes_sent = 0;                     // per rank, this stage (all-to-alls only)
  int64_t bytes_recv = 0;
};

struct Explanation {
  bool ok = false;
  std::vector<std::string> problems;  // why the settings are refused (engine's messages)
  int64_t P = 1, H = 0, Hkv = 0, Hkv_sent = 0, N = 0, n = 0, B = 1, d = 0, dh = 0, chunks = 1, elem_bytes = 4;
  // Ulysses x ring (parallel.ring_size R > 1): the picture is one Ulysses group, that of ring
  // rank 0, whose P ranks share Ng = N/R tokens (n = N/(P R) each); its attention stage is
  // ring attention, the K/V of its heads travelling round the R ranks of each ring.
  int64_t R = 1, Ng = 0;
  bool zigzag = true;                    // parallel.ring_zigzag (ring_hops)
  int64_t ring_bytes_per_layer_fwd = 0;  // per rank, the attention stage's ring exchanges
  bool kv_replicated = false;
  std::vector<ExplainStage> stages;
  int64_t a2a_bytes_per_layer_fwd = 0;  // sum over the stages, per rank
};

Explanation explain(const RunConfig& cfg);

// The ring attention stage hop by hop (parallel.ring_size R > 1), as the engine runs it
// (engine/config/ring_geometry.hpp's RingLayout): the sequence held by the ring is cut into
// R chunks (2R with zigzag, ring rank r holding chunks r and 2R-1-r); at hop k ring rank r
// holds the K/V chunks of ring rank (r - k) mod R (blocks travel to the next rank) and
// computes the (q chunk, kv chunk) blocks with unmasked entries: kv chunk <= q chunk, the
// equal one a diagonal block under the causal mask.
struct RingBlock {
  int64_t q_chunk = 0, kv_chunk = 0;
  bool diagonal = false;
};
struct RingHop {
  std::vector<std::vector<int64_t>> kv_chunks;   // [ring rank] chunks of K/V it holds at this hop
  std::vector<std::vector<RingBlock>> computed;  // [ring rank] blocks it computes at this hop
};
struct RingHops {
  int64_t R = 1, chunks = 1;                   // chunks the ring's sequence is cut into
  std::vector<std::vector<int64_t>> q_chunks;  // [ring rank] its own (query) chunks
  std::vector<RingHop> hops;                   // hop 0 (own K/V) .. R-1
};
RingHops ring_hops(int64_t R, bool zigzag);

// The all-to-all stages as movement (the explainer animates them): the blocks a stage holds cut
// into pieces, one token shard of N/P × a head range each, with the rank that held the piece in
// the stage before (`from`) and the rank that holds it after (`to`). A piece keeps its token
// shard and its heads, so its place in a rank's grid; only its rank changes. The pieces of a
// stage that is no all-to-all stay where they are (from == to).
struct MovedPiece {
  HeadBlock::Kind kind = HeadBlock::Q;
  int64_t shard = 0;                     // token shard (rows of the picture)
  int64_t head_begin = 0, head_end = 0;  // as HeadBlock's
  bool replicated = false;
  int64_t from = 0, to = 0;  // ranks; from = -1 if no rank held it before (a model error)
};
// Stages 2 (seq→head) and 4 (head→seq) of a valid explanation.
bool is_all_to_all_stage(const Explanation& e, int stage);
std::vector<MovedPiece> stage_pieces(const Explanation& e, int stage);

// kv heads of rank r after the seq->head all-to-all, as the engine assigns them (original
// kv head indices; one head when replicated).
std::pair<int64_t, int64_t> kv_heads_of_rank(int64_t r, int64_t Hkv, int64_t P);
// q heads of rank r after the seq->head all-to-all.
std::pair<int64_t, int64_t> q_heads_of_rank(int64_t r, int64_t H, int64_t P);

}  // namespace ulysses::ui
