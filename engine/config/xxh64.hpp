// XXH64 (Yann Collet's xxHash, 64-bit, seed 0): the checksum a training checkpoint's manifest
// keeps per file (checkpoint_layout.hpp). Not cryptographic: it finds a file from another run
// or step, a shard in another rank's place and damaged bytes, at several GB/s, so checking a
// checkpoint costs a small share of reading it. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ulysses {

// Incremental: update() any number of times with consecutive pieces, then digest().
class Xxh64 {
 public:
  Xxh64();
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  unsigned char buf_[32];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

uint64_t xxh64(const void* data, size_t n);
// 16 lowercase hex digits.
std::string xxh64_hex(uint64_t h);
// The XXH64 of a file's bytes as 16 hex digits. Throws ConfigError naming the file when it
// cannot be read whole.
std::string xxh64_file(const std::string& path);

}  // namespace ulysses
