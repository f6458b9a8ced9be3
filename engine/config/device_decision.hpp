// The one place that decides, for a rank, which device it trains on ("cpu" or
// "cuda:LOCAL_RANK") and which c10d backend it talks through (gloo | nccl), from the run
// config and facts about the host: does this build have CUDA, how many GPUs are visible,
// local rank and local world size. Torch-free, so ulysses-run can refuse an impossible
// setting (exit 2) before any worker starts, and the studio's cost model knows whether
// attention will run as flash (GPU) or math (CPU). The facts are a plain struct so tests
// can feed any machine.
//
// Rules (train.device x parallel.backend):
//   device auto: CUDA when the build has CUDA and every local rank has its own GPU
//                (visible_gpus >= local_world_size); CPU otherwise.
//   device cuda: refused on a CPU-only build, or when local_world_size > visible_gpus.
//   device cpu : CPU.
//   backend auto: nccl on CUDA, gloo on CPU.
//   backend nccl: refused with device cpu (or auto that resolves to cpu), and on a
//                 CPU-only build.
//   backend gloo: allowed with either device (Gloo moves CUDA tensors through the host).
// A CUDA rank uses GPU index local_rank (of the visible GPUs).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses {

struct DeviceFacts {
  bool build_has_cuda = false;  // the engine was built against a CUDA libtorch
  int visible_gpus = 0;         // GPUs this process may use (after CUDA_VISIBLE_DEVICES)
  int local_rank = 0;
  int local_world_size = 1;
  std::string gpu_source;  // where visible_gpus came from, for messages

  // This build (compile definition ULYSSES_BUILD_HAS_CUDA from CMake) and this host
  // (count_physical_gpus, or ULYSSES_GPU_COUNT when set, filtered by count_visible_gpus),
  // for the given local rank / local world size.
  static DeviceFacts detect(int local_rank, int local_world_size);
};

// Whether this build's engine links a CUDA libtorch (set by CMake, torch-free).
bool build_has_cuda();

// GPUs visible to a process: `physical` GPUs, filtered by CUDA_VISIBLE_DEVICES as the CUDA
// runtime does: unset (nullptr) = all; "" = none; a comma list of indices or GPU-/MIG-
// UUIDs, cut at the first entry that is not a valid, not yet listed index (so "-1" or
// "0,7" on a 2-GPU host gives 0 and 1 GPUs). UUIDs cannot be checked here and count as
// one GPU each, at most `physical`.
int count_visible_gpus(const char* cuda_visible_devices, int physical);

// Physical NVIDIA GPUs on this host, without the driver API: the entries of
// `proc_dir` (/proc/driver/nvidia/gpus, one folder per GPU), else the /dev/nvidiaN device
// nodes in `dev_dir`. 0 when neither exists.
int count_physical_gpus(const std::string& proc_dir = "/proc/driver/nvidia/gpus", const std::string& dev_dir = "/dev");

struct DeviceDecision {
  bool cuda = false;
  int device_index = -1;  // CUDA device index (= local_rank) when cuda, else -1
  std::string device;     // "cpu" or "cuda:N"
  std::string backend;    // "gloo" or "nccl"
  std::string reason;     // one line for logs: why this device and backend
};

// Decides device and backend; problems (messages naming the numbers) go to `issues`
// (fields train.device / parallel.backend). The returned decision is meaningful only
// when no issue was added.
DeviceDecision decide_device(const std::string& device, const std::string& backend, const DeviceFacts& facts,
                             std::vector<ConfigIssue>* issues);
DeviceDecision decide_device(const RunConfig& cfg, const DeviceFacts& facts, std::vector<ConfigIssue>* issues);
// Same, throwing ConfigError with every issue.
DeviceDecision decide_device_or_throw(const RunConfig& cfg, const DeviceFacts& facts);

}  // namespace ulysses
