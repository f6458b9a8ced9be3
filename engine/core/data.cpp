// Token sources (mmap'd files or synthetic) and deterministic batch sampling.
#include "data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace ulysses {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class FileTokens : public TokenSource {
 public:
  FileTokens(const std::string& path, int width) : width_(width) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    if (fd_ < 0) throw ConfigError("data file " + path + " not found or not readable");
    struct stat st {};
    fstat(fd_, &st);
    bytes_ = static_cast<size_t>(st.st_size);
    if (bytes_ == 0) {
      ::close(fd_);
      throw ConfigError("data file " + path + " is empty");
    }
    base_ = static_cast<const unsigned char*>(mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd_, 0));
    if (base_ == MAP_FAILED) {
      ::close(fd_);
      throw ConfigError("cannot map data file " + path);
    }
  }
  ~FileTokens() override {
    munmap(const_cast<unsigned char*>(base_), bytes_);
    ::close(fd_);
  }
  int64_t size() const override { return static_cast<int64_t>(bytes_ / width_); }
  int64_t at(int64_t i) const override {
    const unsigned char* p = base_ + i * width_;
    int64_t v = 0;
    for (int b = 0; b < width_; ++b) v |= static_cast<int64_t>(p[b]) << (8 * b);
    return v;
  }

 private:
  int fd_ = -1;
  size_t bytes_ = 0;
  const unsigned char* base_ = nullptr;
  int width_;
};

// A random walk over the vocabulary with occasional jumps: learnable, deterministic.
class SyntheticTokens : public TokenSource {
 public:
  SyntheticTokens(int64_t vocab, int64_t n, uint64_t seed) : tokens_(n) {
    uint64_t s = splitmix64(seed ^ 0x5eed);
    int64_t t = 0;
    for (int64_t i = 0; i < n; ++i) {
      s = splitmix64(s);
      if (s % 16 == 0)
        t = static_cast<int64_t>((s >> 8) % vocab);
      else
        t = (t + 1 + static_cast<int64_t>((s >> 8) % 3)) % vocab;
      tokens_[i] = static_cast<int32_t>(t);
    }
  }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t at(int64_t i) const override { return tokens_[i]; }

 private:
  std::vector<int32_t> tokens_;
};

}  // namespace

std::unique_ptr<TokenSource> TokenSource::open(const DataConfig& d, const ModelConfig& m, int64_t seq_length,
                                               uint64_t seed) {
  std::unique_ptr<TokenSource> src;
  if (d.kind == "synthetic") {
    src = std::make_unique<SyntheticTokens>(m.vocab_size, std::max<int64_t>(1 << 18, 4 * (seq_length + 1)), seed);
  } else if (d.kind == "text") {
    if (m.vocab_size < 256)
      throw ConfigError("model.vocab_size (" + std::to_string(m.vocab_size) +
                        ") is too small for byte-level text data, which needs at least 256");
    src = std::make_unique<FileTokens>(d.path, 1);
  } else if (d.kind == "tokens") {
    src = std::make_unique<FileTokens>(d.path, d.token_dtype == "uint32" ? 4 : 2);
    int64_t max_id = 0;
    for (int64_t i = 0; i < src->size(); ++i) max_id = std::max(max_id, src->at(i));
    if (max_id >= m.vocab_size)
      throw ConfigError("model.vocab_size (" + std::to_string(m.vocab_size) + ") is too small for " + d.path +
                        ", whose largest token id is " + std::to_string(max_id));
  } else {
    throw ConfigError("data.kind must be synthetic, text or tokens, got '" + d.kind + "'");
  }
  if (src->size() < seq_length + 1)
    throw ConfigError("data " + d.path + " holds " + std::to_string(src->size()) +
                      " tokens, fewer than train.seq_length + 1 = " + std::to_string(seq_length + 1));
  return src;
}

Batch make_batch(const TokenSource& src, int64_t N, int64_t step, int64_t first, int64_t count, uint64_t seed) {
  auto ids = torch::empty({count, N}, torch::kInt64);
  auto labels = torch::empty({count, N}, torch::kInt64);
  auto pi = ids.accessor<int64_t, 2>();
  auto pl = labels.accessor<int64_t, 2>();
  const int64_t span = src.size() - (N + 1) + 1;
  for (int64_t b = 0; b < count; ++b) {
    const uint64_t key =
        splitmix64(seed * 0x100000001b3ULL ^ splitmix64(static_cast<uint64_t>(step) * 1000003ULL + (first + b)));
    const int64_t off = static_cast<int64_t>(key % static_cast<uint64_t>(span));
    for (int64_t t = 0; t < N; ++t) {
      pi[b][t] = src.at(off + t);
      pl[b][t] = src.at(off + t + 1);  // shifted before sharding: the shard boundary keeps its target
    }
  }
  return {ids, labels};
}

}  // namespace ulysses
