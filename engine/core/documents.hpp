// data.kind = "documents": sequences packed from whole documents of a prepared folder
// (documents_manifest.hpp), as Hugging Face's DataCollatorWithFlattening hands them to
// flash-attention's varlen kernel: position ids restart at every document, attention is
// causal within each document only (DocumentMask, document_mask.hpp), and no label crosses a
// border (the last token of each document predicts nothing: HF's first label of each document
// is -100).
//
// Packing rule (pack_documents, documents_manifest.hpp; fixed when the folder is opened, the
// same on every rank): documents in file order, next-fit into sequences of seq_length tokens: a document joins the
// current sequence when it fits in what is left, else it starts the next one. A document longer than seq_length is cut
// into pieces of seq_length tokens from its start (each a sequence of its own) and a last, shorter piece packed like a
// document; every piece is a document of its own (positions restart, no attention to the piece before). What a sequence
// leaves free is padding: token 0, label -100, one document of its own that no real token attends to. Sequence i of
// step s is packed sequence hash(seed, s, i) mod count (make_batch's key), so batches stay a function of (seed, step,
// sequence index) whatever the sp/dp/ring split.
#pragma once

#include <memory>
#include <vector>

#include "data.hpp"
#include "documents_manifest.hpp"
#include "ring_geometry.hpp"
#include "ulysses/profiler/document_shard.hpp"

namespace ulysses {

class DocumentTokens : public TokenSource {
 public:
  // Throws ConfigError (exit 2 before training starts): a folder that is not a prepared one,
  // a model vocabulary smaller than the data's, a token id at or above it (naming tokens.bin).
  DocumentTokens(const DocumentsManifest& m, int64_t seq_length, int64_t model_vocab);
  int64_t size() const override { return tokens_->size(); }
  int64_t at(int64_t i) const override { return tokens_->at(i); }
  void read(int64_t first, int64_t n, int64_t* out) const override { tokens_->read(first, n, out); }

  int64_t sequences() const { return static_cast<int64_t>(seqs_.size()) - 1; }
  // Token range [begin, end) of the stream packed into sequence k.
  int64_t sequence_begin(int64_t k) const { return seqs_[static_cast<size_t>(k)]; }
  int64_t sequence_end(int64_t k) const { return seqs_[static_cast<size_t>(k) + 1]; }
  // Packed sequence k as N ids, labels (already shifted, -100 at each document's last token
  // and on padding) and, per token, the index of its document's first token in the sequence.
  void fill(int64_t k, int64_t* ids, int64_t* labels, int64_t* start) const;

  // What sequence k holds, in order: each document (or piece of a cut one) and the padding.
  struct Part {
    int64_t document = -1;       // index in the folder; -1: padding
    int64_t doc_tokens = 0;      // the document's whole length (padding: its own)
    int64_t doc_offset = 0;      // where in the document the part starts
    int64_t begin = 0, end = 0;  // positions in the sequence
  };
  std::vector<Part> parts(int64_t k) const;

 private:
  int64_t N_;
  std::vector<int64_t> offsets_;  // document d = stream [offsets_[d], offsets_[d+1])
  std::unique_ptr<TokenSource> tokens_;
  std::vector<int64_t> borders_;  // stream indices where a document (or a piece) starts, sorted
  std::vector<int64_t> seqs_;     // packed sequence k = stream [seqs_[k], seqs_[k+1])
};

// The trace's rows (ULYSSES_DOCUMENTS, document_shard.hpp) for one micro-batch: sequence
// first_sequence + b is packed sequence packed[b]; the rank holds `pieces` of every sequence
// (seq_shard_ranges). One row per (sequence, piece, part) the piece overlaps.
std::vector<prof::DocumentShard> document_shards(const DocumentTokens& docs, const std::vector<int64_t>& packed,
                                                 int64_t first_sequence, int64_t step,
                                                 const std::vector<TokenRange>& pieces);

// TokenSource::open's branch for data.kind = "documents".
std::unique_ptr<TokenSource> open_documents(const std::string& dir, int64_t seq_length, int64_t model_vocab);

}  // namespace ulysses
