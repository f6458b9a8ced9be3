// The safetensors header, torch-free: 8-byte little-endian header length, a JSON header
// mapping each tensor name to {dtype, shape, data_offsets}, then the data section. Parsing
// checks everything a reader must trust before it seeks: the header length against the
// file, every shape multiplied in checked 64-bit arithmetic, offsets compared without
// wrap-around, and each tensor's byte count equal to shape x dtype size. engine/core's
// read_safetensors uses it; fuzz/fuzz_safetensors_header.cpp fuzzes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ... as in the file
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // the JSON header's length
  uint64_t data_offset = 0;               // where the data section starts in the file (8 + header_bytes)
  std::vector<SafetensorsEntry> tensors;  // in the header's (sorted) order; __metadata__ skipped
};

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;  // the reference implementation's limit

// Bytes per element of a safetensors dtype name, or 0 for a name it does not know.
uint64_t safetensors_dtype_size(std::string_view dtype);

// The header length from the file's first 8 bytes, checked against the file size. Throws
// ConfigError naming `path`.
uint64_t parse_safetensors_length(const unsigned char le[8], uint64_t file_size, const std::string& path);

// Parses and checks the JSON header text (header_bytes long) of a file of file_size bytes.
// Throws ConfigError naming `path` and the tensor.
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t file_size, const std::string& path);

}  // namespace ulysses
