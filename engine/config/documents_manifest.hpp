// The prepared-documents folder (`ulysses data prepare` writes it, data.kind = "documents"
// trains on it; docs/CONTRACTS.md): manifest.json, tokens.bin (num_tokens little-endian ids of
// the manifest's dtype) and documents.bin (num_documents + 1 little-endian uint64 offsets,
// first 0, last num_tokens; document i = tokens [off[i], off[i+1])). Torch-free: the launcher's
// checks before a run and the engine's reader share it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ulysses {

inline constexpr const char* kDocumentsFormat = "ulysses-documents";
inline constexpr int64_t kDocumentsVersion = 1;

struct DocumentsManifest {
  std::string dir;           // the folder
  std::string tokens_path;   // DIR/tokens.bin
  std::string offsets_path;  // DIR/documents.bin
  int64_t width = 2;         // bytes per token id (uint16: 2, uint32: 4)
  int64_t vocab_size = 0;    // the tokenizer's vocabulary (ids are below it)
  int64_t num_tokens = 0;
  int64_t num_documents = 0;
};

// Reads and checks DIR/manifest.json and the two files' sizes against it. Throws ConfigError
// naming the file and what is wrong (missing, another format or a newer version, a size that
// disagrees with num_tokens / num_documents).
DocumentsManifest read_documents_manifest(const std::string& dir);

// The document offsets (num_documents + 1), checked: first 0, last num_tokens, never
// decreasing. ConfigError naming documents.bin otherwise.
std::vector<int64_t> read_document_offsets(const DocumentsManifest& m);

// The first token whose id is >= limit, as (index, id); {-1, -1} when none. Reads tokens.bin
// in 1 MiB blocks. ConfigError when it cannot be read.
std::pair<int64_t, int64_t> first_token_at_or_above(const DocumentsManifest& m, int64_t limit);

// The refusal for a model of `model_vocab` ids on this folder, empty when fine: a model
// vocabulary smaller than the manifest's, or (scan = true) a token id at or above it (names
// tokens.bin, the token's index and its id).
std::string documents_vocab_problem(const DocumentsManifest& m, int64_t model_vocab, bool scan);

// The packing rule (documents.hpp says it in words): document offsets `off` (first 0, last T)
// into sequences of N tokens. seqs: packed sequence k is stream tokens [seqs[k], seqs[k+1]);
// borders: sorted stream indices where a document, or a piece of a longer one, starts (and T).
void pack_documents(const std::vector<int64_t>& off, int64_t N, std::vector<int64_t>* seqs,
                    std::vector<int64_t>* borders);

// The fraction of causal attention's (query, key) pairs that packed sequences of N tokens keep
// under the document mask, over every packed sequence of the folder (padding counted as the
// kernels compute it: a document of its own). 1 for one document per sequence. The cost model's
// CostOptions::attention_fraction.
double packed_attention_fraction(const std::vector<int64_t>& off, int64_t N);

// That fraction for a run: packed_attention_fraction of data.path's documents at
// train.seq_length with data.kind = documents; 1 for other kinds or a folder that cannot be read
// (validate_with_files says why before a run). The cost model, the planner and the step
// simulator count attention with it.
struct RunConfig;
double documents_attention_fraction(const RunConfig& cfg);

}  // namespace ulysses
