// Helpers shared by the fuzz targets: the input as a temporary regular file (for readers
// that take a path), and a crash that names the broken invariant.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

// Writes data to one temporary file per process (overwritten by each input).
inline std::string as_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/ulysses-fuzz-" + std::to_string(::getpid()) + suffix;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace fuzz
