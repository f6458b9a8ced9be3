// Reader of the prepared-documents folder's manifest and index (documents_manifest.hpp).
#include "documents_manifest.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "run_config.hpp"

namespace ulysses {
namespace {

int64_t file_bytes(const std::string& path) {
  const std::string why = regular_file_problem(path);
  if (!why.empty()) throw ConfigError("data.path: " + path + (why == "no such file" ? " not found" : ": " + why));
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  if (ec) throw ConfigError("data.path: cannot read the size of " + path + ": " + ec.message());
  return static_cast<int64_t>(n);
}

int64_t manifest_int(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) throw ConfigError(path + " has no \"" + key + "\"");
  const int64_t v = json_int64(j.at(key), path + ": " + key);
  if (v < 0) throw ConfigError(path + ": " + key + " must be >= 0, got " + std::to_string(v));
  return v;
}

}  // namespace

DocumentsManifest read_documents_manifest(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty()) throw ConfigError("data.kind=documents needs data.path, a folder made by `ulysses data prepare`");
  if (!fs::is_directory(dir, ec))
    throw ConfigError("data.path " + dir +
                      " is not a folder (data.kind=documents reads a folder made by "
                      "`ulysses data prepare`: manifest.json, tokens.bin, documents.bin)");
  DocumentsManifest m;
  m.dir = dir;
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  m.tokens_path = (fs::path(dir) / "tokens.bin").string();
  m.offsets_path = (fs::path(dir) / "documents.bin").string();
  const json j = load_json_file(mpath);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kDocumentsFormat)
    throw ConfigError(mpath + " is not a " + std::string(kDocumentsFormat) + " manifest (\"format\" must be \"" +
                      kDocumentsFormat + "\")");
  const int64_t version = manifest_int(j, "version", mpath);
  if (version > kDocumentsVersion)
    throw ConfigError(mpath + " has version " + std::to_string(version) + ", newer than this build reads (" +
                      std::to_string(kDocumentsVersion) + "); update Ulysses Studio or prepare the data again");
  const std::string dtype = j.contains("dtype") && j["dtype"].is_string() ? j["dtype"].get<std::string>() : "";
  if (dtype != "uint16" && dtype != "uint32")
    throw ConfigError(mpath + ": dtype must be \"uint16\" or \"uint32\", got \"" + dtype + "\"");
  m.width = dtype == "uint32" ? 4 : 2;
  m.vocab_size = manifest_int(j, "vocab_size", mpath);
  m.num_tokens = manifest_int(j, "num_tokens", mpath);
  m.num_documents = manifest_int(j, "num_documents", mpath);
  const int64_t tb = file_bytes(m.tokens_path), ob = file_bytes(m.offsets_path);
  if (tb != m.num_tokens * m.width)
    throw ConfigError(m.tokens_path + " holds " + std::to_string(tb) + " bytes, but manifest.json says " +
                      std::to_string(m.num_tokens) + " " + dtype + " tokens (" +
                      std::to_string(m.num_tokens * m.width) + " bytes); prepare the data again");
  if (ob != (m.num_documents + 1) * 8)
    throw ConfigError(m.offsets_path + " holds " + std::to_string(ob) + " bytes, but manifest.json says " +
                      std::to_string(m.num_documents) + " documents (" + std::to_string((m.num_documents + 1) * 8) +
                      " bytes of uint64 offsets); prepare the data again");
  return m;
}

