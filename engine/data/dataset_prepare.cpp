// `ulysses data prepare` (see dataset_prepare.hpp).
#include "dataset_prepare.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "dataset_format.hpp"
#include "text_utf8.hpp"
#include "tokenizer.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "ulysses/common/write_error.hpp"

namespace ulysses::data {

namespace {

namespace fs = std::filesystem;

// What surrounds each document's ids.
struct DocumentFrame {
  std::optional<uint32_t> bos;
  uint32_t eos = 0;
};

struct TokenizedBatch {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> lengths;  // tokens per document
  uint64_t input_bytes = 0;
  uint64_t invalid_utf8_documents = 0;
  std::string error;  // the first bad document of the batch, with its file and line
};

// Where a document came from, for messages: "FILE:LINE" or "FILE".
std::string prep_where(const DocumentSource& src, const RawDocument& d) {
  const std::string& f = src.files()[d.file];
  return d.line ? f + ":" + std::to_string(d.line) : f;
}

// Worker threads, each with its own tokenizer scratch (regex state, BPE cache); batches in,
// tokenized batches out by index.
class TokenizerPool {
 public:
  TokenizerPool(const Tokenizer& tok, const DocumentSource& src, const DocumentFrame& frame, bool jsonl,
                std::string field, unsigned threads)
      : tok_(tok), src_(src), frame_(frame), jsonl_(jsonl), field_(std::move(field)) {
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
  }
  ~TokenizerPool() {
    {
      std::lock_guard<std::mutex> l(m_);
      closing_ = true;
    }
    job_cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  TokenizerPool(const TokenizerPool&) = delete;
  TokenizerPool& operator=(const TokenizerPool&) = delete;

  void submit(uint64_t index, std::vector<RawDocument> docs) {
    {
      std::lock_guard<std::mutex> l(m_);
      jobs_.emplace_back(index, std::move(docs));
    }
    job_cv_.notify_one();
  }
  TokenizedBatch take(uint64_t index) {
    std::unique_lock<std::mutex> l(m_);
    done_cv_.wait(l, [&] { return done_.count(index) > 0; });
    TokenizedBatch b = std::move(done_[index]);
    done_.erase(index);
    return b;
  }

 private:
  void run() {
    auto scratch = tok_.make_scratch();
    for (;;) {
      std::pair<uint64_t, std::vector<RawDocument>> job;
      {
        std::unique_lock<std::mutex> l(m_);
        job_cv_.wait(l, [&] { return closing_ || !jobs_.empty(); });
        if (closing_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      TokenizedBatch b;
      try {
        for (const RawDocument& d : job.second) {
          b.input_bytes += d.payload.size();
          if (!tokenize_one(d, b, *scratch)) break;
        }
      } catch (const std::exception& e) {
        b.error = e.what();
      }
      {
        std::lock_guard<std::mutex> l(m_);
        done_[job.first] = std::move(b);
      }
      done_cv_.notify_all();
    }
  }

  // The text of a JSON line's field, or an error in b.error (false).
  bool json_text(const RawDocument& d, std::string& line, std::string& text, TokenizedBatch& b) const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::string why = e.what();
      if (line.find_first_not_of(" \t\r") == std::string::npos) why = "an empty line";
      b.error = prep_where(src_, d) + ": not a JSON line (" + why + "); each line must be one JSON object";
      return false;
    }
    if (!j.is_object()) {
      b.error = prep_where(src_, d) + ": a JSON " + std::string(j.type_name()) + ", not an object with a \"" + field_ +
                "\" field";
      return false;
    }
    auto it = j.find(field_);
    if (it == j.end()) {
      std::string keys;
      for (auto k = j.begin(); k != j.end() && keys.size() < 200; ++k) keys += (keys.empty() ? "" : ", ") + k.key();
      b.error = prep_where(src_, d) + ": no field \"" + field_ +
                "\" (the object has: " + (keys.empty() ? "nothing" : keys) +
                "); name the text's field with --text-field";
      return false;
    }
    if (!it->is_string()) {
      b.error = prep_where(src_, d) + ": field \"" + field_ + "\" is a " + it->type_name() + ", not a string";
      return false;
    }
    text = it->get<std::string>();
    return true;
  }

  bool tokenize_one(const RawDocument& d, TokenizedBatch& b, Tokenizer::Scratch& scratch) const {
    std::string line, text;
    const std::string* doc = &d.payload;
    bool invalid = !is_valid_utf8(d.payload);
    if (jsonl_) {
      line = invalid ? valid_utf8(d.payload) : d.payload;  // JSON is UTF-8: ill-formed bytes read as U+FFFD
      if (!json_text(d, line, text, b)) return false;
      doc = &text;
    }
    if (doc->empty()) {
      b.error = prep_where(src_, d) + ": empty document" +
                (jsonl_   ? " (\"" + field_ + "\" is \"\")"
                 : d.line ? ""
                          : " (an empty file)") +
                "; remove it from the input";
      return false;
    }
    const size_t first = b.tokens.size();
    if (frame_.bos) b.tokens.push_back(*frame_.bos);
    tok_.encode(*doc, b.tokens, scratch);
    b.tokens.push_back(frame_.eos);
    b.lengths.push_back(b.tokens.size() - first);
    if (invalid) ++b.invalid_utf8_documents;
    return true;
  }

  const Tokenizer& tok_;
  const DocumentSource& src_;
  DocumentFrame frame_;
  bool jsonl_;
  std::string field_;
  std::mutex m_;
  std::condition_variable job_cv_, done_cv_;
  std::deque<std::pair<uint64_t, std::vector<RawDocument>>> jobs_;
  std::map<uint64_t, TokenizedBatch> done_;
  bool closing_ = false;
  std::vector<std::thread> workers_;
};

// Whether `dir` may be replaced by --force: an empty folder or a dataset folder.
bool prep_replaceable(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (fs::is_empty(dir, ec)) return true;
  try {
    read_dataset_info(dir);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void prep_check_out(const std::string& out, bool force) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) return;
  if (!force) throw DataInputError(out + " exists; choose another --out, or pass --force to replace the dataset there");
  if (!prep_replaceable(out))
    throw DataInputError(out +
                         " exists and is not a dataset made by `ulysses data prepare` (nor an empty folder); "
                         "--force replaces only those. Remove it yourself or choose another --out");
}

// The dataset being written: OUT.partial-XXXXXX until finish() renames it to OUT; removed when
// destroyed unfinished.
class PartialDataset {
 public:
  PartialDataset(const std::string& out, bool wide) : out_(out), wide_(wide) {
    const fs::path parent = fs::absolute(out).parent_path();
    std::error_code ec;
    fs::create_directories(parent, ec);
    std::string tmpl = (parent / (fs::path(out).filename().string() + ".partial-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("cannot create a folder beside " + out + ": " + std::strerror(errno));
    dir_ = tmpl;
    tokens_ = open_file(kTokensFile);
    docs_ = open_file(kDocumentsFile);
    const uint64_t zero = 0;
    write_all(docs_, kDocumentsFile, &zero, sizeof zero);
  }
  ~PartialDataset() {
    if (tokens_ >= 0) ::close(tokens_);
    if (docs_ >= 0) ::close(docs_);
    if (!finished_) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  PartialDataset(const PartialDataset&) = delete;
  PartialDataset& operator=(const PartialDataset&) = delete;

  void append(const TokenizedBatch& b) {
    if (wide_) {
      write_all(tokens_, kTokensFile, b.tokens.data(), b.tokens.size() * 4);
    } else {
      narrow_.assign(b.tokens.begin(), b.tokens.end());
      write_all(tokens_, kTokensFile, narrow_.data(), narrow_.size() * 2);
    }
    offsets_.clear();
    for (uint64_t len : b.lengths) offsets_.push_back(end_ += len);
    write_all(docs_, kDocumentsFile, offsets_.data(), offsets_.size() * 8);
  }

  // Syncs the files, writes the manifest, renames the folder to OUT (an earlier dataset there,
  // allowed by --force, is set aside first and removed after).
  void finish(const nlohmann::json& manifest, bool force) {
    for (int* fd : {&tokens_, &docs_}) {
      if (::fsync(*fd) != 0) throw std::runtime_error("fsync in " + dir_ + " failed: " + std::strerror(errno));
      ::close(*fd);
      *fd = -1;
    }
    ulysses::write_file_atomically((fs::path(dir_) / kManifestFile).string(), manifest.dump(2) + "\n");
    prep_check_out(out_, force);
    std::string old;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(out_, ec))) {
      old = dir_ + ".old";
      if (::rename(out_.c_str(), old.c_str()) != 0)
        throw std::runtime_error("cannot move the old " + out_ + " aside: " + std::strerror(errno));
    }
    if (::rename(dir_.c_str(), out_.c_str()) != 0) {
      const int err = errno;
      if (!old.empty()) ::rename(old.c_str(), out_.c_str());
      throw std::runtime_error("cannot rename " + dir_ + " to " + out_ + ": " + std::strerror(err));
    }
    finished_ = true;
    if (!old.empty()) fs::remove_all(old, ec);
    ulysses::sync_path(fs::absolute(out_).parent_path().string(), true);
  }

 private:
  int open_file(const char* name) {
    const std::string p = (fs::path(dir_) / name).string();
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + p + ": " + std::strerror(errno));
    return fd;
  }
  void write_all(int fd, const char* name, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw std::runtime_error(ulysses::write_failed((fs::path(out_) / name).string(), w < 0 ? errno : ENOSPC));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  std::string out_, dir_;
  bool wide_;
  int tokens_ = -1, docs_ = -1;
  bool finished_ = false;
  uint64_t end_ = 0;
  std::vector<uint16_t> narrow_;
  std::vector<uint64_t> offsets_;
};

DocumentFrame prep_frame(const Tokenizer& tok, const PrepareOptions& o) {
  DocumentFrame f;
  const SpecialTokens& sp = tok.special();
  if (sp.add_bos) f.bos = sp.bos_id;
  const std::string eos = o.eos_token.empty() ? sp.eos_token : o.eos_token;
  if (eos.empty())
    throw DataInputError(tok.json_path() +
                         ": tokenizer_config.json names no eos_token; name the token that ends each "
                         "document with --eos");
  const auto id = tok.token_id(eos);
  if (!id) throw DataInputError(tok.json_path() + ": the EOS token \"" + eos + "\" is not in the vocabulary");
  f.eos = *id;
  return f;
}

nlohmann::json prep_manifest(const Tokenizer& tok, const PrepareOptions& o, InputFormat fmt, const DocumentFrame& frame,
                             const PrepareResult& r, const std::vector<uint64_t>& histogram) {
  nlohmann::json m;
  m["format"] = kDatasetFormat;
  m["version"] = kDatasetVersion;
  m["dtype"] = dataset_dtype(tok.vocab_size());
  m["vocab_size"] = tok.vocab_size();
  m["num_tokens"] = r.tokens;
  m["num_documents"] = r.documents;
  std::error_code ec;
  m["tokenizer"] = {{"path", fs::absolute(tok.json_path(), ec).string()},
                    {"sha256", tok.sha256()},
                    {"model_type", tok.model_type()},
                    {"vocab_size", tok.vocab_size()},
                    {"bos_id", frame.bos ? nlohmann::json(*frame.bos) : nlohmann::json()},
                    {"eos_id", frame.eos}};
  nlohmann::json src = {{"path", fs::absolute(o.input, ec).string()},
                        {"format", input_format_name(fmt)},
                        {"invalid_utf8_documents", r.invalid_utf8_documents}};
  if (fmt == InputFormat::kJsonl) src["text_field"] = o.text_field;
  if (fmt == InputFormat::kText) src["separator"] = o.separator;
  m["source"] = src;
  nlohmann::json h = nlohmann::json::array();
  for (size_t i = 0; i < histogram.size(); ++i)
    h.push_back(
        {{"min_tokens", uint64_t(1) << i}, {"max_tokens", (uint64_t(2) << i) - 1}, {"documents", histogram[i]}});
  m["document_length_histogram"] = h;
  return m;
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& options,
                              const std::function<void(const PrepareProgress&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  // "data/mine/" is "data/mine"; ".", ".." and "/" name no folder to create.
  PrepareOptions o = options;
  while (o.out.size() > 1 && o.out.back() == '/') o.out.pop_back();
  const std::string leaf = fs::path(o.out).filename().string();
  if (o.out.empty() || leaf.empty() || leaf == "." || leaf == "..")
    throw DataInputError("--out '" + options.out + "' must name the dataset folder to create (e.g. data/mine)");
  prep_check_out(o.out, o.force);
  const auto tok = Tokenizer::load(o.tokenizer);
  const DocumentFrame frame = prep_frame(*tok, o);
  const InputFormat fmt = resolve_input_format(o.input, o.format);
  auto src = open_documents(o.input, fmt, o.separator);
  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  PartialDataset out(o.out, tok->vocab_size() > 65536);
  PrepareResult r;
  std::vector<uint64_t> histogram;
  {
    TokenizerPool pool(*tok, *src, frame, fmt == InputFormat::kJsonl, o.text_field, threads);
    uint64_t submitted = 0, written = 0;
    auto write_next = [&] {
      TokenizedBatch b = pool.take(written++);
      if (!b.error.empty()) throw DataInputError(b.error);
      out.append(b);
      r.documents += b.lengths.size();
      r.tokens += b.tokens.size();
      r.invalid_utf8_documents += b.invalid_utf8_documents;
      for (uint64_t len : b.lengths) {
        size_t k = 0;
        while ((uint64_t(2) << k) <= len) ++k;
        if (histogram.size() <= k) histogram.resize(k + 1, 0);
        ++histogram[k];
      }
      if (progress) {
        PrepareProgress p{src->bytes_read(),
                          src->bytes_total(),
                          r.documents,
                          r.tokens,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                          false};
        progress(p);
      }
    };
    for (;;) {
      if (o.cancel && o.cancel->load()) throw std::runtime_error("interrupted; " + o.out + " was not written");
      std::vector<RawDocument> batch;
      if (!src->next_batch(batch, 256 * 1024)) break;
      pool.submit(submitted++, std::move(batch));
      while (submitted - written >= 2 * threads + 2) write_next();
    }
    while (written < submitted) {
      if (o.cancel && o.cancel->load()) throw std::runtime_error("interrupted; " + o.out + " was not written");
      write_next();
    }
  }
  if (r.documents == 0) throw DataInputError(o.input + ": no documents");
  out.finish(prep_manifest(*tok, o, fmt, frame, r, histogram), o.force);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) progress({src->bytes_total(), src->bytes_total(), r.documents, r.tokens, r.seconds, true});
  return r;
}

}  // namespace ulysses::data
