// safetensors reader/writer and HF checkpoint save/load.
#include "checkpoint.hpp"

#include "checkpoint_layout.hpp"
#include "safetensors_header.hpp"
#include "ulysses/common/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <cstdio>
#include <fstream>

namespace ulysses {
namespace fs = std::filesystem;

namespace {
const char* st_dtype(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32:
      return "F32";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat16:
      return "F16";
    case torch::kInt64:
      return "I64";
    default:
      throw std::runtime_error("unsupported dtype for safetensors");
  }
}
torch::Dtype from_st(const std::string& s, const std::string& path) {
  if (s == "F32") return torch::kFloat32;
  if (s == "BF16") return torch::kBFloat16;
  if (s == "F16") return torch::kFloat16;
  if (s == "I64") return torch::kInt64;
  throw ConfigError(path + ": unsupported safetensors dtype " + s);
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [k, v] : metadata) header["__metadata__"][k] = v;
  int64_t off = 0;
  std::vector<at::Tensor> data;
  for (const auto& [name, t0] : tensors) {
    auto t = t0.detach().cpu().contiguous();
    const int64_t nbytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {
        {"dtype", st_dtype(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {off, off + nbytes}}};
    off += nbytes;
    data.push_back(t);
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align the data section as HF does
  // Whole or not at all (temp file, fsync, rename): never a half-written checkpoint under the
  // final name; a file-size limit or a full disk said as such.
  ulysses::write_file_atomically(path, [&](std::ostream& out) {
    uint64_t n = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()));
  });
}

namespace {

// Reads one tensor's bytes, whose place read_safetensors_header checked against the file.
at::Tensor read_tensor(std::ifstream& in, const std::string& path, uint64_t data0, const SafetensorsEntry& e) {
  const std::string where = path + ": tensor " + e.name;
  const auto dtype = from_st(e.dtype, path);
  const uint64_t begin = e.begin, nbytes = e.end - e.begin;
  auto t = torch::empty(e.shape, dtype);
  in.seekg(static_cast<std::streamoff>(data0 + begin));
  if (!in) throw ConfigError(where + ": cannot seek to byte " + std::to_string(data0 + begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
  if (!in || static_cast<uint64_t>(in.gcount()) != nbytes)
    throw ConfigError(where + ": read " + std::to_string(in.gcount()) + " of " + std::to_string(nbytes) +
                      " bytes (truncated file?)");
  return t;
}

std::ifstream open_for_reading(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open " + path + ": " + std::strerror(errno));
  return in;
}

}  // namespace

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  // Every read is checked: stream state and byte count after each seek and read, offsets
  // compared without wrap-around, the header length bounded, shapes multiplied in checked
  // 64-bit arithmetic (safetensors_header.cpp, torch-free and fuzzed). A tensor is never
  // handed out with bytes the file did not supply.
  const std::string why = regular_file_problem(path);
  if (!why.empty()) throw ConfigError("cannot read " + path + ": " + why);
  std::ifstream in = open_for_reading(path);
  std::error_code ec;
  const uint64_t fsize = fs::file_size(path, ec);
  if (ec) throw ConfigError("cannot read " + path + ": " + ec.message());
  const SafetensorsHeader header = read_safetensors_header(in, fsize, path);
  std::map<std::string, at::Tensor> out;
  for (const SafetensorsEntry& e : header.tensors) out[e.name] = read_tensor(in, path, header.data_offset, e);
  return out;
}

namespace {

// Writes `text` to path whole or not at all (atomic_file.hpp).
void write_text_file(const std::string& path, const std::string& text) { ulysses::write_file_atomically(path, text); }

const char* torch_dtype_name(torch::Dtype d) {
  return d == torch::kBFloat16 ? "bfloat16" : d == torch::kFloat16 ? "float16" : "float32";
}

// Earlier weights in dir that the new save (`kept`, its file names) would leave contradicting
// it: the single file, an index and its shards (model-DDDDD-of-DDDDD.safetensors, no other
// name: a file merely like one is the user's).
std::vector<fs::path> stale_weights(const fs::path& dir, const std::vector<std::string>& kept) {
  auto stale = [&](const std::string& n) { return std::find(kept.begin(), kept.end(), n) == kept.end(); };
  std::error_code ec;
  std::vector<fs::path> gone;
  for (const char* n : {ckpt::kWeightsFile, ckpt::kWeightsIndexFile})
    if (stale(n) && (fs::exists(dir / n, ec) || fs::is_symlink(dir / n, ec))) gone.push_back(dir / n);
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (ckpt::is_shard_file_name(n) && stale(n)) gone.push_back(it->path());
  }
  return gone;
}

}  // namespace

