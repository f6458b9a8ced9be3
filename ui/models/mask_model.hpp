// The explainer's document-mask stage (data.kind = "documents", docs/LONG_SEQUENCES.md#packed-documents):
// one packed sequence's block-diagonal causal mask cut into G x G blocks, each counted as the
// kernels see it (skipped: no unmasked pair; full: no masked pair; else partial), the share of
// the causal (query, key) pairs the mask keeps, and for a ring (parallel.ring_size R > 1) the
// (query chunk, K/V chunk) blocks of every hop (ring_hops) with those the mask empties, which the
// ring skips. The sequence is the first packed one of data.path when the config names a
// readable prepared folder, else an example. Widget-free; the explainer draws it.
#pragma once

#include <QString>
#include <cstdint>
#include <vector>

#include "run_config.hpp"

namespace ulysses::ui {

struct MaskCell {
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;  // query and key positions [q0, q1) x [k0, k1)
  int64_t live = 0, causal = 0;            // unmasked pairs; causal pairs (k <= q)
  bool skipped() const { return live == 0; }
  bool full() const { return live > 0 && live == (q1 - q0) * (k1 - k0); }
};

struct MaskRingCell {
  int64_t rank = 0, hop = 0, q_chunk = 0, kv_chunk = 0;
  int64_t live = 0, causal = 0;
};

struct DocumentMaskPicture {
  bool ok = false;
  QString source;               // "the first packed sequence of DIR" or "an example"
  int64_t N = 0;                // train.seq_length
  std::vector<int64_t> docs;    // the sequence's document lengths in order (padding: the last, when any)
  int64_t padding = 0;          // tokens of padding at its end
  int64_t G = 0;                // blocks per side
  std::vector<MaskCell> cells;  // G x G, row-major by query block; key blocks above the diagonal have causal 0
  int64_t causal_pairs = 0, live_pairs = 0;
  // Ring (R > 1): the hop blocks of ring rank order, each with its pairs.
  int64_t R = 1, chunks = 1;
  bool zigzag = true;
  std::vector<MaskRingCell> ring;
  int64_t ring_blocks = 0, ring_skipped = 0;
  double kept() const { return causal_pairs > 0 ? double(live_pairs) / double(causal_pairs) : 1.0; }
};

// Unmasked pairs of [q0, q1) x [k0, k1) for documents starting at start[t] (the first token of
// t's document): sum over q of the keys k in [max(k0, start[q]), min(k1 - 1, q)].
int64_t live_pairs(const std::vector<int64_t>& start, int64_t q0, int64_t q1, int64_t k0, int64_t k1);

DocumentMaskPicture document_mask_picture(const RunConfig& cfg, int64_t grid = 16);

}  // namespace ulysses::ui
