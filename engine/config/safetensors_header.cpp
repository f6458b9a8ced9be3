// Checked parsing of a safetensors header (see safetensors_header.hpp).
#include "safetensors_header.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "checkpoint_layout.hpp"
#include "json_checked.hpp"
#include "run_config.hpp"

namespace ulysses {

uint64_t safetensors_dtype_size(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

bool safetensors_float_dtype(std::string_view d) { return d == "F32" || d == "BF16" || d == "F16"; }

uint64_t parse_safetensors_length(const unsigned char le[8], uint64_t fsize, const std::string& path) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (fsize < 8 || n == 0 || n > fsize - 8 || n > kSafetensorsMaxHeaderBytes)
    throw ConfigError(path + " is not a safetensors file (header length " + std::to_string(n) + " with a file of " +
                      std::to_string(fsize) + " bytes)");
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t fsize, const std::string& path) {
  using nlohmann::json;
  SafetensorsHeader h;
  h.header_bytes = text.size();
  if (fsize < 8 || h.header_bytes > fsize - 8)
    throw ConfigError(path + ": safetensors header of " + std::to_string(h.header_bytes) + " bytes in a file of " +
                      std::to_string(fsize) + " bytes");
  h.data_offset = 8 + h.header_bytes;
  // Every tensor entry names "data_offsets": counted at memory speed, so a header past the limit
  // is refused before any of it is parsed (the parse below refuses it too, in ~1 s).
  size_t entries = 0;
  for (size_t at = text.find("\"data_offsets\""); at != std::string_view::npos;
       at = text.find("\"data_offsets\"", at + 14))
    if (++entries > kSafetensorsMaxTensors)
      throw ConfigError(path + ": safetensors header names more than " + std::to_string(kSafetensorsMaxTensors) +
                        " tensors, the most this reader takes from one file (a model's file holds a few thousand)");
  json header;
  try {
    header = parse_checked_json(text, JsonLimits{kSafetensorsMaxTensors + 1});  // + __metadata__
  } catch (const JsonShapeError& e) {
    if (std::string(e.what()).find("entries") != std::string::npos && text.size() > 0 && text.front() == '{')
      throw ConfigError(path + ": safetensors header names more than " + std::to_string(kSafetensorsMaxTensors) +
                        " tensors, the most this reader takes from one file (a model's file holds a few thousand)");
    throw ConfigError(path + ": corrupt safetensors header: it " + std::string(e.what()));
  } catch (const json::exception& e) {
    throw ConfigError(path + ": corrupt safetensors header: " + e.what());
  }
  if (!header.is_object()) throw ConfigError(path + ": corrupt safetensors header (not a JSON object)");
  const uint64_t data_size = fsize - h.data_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it.value().is_object())
        for (auto m = it.value().begin(); m != it.value().end(); ++m)
          if (m.value().is_string()) h.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = name_for_message(path) + ": tensor " + name_for_message(it.key());
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array())
      throw ConfigError(where + ": entry needs dtype (string), shape and data_offsets (arrays)");
    SafetensorsEntry t;
    t.name = it.key();
    t.dtype = e["dtype"].get<std::string>();
    const uint64_t elem = safetensors_dtype_size(t.dtype);
    if (elem == 0) throw ConfigError(path + ": unsupported safetensors dtype " + t.dtype);
    uint64_t numel = 1;
    for (const auto& dim : e["shape"]) {
      // Negative numbers are number_integer in nlohmann; only unsigned ones are sizes.
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t{1} << 48))
        throw ConfigError(where + " has an invalid shape " + e["shape"].dump());
      if (__builtin_mul_overflow(numel, dim.get<uint64_t>(), &numel))
        throw ConfigError(where + " has a shape whose size overflows: " + e["shape"].dump());
      t.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    const auto& offs = e["data_offsets"];
    if (offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      throw ConfigError(where + " has invalid data_offsets " + offs.dump() + " (two non-negative integers expected)");
    t.begin = offs[0].get<uint64_t>();
    t.end = offs[1].get<uint64_t>();
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, elem, &nbytes) || t.begin > t.end || t.end > data_size ||
        t.end - t.begin != nbytes)
      throw ConfigError(where + " has inconsistent data_offsets [" + std::to_string(t.begin) + ", " +
                        std::to_string(t.end) + "] for " + std::to_string(nbytes) +
                        " bytes of data in a data section of " + std::to_string(data_size) +
                        " bytes (truncated or corrupt file?)");
    h.tensors.push_back(std::move(t));
  }
  // No two tensors share bytes (the format forbids it): a header pointing lm_head.weight at
  // embed_tokens' bytes loaded a different model without a word.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      throw ConfigError(path + ": corrupt safetensors header: tensors " + by_offset[i - 1]->name + " [" +
                        std::to_string(by_offset[i - 1]->begin) + ", " + std::to_string(by_offset[i - 1]->end) +
                        ") and " + by_offset[i]->name + " [" + std::to_string(by_offset[i]->begin) + ", " +
                        std::to_string(by_offset[i]->end) + ") share bytes");
  return h;
}

SafetensorsHeader read_safetensors_header(std::istream& in, uint64_t fsize, const std::string& path) {
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  if (!in || in.gcount() != 8) throw ConfigError(path + " is not a safetensors file (shorter than 8 bytes)");
  const uint64_t n = parse_safetensors_length(le, fsize, path);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  if (!in || static_cast<uint64_t>(in.gcount()) != n) throw ConfigError(path + ": truncated safetensors header");
  return parse_safetensors_header(h, fsize, path);
}

