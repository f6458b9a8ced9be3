// Ring attention geometry (docs/RING.md): how a ring of R ranks splits the sequence and which
// attention blocks each rank computes. Torch-free, like ulysses_geometry.hpp.
//
// Layout (N = sequence tokens held by the ring, R = ring_size):
//   contiguous: N split into R chunks of N/R tokens; rank r holds chunk r.
//   zigzag:     N split into 2R chunks of N/(2R) tokens; rank r holds chunks r and 2R-1-r
//               (in that order), so every rank has the same share of the causal triangle.
// A (q chunk a, kv chunk b) block is unmasked when b <= a (causal); a == b is the diagonal
// block (causal mask inside), b < a is a full block.
#pragma once

#include <cstdint>
#include <vector>

#include "run_config.hpp"

namespace ulysses {

struct RingLayout {
  int64_t ring = 1;    // R
  bool zigzag = true;  // causal load balancing (no effect on a ring of 1)
  // Rows and columns of the score tiles one (q chunk, kv chunk) block is computed in (the
  // online softmax runs across tiles as across blocks), so memory per step is O(tile^2),
  // not O((N/chunks)^2): as the blocked CPU kernel's 256.
  int64_t tile = 256;
  bool balanced() const { return zigzag && ring > 1; }
  int64_t chunks() const { return balanced() ? 2 * ring : ring; }
  int64_t chunks_per_rank() const { return balanced() ? 2 : 1; }
  // Global chunk indices rank r holds, in local order.
  std::vector<int64_t> chunks_of_rank(int64_t r) const;
  // (q chunk, kv chunk) blocks rank r computes with unmasked entries over a whole ring pass.
  int64_t unmasked_blocks(int64_t r) const;
};

// The sequence over sp x ring ranks (Ulysses x ring, docs/RING.md): ring rank r's tokens
// are its layout chunks in local order (N/R tokens); its Ulysses group of `sp` ranks splits
// them into sp equal contiguous pieces, Ulysses rank s holding piece s, so that the
// seq->head all-to-all gives every member the ring rank's tokens in the layout's order.
// Returns the global token ranges [begin, end) of (ring_rank, sp_rank), in local order
// (adjacent ranges merged). N must divide by sp x layout.chunks() (ring_issues).
struct TokenRange {
  int64_t begin = 0, end = 0;
  bool operator==(const TokenRange& o) const { return begin == o.begin && end == o.end; }
};
std::vector<TokenRange> seq_shard_ranges(int64_t seq_length, int64_t sp, const RingLayout& layout, int64_t ring_rank,
                                         int64_t sp_rank);

// Bytes one ring rank sends per attention layer and micro-batch (docs/RING.md): K and V of
// `kv_heads` heads (those this rank attends with: Hkv / sp_size) over `tokens` = N / R
// tokens, e bytes each, travel R-1 hops forward and R-1 hops again backward; the fp32 dK/dV
// accumulators travel R hops backward. Received bytes are the same.
struct RingBytes {
  int64_t forward = 0, backward = 0;
};
RingBytes ring_bytes_per_rank(int64_t ring, int64_t batch, int64_t tokens, int64_t kv_heads, int64_t head_dim,
                              int64_t elem_bytes);

// Refusals for a ring of `ring` ranks inside Ulysses groups of `sp` ranks over a sequence of
// `seq_length` tokens: sizes must be positive and seq_length divisible by sp x ring (x 2
// with zigzag). Messages name the numbers. Empty when fine.
std::vector<ConfigIssue> ring_issues(int64_t seq_length, int64_t sp, int64_t ring, bool zigzag);

// The ring transport (parallel.ring_transport) a run on collective backend `backend` ("gloo"
// or "nccl", as Comm decided it) uses: "auto" gives "alltoall" on nccl and "p2p" elsewhere;
// "p2p" and "alltoall" are kept. p2p posts a send and a receive per exchange, which on NCCL
// makes each rank create its (r, r+1) pair communicator before its (r-1, r) one and can
// deadlock; alltoall is one all-to-all with split sizes on the ring group's own
// communicator. Throws ConfigError for p2p on nccl and for an unknown setting.
std::string ring_transport_for(const std::string& setting, const std::string& backend);

}  // namespace ulysses
