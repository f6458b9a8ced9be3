// Hugging Face checkpoints: model.safetensors (HF parameter names) + config.json.
// The safetensors format: 8-byte little-endian header length, a JSON header mapping each
// name to {dtype, shape, data_offsets}, then the raw little-endian tensor bytes.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "model.hpp"

namespace ulysses {

// Writes dir/model.safetensors and dir/config.json (creates dir). `dtype` is F32 or BF16.
void save_checkpoint(LlamaModel& model, const std::string& dir, torch::Dtype dtype);
// Loads dir/model.safetensors into the model's parameters (any of F32/F16/BF16).
// Throws ConfigError on missing tensors or shape mismatches, naming them.
void load_checkpoint(LlamaModel& model, const std::string& dir);

// Low-level: read every tensor of a .safetensors file; write a map of tensors.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace ulysses
