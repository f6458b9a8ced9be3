// Token sources (files read with pread, or synthetic) and deterministic batch sampling.
#include "data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "documents.hpp"

namespace ulysses {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// For a relative path: the folder it was looked for in (an example config run from another
// folder said only "not found").
std::string relative_note(const std::string& path) {
  if (path.empty() || path[0] == '/') return {};
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  return ec ? std::string() : " (a relative path: looked for in the current folder " + cwd + ")";
}

// Read with pread, not mapped: a file shortened while the run read a mapping of it killed the
// rank with SIGBUS, and one rewritten in place handed the embedding ids past vocab_size
// (libtorch's "index out of range in self"). Each read now checks both and names the file.
class FileTokens : public TokenSource {
 public:
  FileTokens(const std::string& path, int width, int64_t vocab) : path_(path), width_(width), vocab_(vocab) {
    // O_NONBLOCK: a FIFO named as the data file would keep a worker started without ulysses-run
    // (torchrun, Slurm) waiting in open() forever, silent; it is refused below like any non-file.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw ConfigError("data file " + path + " not found or not readable" + relative_note(path));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw ConfigError("data file " + path + " is not a regular file");
    }
    bytes_ = static_cast<int64_t>(st.st_size);
    if (bytes_ == 0) {
      ::close(fd_);
      throw ConfigError("data file " + path + " is empty");
    }
    // A size that is no whole number of tokens: refused here too, as ulysses-run does (a worker
    // started directly dropped the odd bytes unsaid).
    if (bytes_ % width != 0) {
      ::close(fd_);
      throw ConfigError("data file " + path + " holds " + std::to_string(bytes_) + " bytes, not a whole number of " +
                        std::to_string(width) + "-byte tokens (data.token_dtype " + (width == 4 ? "uint32" : "uint16") +
                        "?)");
    }
  }
  FileTokens(const FileTokens&) = delete;
  FileTokens& operator=(const FileTokens&) = delete;
  ~FileTokens() override { ::close(fd_); }
  int64_t size() const override { return bytes_ / width_; }
  int fd() const { return fd_; }
  int64_t at(int64_t i) const override {
    int64_t v = 0;
    read(i, 1, &v);
    return v;
  }
  void read(int64_t first, int64_t n, int64_t* out) const override { fill(first, n, out, vocab_); }
  // The largest token id, read in 1 MiB blocks (the check before training).
  int64_t max_id() const {
    int64_t best = 0;
    const int64_t block = (int64_t{1} << 20) / width_;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < size(); i += block) {
      const int64_t n = std::min(block, size() - i);
      ids.resize(static_cast<size_t>(n));
      fill(i, n, ids.data(), INT64_MAX);
      for (const int64_t v : ids) best = std::max(best, v);
    }
    return best;
  }

 private:
  // Tokens [first, first + n), each below `limit`.
  void fill(int64_t first, int64_t n, int64_t* out, int64_t limit) const {
    buf_.resize(static_cast<size_t>(n * width_));
    size_t got = 0;
    while (got < buf_.size()) {
      const ssize_t r = ::pread(fd_, buf_.data() + got, buf_.size() - got,
                                static_cast<off_t>(first * width_) + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw std::runtime_error("cannot read data file " + path_ + ": " + std::strerror(errno));
      if (r == 0)
        throw std::runtime_error("data file " + path_ + " changed during the run: it now ends before token " +
                                 std::to_string(first + n) + " (it held " + std::to_string(size()) +
                                 " tokens at start); keep a run's data file unchanged until it ends");
      got += static_cast<size_t>(r);
    }
    for (int64_t k = 0; k < n; ++k) {
      const unsigned char* p = buf_.data() + k * width_;
      int64_t v = 0;
      for (int b = 0; b < width_; ++b) v |= static_cast<int64_t>(p[b]) << (8 * b);
      if (v >= limit)
        throw std::runtime_error("data file " + path_ + " changed during the run: token " + std::to_string(first + k) +
                                 " is now " + std::to_string(v) + ", not below model.vocab_size " +
                                 std::to_string(limit) + "; keep a run's data file unchanged until it ends");
      out[k] = v;
    }
  }

  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  int width_;
  int64_t vocab_;
  mutable std::vector<unsigned char> buf_;  // one reader per rank: make_batch runs on the training thread
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

// Token 0 everywhere (TokenSource::zeros).
class ZeroTokens : public TokenSource {
 public:
  explicit ZeroTokens(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int64_t at(int64_t) const override { return 0; }
  void read(int64_t, int64_t n, int64_t* out) const override { std::fill(out, out + n, int64_t{0}); }

 private:
  int64_t n_;
};

}  // namespace

std::unique_ptr<TokenSource> TokenSource::zeros(int64_t size) { return std::make_unique<ZeroTokens>(size); }

std::unique_ptr<TokenSource> TokenSource::file(const std::string& path, int width, int64_t vocab) {
  return std::make_unique<FileTokens>(path, width, vocab);
}

std::unique_ptr<TokenSource> TokenSource::open(const DataConfig& d, const ModelConfig& m, int64_t seq_length,
                                               uint64_t seed) {
  std::unique_ptr<TokenSource> src;
  if (d.kind == "synthetic") {
    src = std::make_unique<SyntheticTokens>(m.vocab_size, std::max<int64_t>(1 << 18, 4 * (seq_length + 1)), seed);
  } else if (d.kind == "text") {
    if (m.vocab_size < 256)
      throw ConfigError("model.vocab_size (" + std::to_string(m.vocab_size) +
                        ") is too small for byte-level text data, which needs at least 256");
    src = std::make_unique<FileTokens>(d.path, 1, m.vocab_size);
  } else if (d.kind == "tokens") {
    auto file = std::make_unique<FileTokens>(d.path, static_cast<int>(d.token_bytes()), m.vocab_size);
    // ulysses-run read the whole file for this check already when the file it opened still is the
    // one it checked (same inode, size and times, same vocab and width): not again on every rank.
    const char* checked = std::getenv(kTokensCheckedEnv);
    const std::string here = tokens_file_identity(file->fd(), d, m.vocab_size);
    const int64_t max_id = checked && !here.empty() && here == checked ? 0 : file->max_id();
    src = std::move(file);
    if (max_id >= m.vocab_size)
      throw ConfigError("model.vocab_size (" + std::to_string(m.vocab_size) + ") is too small for " + d.path +
                        ", whose largest token id is " + std::to_string(max_id));
  } else if (d.kind == "documents") {
    return open_documents(d.path, seq_length, m.vocab_size);  // packed: any length fills sequences
  } else {
    throw ConfigError("data.kind must be synthetic, text, tokens or documents, got '" + d.kind + "'");
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
  const auto* docs = dynamic_cast<const DocumentTokens*>(&src);
  at::Tensor starts = docs ? torch::empty({count, N}, torch::kInt64) : at::Tensor();  // (B, N)
  std::vector<int64_t> packed;
  const int64_t span = src.size() - (N + 1) + 1;
  for (int64_t b = 0; b < count; ++b) {
    const uint64_t key =
        splitmix64(seed * 0x100000001b3ULL ^ splitmix64(static_cast<uint64_t>(step) * 1000003ULL + (first + b)));
    if (docs) {  // packed sequence key mod count (documents.hpp)
      const int64_t k = static_cast<int64_t>(key % static_cast<uint64_t>(docs->sequences()));
      docs->fill(k, ids[b].data_ptr<int64_t>(), labels[b].data_ptr<int64_t>(), starts[b].data_ptr<int64_t>());
      packed.push_back(k);
      continue;
    }
    const int64_t off = static_cast<int64_t>(key % static_cast<uint64_t>(span));
    std::vector<int64_t> tokens(static_cast<size_t>(N + 1));
    src.read(off, N + 1, tokens.data());
    for (int64_t t = 0; t < N; ++t) {
      pi[b][t] = tokens[static_cast<size_t>(t)];
      pl[b][t] = tokens[static_cast<size_t>(t + 1)];  // shifted before sharding: the shard boundary keeps its target
    }
  }
  return {ids, labels, starts, packed};
}

}  // namespace ulysses
