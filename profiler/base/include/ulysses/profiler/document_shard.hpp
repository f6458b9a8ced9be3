// Which documents a rank's sequence shard holds (data.kind = "documents", docs/DATA.md): one
// row per (step, sequence, shard piece, document) the rank's piece overlaps, recorded by the
// trainer (Tracer::record_documents), stored in ULYSSES_DOCUMENTS, loaded into
// TraceModel::documents and printed by `ulysses-trace summary` and the studio's report.
// Positions are token indices of the packed sequence (0..seq_length-1). Plain values, no torch.
#pragma once

#include <cstdint>

namespace ulysses::prof {

struct DocumentShard {
  int32_t rank = 0;
  int32_t piece = 0;  // which of the rank's shard pieces (0; ring zigzag: 0 and 1, see docs/RING.md)
  int64_t step = 0;
  int64_t sequence = 0;  // the sequence's index in the step's global batch
  int64_t packed = 0;    // the packed sequence it is (documents.hpp: hash(seed, step, sequence) mod count)
  int64_t shard_begin = 0, shard_end = 0;  // the rank's piece [begin, end) of the sequence
  int64_t document = -1;                   // the document's index in the prepared folder; -1 = padding
  int64_t doc_tokens = 0;                  // the document's whole length (tokens); padding: the padding's length
  int64_t doc_offset = 0;      // where in the document this sequence's part of it starts (a long document is cut)
  int64_t begin = 0, end = 0;  // the document's part in the sequence [begin, end) (all of it, not only the rank's)
  // The part the rank holds: [max(begin, shard_begin), min(end, shard_end)).
  int64_t held_begin() const { return begin > shard_begin ? begin : shard_begin; }
  int64_t held_end() const { return end < shard_end ? end : shard_end; }
};

}  // namespace ulysses::prof
