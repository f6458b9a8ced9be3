// Readers of the documents `ulysses data prepare` tokenizes (see document_source.hpp).
#include "document_source.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ulysses::data {

InputFormat parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "text") return InputFormat::kText;
  if (name == "folder") return InputFormat::kFolder;
  throw DataInputError("--format " + name + ": not one of auto, jsonl, text, folder");
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kJsonl:
      return "jsonl";
    case InputFormat::kText:
      return "text";
    case InputFormat::kFolder:
      return "folder";
    default:
      return "auto";
  }
}

InputFormat resolve_input_format(const std::string& path, InputFormat f) {
  if (f != InputFormat::kAuto) return f;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return InputFormat::kFolder;
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* z : {".gz", ".zst"})
    if (name.size() > std::strlen(z) && name.compare(name.size() - std::strlen(z), std::string::npos, z) == 0)
      name.resize(name.size() - std::strlen(z));
  for (const char* j : {".jsonl", ".ndjson", ".json"})
    if (name.size() > std::strlen(j) && name.compare(name.size() - std::strlen(j), std::string::npos, j) == 0)
      return InputFormat::kJsonl;
  return InputFormat::kText;
}

namespace {

// The bytes of a file, decompressed when it starts with gzip's or zstd's magic number.
class ByteStream {
 public:
  explicit ByteStream(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw DataInputError(path + ": cannot be read: " + std::strerror(errno));
    unsigned char magic[4] = {0, 0, 0, 0};
    const ssize_t n = ::pread(fd_, magic, 4, 0);
    if (n >= 2 && magic[0] == 0x1F && magic[1] == 0x8B) {
      const int dup = ::dup(fd_);
      gz_ = gzdopen(dup, "rb");
      if (!gz_) throw DataInputError(path + ": cannot open as gzip");
      gzbuffer(gz_, 1 << 18);
    } else if (n == 4 && magic[0] == 0x28 && magic[1] == 0xB5 && magic[2] == 0x2F && magic[3] == 0xFD) {
      zstd_ = ZSTD_createDStream();
      ZSTD_initDStream(zstd_);
      zin_.resize(ZSTD_DStreamInSize());
    }
  }
  ~ByteStream() {
    if (gz_) gzclose(gz_);
    if (zstd_) ZSTD_freeDStream(zstd_);
    if (fd_ >= 0) ::close(fd_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Up to `cap` bytes into `buf`; 0 at the end.
  size_t read(char* buf, size_t cap) {
    if (gz_) {
      const int n = gzread(gz_, buf, static_cast<unsigned>(std::min<size_t>(cap, 1u << 30)));
      if (n < 0) {
        int err = 0;
        throw DataInputError(path_ + ": gzip data is corrupt (" + gzerror(gz_, &err) + ")");
      }
      consumed_ = static_cast<uint64_t>(gzoffset(gz_));
      return static_cast<size_t>(n);
    }
    if (zstd_) return read_zstd(buf, cap);
    return raw_read(buf, cap);
  }
  uint64_t consumed() const { return consumed_; }

 private:
  size_t raw_read(char* buf, size_t cap) {
    for (;;) {
      const ssize_t n = ::read(fd_, buf, cap);
      if (n >= 0) {
        consumed_ += static_cast<uint64_t>(n);
        return static_cast<size_t>(n);
      }
      if (errno != EINTR) throw DataInputError(path_ + ": read failed: " + std::strerror(errno));
    }
  }
  size_t read_zstd(char* buf, size_t cap) {
    ZSTD_outBuffer out{buf, cap, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        const size_t n = raw_read(zin_.data(), zin_.size());
        if (n == 0) {
          if (!frame_done_) throw DataInputError(path_ + ": zstd data ends in the middle of a frame (truncated file?)");
          return 0;
        }
        in_ = ZSTD_inBuffer{zin_.data(), n, 0};
      }
      const size_t r = ZSTD_decompressStream(zstd_, &out, &in_);
      if (ZSTD_isError(r)) throw DataInputError(path_ + ": zstd data is corrupt (" + ZSTD_getErrorName(r) + ")");
      frame_done_ = r == 0;
    }
    return out.pos;
  }

  std::string path_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
  ZSTD_DStream* zstd_ = nullptr;
  std::vector<char> zin_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool frame_done_ = true;
  uint64_t consumed_ = 0;
};

// Lines of a ByteStream, without their "\n".
class LineReader {
 public:
  explicit LineReader(const std::string& path) : in_(path), buf_(1 << 20) {}
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == end_) {
        if (eof_) return !line.empty() || pending_;
        end_ = in_.read(buf_.data(), buf_.size());
        pos_ = 0;
        if (end_ == 0) {
          eof_ = true;
          const bool had = !line.empty() || pending_;
          pending_ = false;
          if (had) ++line_no_;
          return had;
        }
      }
      const char* start = buf_.data() + pos_;
      const auto* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      if (nl) {
        line.append(start, static_cast<size_t>(nl - start));
        pos_ += static_cast<size_t>(nl - start) + 1;
        pending_ = false;
        ++line_no_;
        return true;
      }
      line.append(start, end_ - pos_);
      pending_ = true;
      pos_ = end_;
    }
  }
  uint64_t line_no() const { return line_no_; }
  uint64_t consumed() const { return in_.consumed(); }

 private:
  ByteStream in_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false, pending_ = false;
  uint64_t line_no_ = 0;
};

