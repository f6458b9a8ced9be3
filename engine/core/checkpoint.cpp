// safetensors reader/writer and HF checkpoint save/load.
#include "checkpoint.hpp"

#include "safetensors_header.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace ulysses {
namespace fs = std::filesystem;

namespace {
const char* st_dtype(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32: return "F32";
    case torch::kBFloat16: return "BF16";
    case torch::kFloat16: return "F16";
    case torch::kInt64: return "I64";
    default: throw std::runtime_error("unsupported dtype for safetensors");
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

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t off = 0;
  std::vector<at::Tensor> data;
  for (const auto& [name, t0] : tensors) {
    auto t = t0.detach().cpu().contiguous();
    const int64_t nbytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {{"dtype", st_dtype(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {off, off + nbytes}}};
    off += nbytes;
    data.push_back(t);
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align the data section as HF does
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    uint64_t n = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : data) out.write(static_cast<const char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()));
    out.flush();
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw std::runtime_error("writing " + tmp + " failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // never leave a half-written checkpoint under the final name
  if (ec) throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  // Every read is checked: stream state and byte count after each seek and read, offsets
  // compared without wrap-around, the header length bounded, shapes multiplied in checked
  // 64-bit arithmetic. A tensor is never handed out with bytes the file did not supply.
  const std::string why = regular_file_problem(path);
  if (!why.empty()) throw ConfigError("cannot read " + path + ": " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open " + path + ": " + std::strerror(errno));
  std::error_code ec;
  const uint64_t fsize = fs::file_size(path, ec);
  if (ec) throw ConfigError("cannot read " + path + ": " + ec.message());
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  if (!in || in.gcount() != 8) throw ConfigError(path + " is not a safetensors file (shorter than 8 bytes)");
  const uint64_t n = parse_safetensors_length(le, fsize, path);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  if (!in || static_cast<uint64_t>(in.gcount()) != n) throw ConfigError(path + ": truncated safetensors header");
  // Every size, offset and dtype checked torch-free (safetensors_header.cpp, fuzzed).
  const SafetensorsHeader header = parse_safetensors_header(h, fsize, path);
  const uint64_t data0 = header.data_offset;
  std::map<std::string, at::Tensor> out;
  for (const SafetensorsEntry& e : header.tensors) {
    const std::string where = path + ": tensor " + e.name;
    const auto dtype = from_st(e.dtype, path);
    const std::vector<int64_t>& shape = e.shape;
    const uint64_t begin = e.begin, nbytes = e.end - e.begin;
    auto t = torch::empty(shape, dtype);
    in.seekg(static_cast<std::streamoff>(data0 + begin));
    if (!in) throw ConfigError(where + ": cannot seek to byte " + std::to_string(data0 + begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
    if (!in || static_cast<uint64_t>(in.gcount()) != nbytes)
      throw ConfigError(where + ": read " + std::to_string(in.gcount()) + " of " + std::to_string(nbytes) + " bytes (truncated file?)");
    out[e.name] = t;
  }
  return out;
}

void save_checkpoint(LlamaModel& model, const std::string& dir, torch::Dtype dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create checkpoint directory " + dir + ": " + ec.message());
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [name, t] : model.named_parameters()) ts.emplace_back(name, t.detach().to(dtype));
  write_safetensors((fs::path(dir) / "model.safetensors").string(), ts);
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  const std::string tmp = cfg_path + ".tmp";
  {
    std::ofstream cfg(tmp, std::ios::trunc);
    if (!cfg) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    cfg << model_to_hf_config(model.config(), dtype == torch::kBFloat16 ? "bfloat16" : "float32").dump(2) << "\n";
    cfg.close();
    if (!cfg) throw std::runtime_error("writing " + tmp + " failed (disk full?)");
  }
  fs::rename(tmp, cfg_path, ec);
  if (ec) throw std::runtime_error("cannot rename " + tmp + " to " + cfg_path + ": " + ec.message());
}

void load_checkpoint(LlamaModel& model, const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(path + " not found (sharded checkpoints are not supported)");
  try {
    auto tensors = read_safetensors(path);
    torch::NoGradGuard ng;
    std::string missing;
    for (auto& [name, p] : model.named_parameters()) {
      auto it = tensors.find(name);
      if (it == tensors.end()) {
        missing += (missing.empty() ? "" : ", ") + name;
        continue;
      }
      if (it->second.sizes() != p.sizes()) {
        std::ostringstream msg;
        msg << path << ": " << name << " has shape " << it->second.sizes() << ", the model expects " << p.sizes();
        throw ConfigError(msg.str());
      }
      p.copy_(it->second.to(p.scalar_type()));
    }
    if (!missing.empty()) throw ConfigError(path + " lacks tensors: " + missing);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, std::bad_alloc, filesystem errors: name the file
    throw ConfigError("cannot load checkpoint " + path + ": " + e.what());
  }
}

}  // namespace ulysses
