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
  pack_documents(read_document_offsets(m), seq_length, &seqs_, &borders_);
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