SafetensorsHeader read_safetensors_header_file(const std::string& path) {
  const std::string why = regular_file_problem(path);
  if (!why.empty()) throw ConfigError("cannot read " + path + ": " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open " + path + ": " + std::strerror(errno));
  std::error_code ec;
  const uint64_t fsize = std::filesystem::file_size(path, ec);
  if (ec) throw ConfigError("cannot read " + path + ": " + ec.message());
  return read_safetensors_header(in, fsize, path);
}

std::map<std::string, CheckpointTensor> checkpoint_tensors(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  const std::string single = (d / ckpt::kWeightsFile).string();
  const std::string index_path = (d / ckpt::kWeightsIndexFile).string();
  std::map<std::string, CheckpointTensor> out;
  auto add_file = [&](const std::string& file, const std::map<std::string, std::string>* owner) {
    const SafetensorsHeader h = read_safetensors_header_file(file);
    for (const SafetensorsEntry& e : h.tensors) {
      if (owner) {  // the index names where each tensor lives; a copy elsewhere is not read
        auto o = owner->find(e.name);
        if (o == owner->end() || (d / o->second).string() != file) continue;
      }
      out[e.name] = CheckpointTensor{file, h.data_offset, e};
    }
  };
  std::error_code ec;
  if (fs::exists(single, ec)) {
    add_file(single, nullptr);
    return out;
  }
  if (!fs::exists(index_path, ec))
    throw ConfigError("checkpoint " + dir + " has neither model.safetensors nor model.safetensors.index.json");
  const nlohmann::json index = load_json_file(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw ConfigError(index_path + ": needs a \"weight_map\" object mapping tensor names to shard files");
  std::map<std::string, std::string> owner;  // tensor -> shard file
  std::vector<std::string> files;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw ConfigError(name_for_message(index_path) + ": weight_map." + name_for_message(it.key()) +
                        " must be a file name");
    const std::string f = it.value().get<std::string>();
    // A shard is a plain file next to the index: no directories, no way out of dir.
    // A NUL inside cuts the name short at open() ("model-00004-of-00004.safetensors\0junk" would
    // open the shard without "junk"), as it would data.path and save_to: refused like the others.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == ".." ||
        f.find('\0') != std::string::npos)
      throw ConfigError(index_path + ": shard file name '" + json_for_message(it.value()) +
                        "' must be a plain file name in " + dir);
    owner[it.key()] = f;
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  for (const auto& f : files) add_file((d / f).string(), &owner);
  for (const auto& [name, f] : owner)
    if (!out.count(name))
      throw ConfigError(name_for_message(index_path) + ": tensor " + name_for_message(name) + " is not in its shard " +
                        name_for_message(f));
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "[";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

std::string checkpoint_mismatch(const std::map<std::string, CheckpointTensor>& tensors, const ModelConfig& model,
                                const std::string& dir) {
  std::string missing;
  size_t n_missing = 0;
  for (const auto& p : model.parameters()) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) {
      if (++n_missing <= 8) missing += (missing.empty() ? "" : ", ") + p.name;
      continue;
    }
    const std::string& dt = it->second.entry.dtype;
    if (!safetensors_float_dtype(dt))  // what the loader reads into a weight
      return "checkpoint " + dir + ": " + p.name + " has dtype " + dt + "; a model weight must be F32, BF16 or F16 (" +
             name_for_message(it->second.file) + ")";
    if (it->second.entry.shape != p.shape)
      return "checkpoint " + dir + ": " + p.name + " has shape " + shape_text(it->second.entry.shape) +
             ", the model expects " + shape_text(p.shape) +
             " (does the run's model section match the checkpoint's config.json?)";
  }
  if (n_missing > 8) missing += ", and " + std::to_string(n_missing - 8) + " more";
  if (!missing.empty()) {
    // A sharded checkpoint names its tensors in the index: one left out of weight_map is
    // missing even when a shard holds it.
    std::error_code ec;
    const bool sharded = !std::filesystem::exists(std::filesystem::path(dir) / ckpt::kWeightsFile, ec) &&
                         std::filesystem::exists(std::filesystem::path(dir) / ckpt::kWeightsIndexFile, ec);
    return "checkpoint " + dir + " lacks tensors: " + missing +
           (sharded ? " (model.safetensors.index.json's weight_map does not list them)" : "");
  }
  // A tied model's head is its embedding; a stored lm_head.weight of another shape is no copy of
  // it (Transformers refuses the size mismatch too): a damaged or mislabelled checkpoint,
  // refused rather than dropped unsaid.
  if (auto head = tensors.find("lm_head.weight"); model.tie_word_embeddings && head != tensors.end()) {
    const auto emb = tensors.find("model.embed_tokens.weight");
    if (emb != tensors.end() && head->second.entry.shape != emb->second.entry.shape)
      return "checkpoint " + dir + ": lm_head.weight has shape " + shape_text(head->second.entry.shape) +
             " but config.json ties it to model.embed_tokens.weight " + shape_text(emb->second.entry.shape) +
             " (tie_word_embeddings: true); the checkpoint is damaged, or its config.json should say false";
  }
  return "";
}

std::vector<std::string> checkpoint_unused(const std::map<std::string, CheckpointTensor>& tensors,
                                           const ModelConfig& model) {
  std::set<std::string> params;
  for (const auto& p : model.parameters()) params.insert(p.name);
  const std::string inv_freq = "rotary_emb.inv_freq";
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) {
    const bool rope_buffer =
        name.size() >= inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
    // A tied model reads lm_head from the embedding; some checkpoints of tied models store it too.
    const bool tied_head = model.tie_word_embeddings && name == "lm_head.weight";
    if (!params.count(name) && !rope_buffer && !tied_head) out.push_back(name);
  }
  return out;
}

}  // namespace ulysses