std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& nbytes, int64_t shard_bytes) {
  // Hugging Face's greedy split: tensors in order, a new shard when the next tensor would
  // take the current one past shard_bytes; a tensor larger than shard_bytes sits alone.
  std::vector<std::vector<size_t>> shards;
  int64_t cur = 0;
  for (size_t i = 0; i < nbytes.size(); ++i) {
    if (shards.empty() || (shard_bytes > 0 && cur + nbytes[i] > shard_bytes && !shards.back().empty())) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += nbytes[i];
  }
  return shards;
}

void save_checkpoint(LlamaModel& model, const std::string& dir, torch::Dtype dtype, int64_t shard_bytes,
                     const std::map<std::string, std::string>& metadata) {
  auto meta_for = [&](const std::string& file) {
    auto m = metadata;
    if (m.count(ckpt::kMetaFile)) m[ckpt::kMetaFile] = file;
    return m;
  };
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16 && dtype != torch::kFloat16)
    throw std::invalid_argument("save_checkpoint: dtype must be float32, bfloat16 or float16");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create checkpoint directory " + dir + ": " + ec.message());
  std::vector<std::pair<std::string, at::Tensor>> ts;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (auto& [name, t] : model.named_parameters()) {
    ts.emplace_back(name, t.detach().to(torch::kCPU).to(dtype));
    sizes.push_back(ts.back().second.numel() * static_cast<int64_t>(ts.back().second.element_size()));
    total += sizes.back();
  }
  const fs::path d(dir);
  const auto shards = plan_shards(sizes, shard_bytes);
  // Every new file is written whole into a staging folder first; only then are they moved in
  // and the earlier weights they do not replace removed. A save that fails (a full disk, a
  // file size limit) leaves the earlier model in dir as it was.
  const fs::path stage = d / (".tmp-save-" + std::to_string(::getpid()));
  fs::remove_all(stage, ec);
  // Staging folders of saves whose process is gone (killed mid-save) go too: they were never
  // cleaned, a partial model each.
  std::vector<fs::path> abandoned;
  for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    const std::string prefix = ".tmp-save-";
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = n.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(digits);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) abandoned.push_back(it->path());
  }
  ec.clear();
  for (const auto& p : abandoned) fs::remove_all(p, ec);
  fs::create_directories(stage, ec);
  if (ec) throw std::runtime_error("cannot create " + stage.string() + ": " + ec.message());
  std::vector<std::string> names;  // the new files, in the order they are moved in
  try {
    if (shards.size() <= 1) {
      write_safetensors((stage / ckpt::kWeightsFile).string(), ts, meta_for(ckpt::kWeightsFile));
      names.push_back(ckpt::kWeightsFile);
    } else {
      // HF layout: model-00001-of-0000N.safetensors + model.safetensors.index.json
      json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
      char name[64];
      for (size_t s = 0; s < shards.size(); ++s) {
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        std::vector<std::pair<std::string, at::Tensor>> part;
        for (size_t i : shards[s]) {
          part.push_back(ts[i]);
          index["weight_map"][ts[i].first] = name;
        }
        write_safetensors((stage / name).string(), part, meta_for(name));
        names.push_back(name);
      }
      write_text_file((stage / ckpt::kWeightsIndexFile).string(), index.dump(2) + "\n");
      names.push_back(ckpt::kWeightsIndexFile);
    }
    write_text_file((stage / ckpt::kModelConfigFile).string(),
                    model_to_hf_config(model.config(), torch_dtype_name(dtype)).dump(2) + "\n");
    names.push_back(ckpt::kModelConfigFile);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  // The new files are whole and on disk (write_file_atomically syncs each) before any of them
  // replaces an earlier one.
  // What is not moved in stays in the staging folder, and the message says so.
  auto kept_in_stage = [&](const std::string& what) {
    return std::runtime_error(what + "; the trained model's files not moved in are kept in " + stage.string());
  };
  const std::vector<fs::path> stale = stale_weights(d, names);
  // A sharded save: an earlier model.safetensors goes before the new index comes in, since a
  // loader reads model.safetensors first (left beside the index, it would make the folder load
  // the old weights under the new config.json).
  const bool sharded = std::find(names.begin(), names.end(), ckpt::kWeightsIndexFile) != names.end();
  if (sharded && std::find(stale.begin(), stale.end(), d / ckpt::kWeightsFile) != stale.end()) {
    fs::remove(d / ckpt::kWeightsFile, ec);
    if (ec)
      throw kept_in_stage("cannot remove the earlier " + (d / ckpt::kWeightsFile).string() +
                          ", which would be read instead of the new shards: " + ec.message());
  }
  for (const auto& n : names) {
    fs::rename(stage / n, d / n, ec);
    if (ec) throw kept_in_stage("cannot move " + (stage / n).string() + " into " + dir + ": " + ec.message());
  }
  ulysses::sync_path(dir, true);
  // The earlier index and shards the new files do not replace: the folder already loads the
  // new model (model.safetensors comes first; shards without their index are not read), yet a
  // file that cannot be removed is named, never left unsaid.
  std::vector<std::string> left;
  for (const auto& p : stale) {
    if (p == d / ckpt::kWeightsFile && sharded) continue;  // removed above
    fs::remove(p, ec);
    if (ec) left.push_back(p.filename().string() + " (" + ec.message() + ")");
  }
  fs::remove_all(stage, ec);
  if (!left.empty()) {
    std::string list;
    for (const auto& l : left) list += (list.empty() ? "" : ", ") + l;
    throw std::runtime_error("saved the model to " + dir + ", but cannot remove the earlier " + list +
                             "; remove it by hand");
  }
}