std::vector<int64_t> read_document_offsets(const DocumentsManifest& m) {
  std::ifstream in(m.offsets_path, std::ios::binary);
  std::vector<unsigned char> raw(static_cast<size_t>((m.num_documents + 1) * 8));
  if (!in || !in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
    throw ConfigError("cannot read " + m.offsets_path + ": " + std::strerror(errno));
  std::vector<int64_t> off(static_cast<size_t>(m.num_documents + 1));
  for (size_t i = 0; i < off.size(); ++i) {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(raw[i * 8 + static_cast<size_t>(b)]) << (8 * b);
    if (v > static_cast<uint64_t>(m.num_tokens) || (i > 0 && static_cast<int64_t>(v) < off[i - 1]))
      throw ConfigError(m.offsets_path + ": offset " + std::to_string(i) + " (" + std::to_string(v) +
                        ") is past num_tokens (" + std::to_string(m.num_tokens) +
                        ") or before the previous one; prepare the data again");
    off[i] = static_cast<int64_t>(v);
  }
  if (off.front() != 0 || off.back() != m.num_tokens)
    throw ConfigError(m.offsets_path + ": the offsets must start at 0 and end at num_tokens (" +
                      std::to_string(m.num_tokens) + "), got " + std::to_string(off.front()) + " and " +
                      std::to_string(off.back()) + "; prepare the data again");
  return off;
}

std::pair<int64_t, int64_t> first_token_at_or_above(const DocumentsManifest& m, int64_t limit) {
  std::ifstream in(m.tokens_path, std::ios::binary);
  if (!in) throw ConfigError("cannot read " + m.tokens_path + ": " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  int64_t index = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<int64_t>(in.gcount());
    for (int64_t i = 0; i + m.width <= n; i += m.width, ++index) {
      int64_t v = 0;
      for (int64_t b = 0; b < m.width; ++b)
        v |= static_cast<int64_t>(static_cast<unsigned char>(buf[i + b])) << (8 * b);
      if (v >= limit) return {index, v};
    }
  }
  return {-1, -1};
}

std::string documents_vocab_problem(const DocumentsManifest& m, int64_t model_vocab, bool scan) {
  if (model_vocab < m.vocab_size)
    return "model.vocab_size (" + std::to_string(model_vocab) + ") is smaller than the vocabulary of " + m.dir + " (" +
           std::to_string(m.vocab_size) + ", its manifest.json's vocab_size): use a model with at least " +
           std::to_string(m.vocab_size) + " ids or prepare the data with this model's tokenizer";
  if (!scan) return {};
  const auto [index, id] = first_token_at_or_above(m, m.vocab_size > 0 ? m.vocab_size : model_vocab);
  if (index < 0) return {};
  return m.tokens_path + ": token " + std::to_string(index) + " is " + std::to_string(id) +
         ", not below the vocabulary (" + std::to_string(m.vocab_size) + " in manifest.json, model.vocab_size " +
         std::to_string(model_vocab) + "); prepare the data again";
}

void pack_documents(const std::vector<int64_t>& off, int64_t N, std::vector<int64_t>* seqs,
                    std::vector<int64_t>* borders) {
  seqs->assign(1, 0);
  borders->clear();
  int64_t cur = 0;  // first stream token of the sequence being filled
  for (size_t d = 0; d + 1 < off.size(); ++d) {
    int64_t a = off[d];
    const int64_t b = off[d + 1];
    if (b <= a) continue;  // an empty document packs nothing
    if (b - a > N) {       // cut into pieces of N, each a sequence of its own, then the rest
      if (a > cur) seqs->push_back(cur = a);
      while (b - a > N) {
        borders->push_back(a);
        a += N;
        seqs->push_back(cur = a);
      }
    } else if (b - cur > N) {
      seqs->push_back(cur = a);
    }
    borders->push_back(a);
  }
  const int64_t T = off.empty() ? 0 : off.back();
  if (T > cur) seqs->push_back(T);
  borders->push_back(T);
}

double packed_attention_fraction(const std::vector<int64_t>& off, int64_t N) {
  std::vector<int64_t> seqs, borders;
  pack_documents(off, N, &seqs, &borders);
  auto pairs = [](double L) { return L * (L + 1) / 2; };
  double kept = 0;
  size_t j = 0;
  for (size_t k = 0; k + 1 < seqs.size(); ++k) {
    const int64_t s = seqs[k], e = seqs[k + 1];
    while (j < borders.size() && borders[j] < s) ++j;
    int64_t doc = s;
    for (size_t i = j + 1; i < borders.size() && borders[i] <= e; ++i) {
      kept += pairs(static_cast<double>(borders[i] - doc));
      doc = borders[i];
    }
    kept += pairs(static_cast<double>(N - (e - s)));  // padding: a document of its own
  }
  const double all = pairs(static_cast<double>(N)) * static_cast<double>(seqs.size() - 1);
  return all > 0 ? kept / all : 1.0;
}

double documents_attention_fraction(const RunConfig& cfg) {
  if (cfg.data.kind != "documents" || cfg.train.seq_length <= 0) return 1.0;
  try {
    return packed_attention_fraction(read_document_offsets(read_documents_manifest(cfg.data.path)),
                                     cfg.train.seq_length);
  } catch (const std::exception&) {
    return 1.0;
  }
}

}  // namespace ulysses
