// Device and backend decision for one rank (rules in device_decision.hpp).
#include "device_decision.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace ulysses {

namespace fs = std::filesystem;

bool build_has_cuda() {
#if defined(ULYSSES_BUILD_HAS_CUDA) && ULYSSES_BUILD_HAS_CUDA
  return true;
#else
  return false;
#endif
}

int count_visible_gpus(const char* cuda_visible_devices, int physical) {
  physical = std::max(0, physical);
  if (cuda_visible_devices == nullptr) return physical;
  const std::string s = cuda_visible_devices;
  std::set<long> seen;
  int n = 0;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    std::string tok = s.substr(a, b - a);
    tok.erase(0, tok.find_first_not_of(" \t"));
    tok.erase(tok.find_last_not_of(" \t") + 1);
    if (tok.empty()) break;
    if (tok.rfind("GPU-", 0) == 0 || tok.rfind("MIG-", 0) == 0) {
      if (n >= physical) break;
      ++n;
    } else {
      if (!std::all_of(tok.begin(), tok.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) break;
      if (tok.size() > 6) break;
      const long idx = std::strtol(tok.c_str(), nullptr, 10);
      if (idx >= physical || !seen.insert(idx).second) break;
      ++n;
    }
    a = b + 1;
  }
  return n;
}

int count_physical_gpus(const std::string& proc_dir, const std::string& dev_dir) {
  std::error_code ec;
  int n = 0;
  if (fs::is_directory(proc_dir, ec)) {
    for (const auto& e : fs::directory_iterator(proc_dir, ec)) {
      (void)e;
      ++n;
    }
    if (n > 0) return n;
  }
  if (fs::is_directory(dev_dir, ec)) {
    for (const auto& e : fs::directory_iterator(dev_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
          std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
        ++n;
    }
  }
  return n;
}

DeviceFacts DeviceFacts::detect(int local_rank, int local_world_size) {
  DeviceFacts f;
  f.build_has_cuda = ulysses::build_has_cuda();
  f.local_rank = local_rank;
  f.local_world_size = local_world_size;
  int physical = count_physical_gpus();
  f.gpu_source = std::to_string(physical) + " NVIDIA GPU(s) found in /proc/driver/nvidia/gpus or /dev/nvidia*";
  if (const char* n = std::getenv("ULYSSES_GPU_COUNT"); n && *n) {  // escape hatch for hosts that hide both
    char* end = nullptr;
    const long v = std::strtol(n, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 4096) {
      physical = static_cast<int>(v);
      f.gpu_source = std::to_string(physical) + " GPU(s) from ULYSSES_GPU_COUNT";
    }
  }
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  f.visible_gpus = count_visible_gpus(cvd, physical);
  if (cvd) f.gpu_source += ", CUDA_VISIBLE_DEVICES='" + std::string(cvd) + "'";
  return f;
}

DeviceDecision decide_device(const std::string& device, const std::string& backend, const DeviceFacts& f,
                             std::vector<ConfigIssue>* issues) {
  auto bad = [&](const std::string& field, const std::string& msg) {
    if (issues) issues->push_back({field, msg});
  };
  const std::string n_ranks = std::to_string(f.local_world_size) + " local rank(s)";
  const std::string n_gpus =
      std::to_string(f.visible_gpus) + " visible GPU(s)" + (f.gpu_source.empty() ? "" : " (" + f.gpu_source + ")");
  const bool enough_gpus = f.visible_gpus >= f.local_world_size && f.visible_gpus > 0;

  DeviceDecision d;
  if (device == "cuda") {
    d.cuda = true;
    if (!f.build_has_cuda)
      bad("train.device",
          "train.device is cuda but this build is CPU-only (libtorch without CUDA); use train.device=cpu or auto, "
          "or rebuild against a CUDA libtorch (-DCMAKE_PREFIX_PATH=<torch>/share/cmake)");
    else if (!enough_gpus)
      bad("train.device", "train.device=cuda needs one GPU per local rank: " + n_ranks +
                              " (parallel.sp_size x parallel.dp_size) but " + n_gpus + "; lower sp_size x dp_size to " +
                              std::to_string(std::max(1, f.visible_gpus)) + " or use train.device=cpu");
    d.reason = "train.device=cuda";
  } else if (device == "auto") {
    d.cuda = f.build_has_cuda && enough_gpus;
    if (d.cuda)
      d.reason = "train.device=auto: CUDA build and " + n_gpus + " for " + n_ranks;
    else if (!f.build_has_cuda)
      d.reason = "train.device=auto: CPU-only build";
    else
      d.reason = "train.device=auto: " + n_gpus + " for " + n_ranks + ", not one GPU per rank";
  } else {
    d.cuda = false;  // "cpu" (other values are validate()'s business)
    d.reason = "train.device=" + device;
  }
  if (d.cuda) {
    d.device_index = f.local_rank;
    d.device = "cuda:" + std::to_string(f.local_rank);
  } else {
    d.device = "cpu";
  }

  if (backend == "nccl") {
    if (!f.build_has_cuda)
      bad("parallel.backend",
          "parallel.backend nccl needs a build against a CUDA libtorch with NCCL; this build is CPU-only "
          "(use parallel.backend=gloo or auto)");
    else if (!d.cuda)
      bad("parallel.backend", "parallel.backend nccl needs the model on a GPU, but train.device " +
                                  (device == "auto" ? "auto resolved to cpu (" + d.reason + ")" : "is " + device) +
                                  "; use parallel.backend=gloo or train.device=cuda");
    d.backend = "nccl";
  } else if (backend == "gloo") {
    d.backend = "gloo";
  } else {
    d.backend = d.cuda ? "nccl" : "gloo";
  }
  d.reason += "; backend " + d.backend + (backend == "auto" ? " (parallel.backend=auto)" : "");
  return d;
}

DeviceDecision decide_device(const RunConfig& cfg, const DeviceFacts& facts, std::vector<ConfigIssue>* issues) {
  return decide_device(cfg.train.device, cfg.parallel.backend, facts, issues);
}

DeviceDecision decide_device_or_throw(const RunConfig& cfg, const DeviceFacts& facts) {
  std::vector<ConfigIssue> issues;
  DeviceDecision d = decide_device(cfg, facts, &issues);
  throw_if_invalid(issues);
  return d;
}

}  // namespace ulysses