namespace {

// Reads the tensors of `where` (checkpoint_tensors) that `keep` accepts, one file open at a time.
template <class Keep>
std::map<std::string, at::Tensor> read_tensors(const std::map<std::string, CheckpointTensor>& where, Keep keep) {
  std::map<std::string, at::Tensor> out;
  std::string open_file;
  std::ifstream in;
  for (const auto& [name, t] : where) {
    if (!keep(name)) continue;
    if (t.file != open_file) {
      in = open_for_reading(t.file);
      open_file = t.file;
    }
    out[name] = read_tensor(in, t.file, t.data_offset, t.entry);
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> read_checkpoint_tensors(const std::string& dir) {
  return read_tensors(checkpoint_tensors(dir), [](const std::string&) { return true; });
}

std::vector<std::string> load_checkpoint(LlamaModel& model, const std::string& dir) {
  try {
    // The same headers and the same test the launcher ran before starting the workers
    // (validation_issues): every parameter present with its shape, before any data is read.
    const auto where = checkpoint_tensors(dir);
    const std::string why = checkpoint_mismatch(where, model.config(), dir);
    if (!why.empty()) throw ConfigError(why);
    auto tensors = read_tensors(where, [&](const std::string& name) { return model.has_param(name); });
    // Weights that are no numbers (NaN, +-Inf) are bad input, named here (exit 2): they showed
    // only as a NaN loss after launch, or, in an embedding row the data never used, trained
    // with exit 0 and were saved back.
    for (const auto& [name, t] : tensors) {
      if (!t.is_floating_point()) continue;
      const int64_t bad = (~torch::isfinite(t)).sum().item<int64_t>();
      if (bad > 0) {
        const std::string file = where.count(name) ? where.at(name).file : dir;
        throw ConfigError("checkpoint " + dir + ": tensor " + name + " (in " + file + ") holds " + std::to_string(bad) +
                          " value(s) that are NaN or infinite; the weights are damaged (re-download or re-save them)");
      }
    }
    torch::NoGradGuard ng;
    for (auto& [name, p] : model.named_parameters()) p.copy_(tensors.at(name).to(p.scalar_type()));
    return checkpoint_unused(where, model.config());
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, std::bad_alloc, filesystem errors: name the file
    throw ConfigError("cannot load checkpoint " + dir + ": " + e.what());
  }
}

}  // namespace ulysses
