// Fuzzes the safetensors header parser (engine/config/safetensors_header.cpp) with whole
// files: the 8-byte length, the JSON header, the data section. Anything it accepts must be
// safe to read: every tensor's byte range inside the data section and exactly shape x dtype
// size bytes long (checked here again in 128-bit arithmetic). Bad input may only raise
// ConfigError.
#include <cstdint>
#include <string_view>

#include "fuzz_util.hpp"
#include "run_config.hpp"
#include "safetensors_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  if (size < 8) return 0;
  try {
    const uint64_t n = parse_safetensors_length(data, size, "fuzz.safetensors");
    if (n > size - 8) fuzz::broken("header length beyond the file");
    const SafetensorsHeader h = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n),
                                                         size, "fuzz.safetensors");
    if (h.data_offset != 8 + n) fuzz::broken("data offset");
    const uint64_t data_size = size - h.data_offset;
    for (const auto& t : h.tensors) {
      if (t.begin > t.end || t.end > data_size) fuzz::broken("byte range outside the data section");
      unsigned __int128 bytes = safetensors_dtype_size(t.dtype);
      if (bytes == 0) fuzz::broken("unknown dtype accepted");
      for (int64_t d : t.shape) {
        if (d < 0) fuzz::broken("negative dimension");
        bytes *= static_cast<unsigned __int128>(d);
        if (bytes > (static_cast<unsigned __int128>(1) << 80)) fuzz::broken("shape product overflow accepted");
      }
      if (bytes != t.end - t.begin) fuzz::broken("byte count differs from shape x dtype size");
    }
  } catch (const ConfigError&) {
  }
  return 0;
}
