// Hugging Face checkpoints: model.safetensors or sharded model-*-of-*.safetensors + index
// (HF parameter names) + config.json.
// The safetensors format: 8-byte little-endian header length, a JSON header mapping each
// name to {dtype, shape, data_offsets}, then the raw little-endian tensor bytes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model.hpp"

namespace ulysses {

// Writes dir/config.json and the weights in HF names: dir/model.safetensors, or with
// shard_bytes > 0 and more than that many bytes, HF's sharded layout
// (model-00001-of-0000N.safetensors + model.safetensors.index.json, greedy split in
// parameter order). dtype: F32, BF16 or F16. The new files are written whole (and synced) in
// a staging folder dir/.tmp-save-PID, then moved in; earlier weights they do not replace (the
// single file, an index, shards named model-DDDDD-of-DDDDD.safetensors; no other file) are
// removed, an earlier model.safetensors before a new index comes in. Throws naming the file
// when a move or removal fails (and the staging folder holding what was not moved in).
// `metadata` goes into each weights file's __metadata__ (beside "format": "pt"), with
// ckpt::kMetaFile set to that file's name when it is given (a training checkpoint's identity).
void save_checkpoint(LlamaModel& model, const std::string& dir, torch::Dtype dtype, int64_t shard_bytes = 0,
                     const std::map<std::string, std::string>& metadata = {});
// Loads dir/model.safetensors, or the shards named by dir/model.safetensors.index.json,
// into the model's parameters (any of F32/F16/BF16). Throws ConfigError on missing
// tensors or shape mismatches, naming them. Returns the checkpoint's tensors the model has no
// parameter for, which are not read (checkpoint_unused, from the same headers).
std::vector<std::string> load_checkpoint(LlamaModel& model, const std::string& dir);
// Every tensor of a checkpoint directory (single file or sharded).
std::map<std::string, at::Tensor> read_checkpoint_tensors(const std::string& dir);
// Tensor indices per shard for tensors of these byte sizes (HF's greedy split).
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& nbytes, int64_t shard_bytes);

// Low-level: read every tensor of a .safetensors file; write a map of tensors.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);
// `metadata`: string pairs for __metadata__ beside "format": "pt".
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ulysses
