// Test-only writer of a prepared-documents folder (the format `ulysses data prepare` writes,
// documents_manifest.hpp): manifest.json, tokens.bin, documents.bin. Header-only, no torch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ulysses::test {

inline void write_le(std::ofstream& out, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) out.put(static_cast<char>((v >> (8 * b)) & 0xff));
}

// `docs` as token ids; `width` 2 (uint16) or 4 (uint32); `vocab` the manifest's vocab_size.
inline void write_documents_folder(const std::string& dir, const std::vector<std::vector<int64_t>>& docs, int64_t vocab,
                                   int width = 2) {
  std::filesystem::create_directories(dir);
  int64_t tokens = 0;
  {
    std::ofstream t(dir + "/tokens.bin", std::ios::binary | std::ios::trunc);
    std::ofstream o(dir + "/documents.bin", std::ios::binary | std::ios::trunc);
    write_le(o, 0, 8);
    for (const auto& d : docs) {
      for (const int64_t id : d) write_le(t, static_cast<uint64_t>(id), width);
      tokens += static_cast<int64_t>(d.size());
      write_le(o, static_cast<uint64_t>(tokens), 8);
    }
  }
  std::ofstream m(dir + "/manifest.json", std::ios::trunc);
  m << "{\"format\": \"ulysses-documents\", \"version\": 1, \"dtype\": \"" << (width == 4 ? "uint32" : "uint16")
    << "\", \"vocab_size\": " << vocab << ", \"num_tokens\": " << tokens << ", \"num_documents\": " << docs.size()
    << ", \"tokenizer\": {\"kind\": \"test\"}}\n";
}

}  // namespace ulysses::test
