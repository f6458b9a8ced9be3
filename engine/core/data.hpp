// Training data: byte-level text, flat uint16/uint32 token files (nanoGPT / llm.c layout),
// packed documents of a prepared folder (documents.hpp) or a synthetic learnable stream. Batches are fixed by (seed,
// step, sequence index), so any sp_size / dp_size split of the same run sees the same tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "run_config.hpp"

namespace ulysses {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t at(int64_t i) const = 0;
  // Tokens [first, first + n) into out. Files throw std::runtime_error naming the file when it
  // changed during the run (shorter now, or an id not below vocab_size).
  virtual void read(int64_t first, int64_t n, int64_t* out) const {
    for (int64_t k = 0; k < n; ++k) out[k] = at(first + k);
  }
  // Throws ConfigError (missing file, too small, ids >= vocab_size).
  static std::unique_ptr<TokenSource> open(const DataConfig& d, const ModelConfig& m, int64_t seq_length,
                                           uint64_t seed);
  // `size` tokens of id 0: data of the right shapes where no values matter (the memory planner's
  // dry run on meta), made at once whatever the size.
  static std::unique_ptr<TokenSource> zeros(int64_t size);
  // A token file of `width`-byte little-endian ids, each read checked below `vocab`.
  static std::unique_ptr<TokenSource> file(const std::string& path, int width, int64_t vocab);
};

struct Batch {
  at::Tensor ids;     // (B, N) int64
  at::Tensor labels;  // (B, N) int64, already shifted: labels[:, t] = token t+1
  // data.kind = "documents" only (else undefined): (B, N) int64, the index of the first token
  // of each token's document in its sequence (DocumentMask, document_mask.hpp).
  at::Tensor doc_start;
  // data.kind = "documents" only: the packed sequence (DocumentTokens) each row is.
  std::vector<int64_t> packed;
};

// Sequences [first, first+count) of the global batch of `step`.
Batch make_batch(const TokenSource& src, int64_t seq_length, int64_t step, int64_t first, int64_t count, uint64_t seed);

}  // namespace ulysses
