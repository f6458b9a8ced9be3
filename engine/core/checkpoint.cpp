// safetensors reader/writer and HF checkpoint save/load.
#include "checkpoint.hpp"

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
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + tmp);
    uint64_t n = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : data) out.write(static_cast<const char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()));
    if (!out) throw std::runtime_error("write to " + tmp + " failed (disk full?)");
  }
  fs::rename(tmp, path);  // never leave a half-written checkpoint under the final name
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open " + path);
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  if (in.gcount() != 8) throw ConfigError(path + " is not a safetensors file (too short)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  const auto fsize = fs::file_size(path);
  if (n > fsize - 8 || n > (1ULL << 28)) throw ConfigError(path + " is not a safetensors file (bad header length)");
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(h);
  } catch (const json::parse_error& e) {
    throw ConfigError(path + ": corrupt safetensors header: " + e.what());
  }
  const uint64_t data0 = 8 + n;
  std::map<std::string, at::Tensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    auto dtype = from_st(e.at("dtype").get<std::string>(), path);
    auto shape = e.at("shape").get<std::vector<int64_t>>();
    auto offs = e.at("data_offsets").get<std::vector<uint64_t>>();
    auto t = torch::empty(shape, dtype);
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (offs.size() != 2 || offs[1] - offs[0] != nbytes || data0 + offs[1] > fsize)
      throw ConfigError(path + ": tensor " + it.key() + " has inconsistent data_offsets (truncated file?)");
    in.seekg(static_cast<std::streamoff>(data0 + offs[0]));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
    out[it.key()] = t;
  }
  return out;
}

void save_checkpoint(LlamaModel& model, const std::string& dir, torch::Dtype dtype) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [name, t] : model.named_parameters()) ts.emplace_back(name, t.detach().to(dtype));
  write_safetensors((fs::path(dir) / "model.safetensors").string(), ts);
  std::ofstream cfg((fs::path(dir) / "config.json").string());
  cfg << model_to_hf_config(model.config(), dtype == torch::kBFloat16 ? "bfloat16" : "float32").dump(2) << "\n";
}

void load_checkpoint(LlamaModel& model, const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  if (!fs::exists(path)) throw ConfigError(path + " not found (sharded checkpoints are not supported)");
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
}

}  // namespace ulysses
