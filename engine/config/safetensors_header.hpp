// The safetensors header, torch-free: 8-byte little-endian header length, a JSON header
// mapping each tensor name to {dtype, shape, data_offsets}, then the data section. Parsing
// checks everything a reader must trust before it seeks: the header length against the
// file, every shape multiplied in checked 64-bit arithmetic, offsets compared without
// wrap-around, and each tensor's byte count equal to shape x dtype size. engine/core's
// read_safetensors uses it; fuzz/fuzz_safetensors_header.cpp fuzzes it.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
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
  uint64_t header_bytes = 0;                    // the JSON header's length
  uint64_t data_offset = 0;                     // where the data section starts in the file (8 + header_bytes)
  std::vector<SafetensorsEntry> tensors;        // in the header's (sorted) order; __metadata__ skipped
  std::map<std::string, std::string> metadata;  // __metadata__'s string values ({"format": "pt", ...})
};

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;  // the reference implementation's limit
// Tensors in one file: a model's file holds a few thousand (Llama 3 405B: 1 138 in all); the
// header is parsed in linear time (json_checked.hpp), and refused past this many.
inline constexpr size_t kSafetensorsMaxTensors = 65536;

// Bytes per element of a safetensors dtype name, or 0 for a name it does not know.
uint64_t safetensors_dtype_size(std::string_view dtype);

// The dtypes the checkpoint loader reads (engine/core/checkpoint.cpp): a model weight or an
// AdamW moment is F32, BF16 or F16; I64 only for the optimizer's step counts.
bool safetensors_float_dtype(std::string_view dtype);

// The header length from the file's first 8 bytes, checked against the file size. Throws
// ConfigError naming `path`.
uint64_t parse_safetensors_length(const unsigned char le[8], uint64_t file_size, const std::string& path);

// Parses and checks the JSON header text (header_bytes long) of a file of file_size bytes.
// Throws ConfigError naming `path` and the tensor.
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t file_size, const std::string& path);

// Reads and checks the header of the safetensors file `in` is open on (at its start), of
// file_size bytes. Throws ConfigError naming `path`; reads no tensor data.
SafetensorsHeader read_safetensors_header(std::istream& in, uint64_t file_size, const std::string& path);

// The same for a file by name, refusing what is not a regular file (a FIFO, a folder).
SafetensorsHeader read_safetensors_header_file(const std::string& path);

// One tensor of a Hugging Face checkpoint folder: the file holding it and where.
struct CheckpointTensor {
  std::string file;          // path of the safetensors file
  uint64_t data_offset = 0;  // that file's data section
  SafetensorsEntry entry;
};

// A tensor shape for messages: "[256, 32]".
std::string shape_text(const std::vector<int64_t>& shape);

// Every tensor of a Hugging Face checkpoint folder, by name: model.safetensors, or the shards
// model.safetensors.index.json's weight_map names (plain file names in `dir`; each tensor
// taken from the shard the index names, which must hold it). Headers are read and checked,
// tensor data is not, so the launcher refuses a damaged or mismatched checkpoint in
// milliseconds before any worker starts, and the worker reads what it was checked against.
// Throws ConfigError naming the file.
std::map<std::string, CheckpointTensor> checkpoint_tensors(const std::string& dir);

// What keeps the tensors of checkpoint_tensors(dir) from loading into a model with these
// parameters (names, shapes; ModelConfig::parameters): the missing ones, the first weight
// whose dtype is not F32, BF16 or F16, the first shape that differs. Empty when they load. Tensors the model does not
// have are ignored, as the loader ignores them.
struct ModelConfig;
std::string checkpoint_mismatch(const std::map<std::string, CheckpointTensor>& tensors, const ModelConfig& model,
                                const std::string& dir);

// The tensors of a checkpoint that the model has no parameter for, which the loader leaves
// unread (Hugging Face's from_pretrained warns of them alike): a checkpoint of more layers than
// the run's model section, or another model's. RoPE's inv_freq buffers of old checkpoints are
// not counted, nor lm_head.weight of a tied model. Sorted by name.
std::vector<std::string> checkpoint_unused(const std::map<std::string, CheckpointTensor>& tensors,
                                           const ModelConfig& model);

}  // namespace ulysses
