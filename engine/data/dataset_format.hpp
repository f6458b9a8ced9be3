// The tokenized dataset folder `ulysses data prepare` writes and data.kind = "documents" reads
// (docs/CONTRACTS.md, "Dataset folder"):
//   DIR/manifest.json  {"format": "ulysses-documents", "version": 1, "dtype": "uint16"|"uint32",
//                       "vocab_size", "num_tokens", "num_documents", "tokenizer": {...},
//                       "source": {...}, "document_length_histogram": [...]}
//   DIR/tokens.bin     num_tokens token ids, little-endian, dtype as the manifest says
//   DIR/documents.bin  num_documents + 1 little-endian uint64 offsets into tokens.bin (first 0,
//                      last num_tokens); document i is tokens [off[i], off[i+1])
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::data {

inline constexpr const char* kDatasetFormat = "ulysses-documents";
inline constexpr int kDatasetVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kTokensFile = "tokens.bin";
inline constexpr const char* kDocumentsFile = "documents.bin";

// uint16 when every id fits (vocab_size <= 65536), else uint32.
inline const char* dataset_dtype(uint32_t vocab_size) { return vocab_size <= 65536 ? "uint16" : "uint32"; }

struct DatasetInfo {
  std::string dir;
  uint32_t vocab_size = 0;
  uint64_t num_tokens = 0, num_documents = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
};

// Reads DIR/manifest.json and checks it against the two binary files' sizes; throws
// std::runtime_error naming the file and what is wrong (another format, a newer version, a size
// that does not match).
DatasetInfo read_dataset_info(const std::string& dir);

}  // namespace ulysses::data
