// Packing of prepared documents into training sequences (documents.hpp).
#include "documents.hpp"

#include <algorithm>

namespace ulysses {

DocumentTokens::DocumentTokens(const DocumentsManifest& m, int64_t seq_length, int64_t model_vocab) : N_(seq_length) {
  if (const std::string why = documents_vocab_problem(m, model_vocab, /*scan=*/true); !why.empty())
    throw ConfigError(why);
  if (m.num_tokens < 2)
    throw ConfigError(m.tokens_path + " holds " + std::to_string(m.num_tokens) +
                      " tokens: nothing to train on (a document needs 2 tokens for one prediction)");
  tokens_ = TokenSource::file(m.tokens_path, static_cast<int>(m.width), model_vocab);
  offsets_ = read_document_offsets(m);
  pack_documents(offsets_, seq_length, &seqs_, &borders_);
}

std::vector<DocumentTokens::Part> DocumentTokens::parts(int64_t k) const {
  const int64_t s = sequence_begin(k), e = sequence_end(k);
  std::vector<Part> out;
  // The sequence starts on a border; each border inside it starts a part.
  for (auto b = std::lower_bound(borders_.begin(), borders_.end(), s); b != borders_.end() && *b < e; ++b) {
    const int64_t stop = std::min(e, std::next(b) == borders_.end() ? e : *std::next(b));
    // The document holding token *b: the last one starting at or before it (empty ones skipped).
    const auto d = std::upper_bound(offsets_.begin(), offsets_.end(), *b) - offsets_.begin() - 1;
    const auto du = static_cast<size_t>(d);
    out.push_back({d, offsets_[du + 1] - offsets_[du], *b - offsets_[du], *b - s, stop - s});
  }
  if (e - s < N_) out.push_back({-1, N_ - (e - s), 0, e - s, N_});
  return out;
}

std::vector<prof::DocumentShard> document_shards(const DocumentTokens& docs, const std::vector<int64_t>& packed,
                                                 int64_t first_sequence, int64_t step,
                                                 const std::vector<TokenRange>& pieces) {
  std::vector<prof::DocumentShard> rows;
  for (size_t b = 0; b < packed.size(); ++b) {
    const auto parts = docs.parts(packed[b]);
    for (size_t p = 0; p < pieces.size(); ++p)
      for (const auto& part : parts) {
        if (part.end <= pieces[p].begin || part.begin >= pieces[p].end) continue;
        prof::DocumentShard d;
        d.piece = static_cast<int32_t>(p);
        d.step = step;
        d.sequence = first_sequence + static_cast<int64_t>(b);
        d.packed = packed[b];
        d.shard_begin = pieces[p].begin;
        d.shard_end = pieces[p].end;
        d.document = part.document;
        d.doc_tokens = part.doc_tokens;
        d.doc_offset = part.doc_offset;
        d.begin = part.begin;
        d.end = part.end;
        rows.push_back(d);
      }
  }
  return rows;
}

void DocumentTokens::fill(int64_t k, int64_t* ids, int64_t* labels, int64_t* start) const {
  const int64_t s = sequence_begin(k), e = sequence_end(k), len = e - s;  // len <= N
  tokens_->read(s, len, ids);
  // borders_[j] is the first border after token t's document start; the sequence starts on one.
  auto next = std::upper_bound(borders_.begin(), borders_.end(), s);
  int64_t doc = 0;
  for (int64_t t = 0; t < len; ++t) {
    if (next != borders_.end() && *next == s + t) {
      doc = t;
      ++next;
    }
    start[t] = doc;
    const bool last = t + 1 == len || (next != borders_.end() && *next == s + t + 1);
    labels[t] = last ? -100 : ids[t + 1];
  }
  for (int64_t t = len; t < N_; ++t) {  // padding: one document of its own, no labels
    ids[t] = 0;
    labels[t] = -100;
    start[t] = len;
  }
}

std::unique_ptr<TokenSource> open_documents(const std::string& dir, int64_t seq_length, int64_t model_vocab) {
  return std::make_unique<DocumentTokens>(read_documents_manifest(dir), seq_length, model_vocab);
}

}  // namespace ulysses
