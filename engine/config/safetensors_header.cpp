// Checked parsing of a safetensors header (see safetensors_header.hpp).
#include "safetensors_header.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

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
  json header;
  try {
    header = parse_checked_json(text);
  } catch (const JsonShapeError& e) {
    throw ConfigError(path + ": corrupt safetensors header: it " + std::string(e.what()));
  } catch (const json::exception& e) {
    throw ConfigError(path + ": corrupt safetensors header: " + e.what());
  }
  if (!header.is_object()) throw ConfigError(path + ": corrupt safetensors header (not a JSON object)");
  const uint64_t data_size = fsize - h.data_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor " + it.key();
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

}  // namespace ulysses