uint64_t source_file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

void source_require_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataInputError(path + ": no such file or folder");
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataInputError(path + ": not a regular file or folder (a FIFO or device cannot be read twice)");
}

class JsonlSource : public DocumentSource {
 public:
  explicit JsonlSource(const std::string& path)
      : lines_((source_require_file(path), path)), total_(source_file_size(path)) {
    files_.push_back(path);
  }
  bool next_batch(std::vector<RawDocument>& out, size_t max_bytes) override {
    size_t bytes = 0;
    std::string line;
    while (bytes < max_bytes && lines_.next(line)) {
      bytes += line.size() + 1;
      out.push_back({std::move(line), lines_.line_no(), 0});
      line = std::string();
    }
    return !out.empty();
  }
  uint64_t bytes_read() const override { return lines_.consumed(); }
  uint64_t bytes_total() const override { return total_; }

 private:
  LineReader lines_;
  uint64_t total_;
};

class SeparatedTextSource : public DocumentSource {
 public:
  SeparatedTextSource(const std::string& path, const std::string& separator)
      : lines_((source_require_file(path), path)), separator_(separator), total_(source_file_size(path)) {
    files_.push_back(path);
  }
  bool next_batch(std::vector<RawDocument>& out, size_t max_bytes) override {
    size_t bytes = 0;
    std::string line;
    while (bytes < max_bytes && lines_.next(line)) {
      std::string_view l = line;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (l == separator_) {
        if (doc_start_ == 0)
          throw DataInputError(files_[0] + ":" + std::to_string(lines_.line_no()) +
                               ": empty document (the separator line \"" + separator_ +
                               "\" follows another separator line or starts the file)");
        bytes += doc_.size();
        out.push_back({std::move(doc_), doc_start_, 0});
        doc_.clear();
        doc_start_ = 0;
        continue;
      }
      if (doc_start_ == 0) {
        doc_start_ = lines_.line_no();
      } else {
        doc_ += '\n';
      }
      doc_ += line;
    }
    if (bytes < max_bytes && doc_start_ != 0) {  // the input is exhausted: its last document
      out.push_back({std::move(doc_), doc_start_, 0});
      doc_.clear();
      doc_start_ = 0;
    }
    return !out.empty();
  }
  uint64_t bytes_read() const override { return lines_.consumed(); }
  uint64_t bytes_total() const override { return total_; }

 private:
  LineReader lines_;
  std::string separator_;
  uint64_t total_;
  std::string doc_;
  uint64_t doc_start_ = 0;  // line where the document being read started; 0 before one starts
};

class FolderSource : public DocumentSource {
 public:
  explicit FolderSource(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files_.push_back(it->path().string());
    }
    if (ec) throw DataInputError(path + ": cannot list the folder: " + ec.message());
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) throw DataInputError(path + ": the folder holds no files (one text file per document)");
    for (const auto& f : files_) total_ += source_file_size(f);
  }
  bool next_batch(std::vector<RawDocument>& out, size_t max_bytes) override {
    size_t bytes = 0;
    std::vector<char> buf(1 << 20);
    while (bytes < max_bytes && next_ < files_.size()) {
      ByteStream in(files_[next_]);
      std::string text;
      for (size_t n; (n = in.read(buf.data(), buf.size())) > 0;) text.append(buf.data(), n);
      read_ += source_file_size(files_[next_]);
      bytes += text.size();
      out.push_back({std::move(text), 0, static_cast<uint32_t>(next_)});
      ++next_;
    }
    return !out.empty();
  }
  uint64_t bytes_read() const override { return read_; }
  uint64_t bytes_total() const override { return total_; }

 private:
  size_t next_ = 0;
  uint64_t read_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> open_documents(const std::string& path, InputFormat format,
                                               const std::string& separator) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataInputError(path + ": no such file or folder");
  switch (resolve_input_format(path, format)) {
    case InputFormat::kFolder:
      if (!std::filesystem::is_directory(path, ec)) throw DataInputError(path + ": --format folder needs a folder");
      return std::make_unique<FolderSource>(path);
    case InputFormat::kJsonl:
      return std::make_unique<JsonlSource>(path);
    default:
      if (separator.empty()) throw DataInputError("--separator must not be empty");
      return std::make_unique<SeparatedTextSource>(path, separator);
  }
}

}  // namespace ulysses::data
