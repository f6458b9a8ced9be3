// Ulysses head geometry: the one place that says how H q heads and Hkv kv heads split over
// P = sp_size ranks (and each rank's heads over head chunks), and which settings are
// refused. Used by validate(), the cost model, the engine's model (kv replication) and
// Ulysses attention (chunk schedule), and the studio's explainer. Torch-free and Qt-free.
//
// Rules (H = num_attention_heads, Hkv = num_key_value_heads, P = sp_size, C = head_chunks):
//   H % Hkv == 0                  GQA groups of G = H/Hkv q heads per kv head
//   H % P == 0                    rank r owns q heads [r*H/P, (r+1)*H/P)
//   Hkv % P == 0                  kv heads split: rank r owns kv heads [r*Hkv/P, (r+1)*Hkv/P)
//   else Hkv < P and P % Hkv == 0 kv heads replicated R = P/Hkv times before the all-to-all
//                                 (repeat_interleave(R) on the head axis): P heads are sent,
//                                 rank r gets expanded head r = kv head r/R
//   else                          refused
//   (H/P) % C == 0                chunk c of a rank holds local q heads [c*H/(P*C), (c+1)*H/(P*C))
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses {

// Half-open range of head indices [begin, end).
struct HeadRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const HeadRange& o) const { return begin == o.begin && end == o.end; }
};

struct UlyssesGeometry {
  // Inputs.
  int64_t H = 0, Hkv = 0, P = 1, C = 1;
  // Derived (meaningful when ok()).
  int64_t local_q_heads = 0;   // h = H/P
  int64_t replication = 1;     // R: copies of each kv head before the all-to-all (1 = split)
  int64_t kv_heads_sent = 0;   // kv heads after replication, before the all-to-all: Hkv*R
  int64_t local_kv_heads = 0;  // hk = kv_heads_sent/P, kv heads a rank attends with
  int64_t q_per_kv = 0;        // G = h/hk: local q head i uses local kv head i/G
  int64_t chunk_q_heads = 0;   // hc = h/C
  // Problems (field + message a user can act on), in the order validate() reports them.
  std::vector<ConfigIssue> issues;

  bool ok() const { return issues.empty(); }
  bool kv_replicated() const { return replication > 1; }
  // The problems, one per line; empty when ok().
  std::string refusal() const;

  // Global q heads rank r owns after the seq->head all-to-all.
  HeadRange q_heads_of_rank(int64_t r) const { return {r * local_q_heads, (r + 1) * local_q_heads}; }
  // Global (original, not expanded) kv heads rank r attends with: one shared head when replicated.
  HeadRange kv_heads_of_rank(int64_t r) const;
  // Original kv head of expanded (sent) kv head j.
  int64_t kv_head_of_sent(int64_t j) const { return j / replication; }

  // Chunk schedule inside one rank (local kv head indices). Chunk c needs local kv heads
  // [need_lo, need_hi); a kv head travels seq->head with the first chunk that needs it
  // (send range) and its dk/dv travel back with the last chunk that uses it (done range).
  int64_t need_lo(int64_t c) const { return c * chunk_q_heads / q_per_kv; }
  int64_t need_hi(int64_t c) const { return ((c + 1) * chunk_q_heads - 1) / q_per_kv + 1; }
  int64_t send_lo(int64_t c) const { return c == 0 ? 0 : need_hi(c - 1); }
  int64_t send_hi(int64_t c) const { return need_hi(c); }
  int64_t done_lo(int64_t c) const { return c * chunk_q_heads / q_per_kv; }
  int64_t done_hi(int64_t c) const { return (c + 1) * chunk_q_heads / q_per_kv; }
  // Chunk c's kv head (relative to need_lo(c)) for each of its q heads, when the attention
  // kernels' grouping (q head i -> kv head i / (hc / nneed)) would pair them wrongly; empty
  // when it pairs them right (the chunk holds whole groups or lies inside one).
  std::vector<int64_t> chunk_kv_index(int64_t c) const;
  // The kv heads chunk c's attention runs with (what ring attention passes round): its
  // need range, or one per q head when paired by index.
  int64_t chunk_attention_kv_heads(int64_t c) const {
    return chunk_kv_index(c).empty() ? need_hi(c) - need_lo(c) : chunk_q_heads;
  }
};

// The geometry of H q heads, Hkv kv heads over P ranks in C head chunks. Never throws:
// refusals are in .issues (fields model.num_key_value_heads, parallel.sp_size,
// parallel.head_chunks, or model.num_attention_heads for non-positive sizes).
UlyssesGeometry ulysses_geometry(int64_t H, int64_t Hkv, int64_t P, int64_t C = 1);
UlyssesGeometry ulysses_geometry(const RunConfig& cfg);

}  // namespace ulysses
