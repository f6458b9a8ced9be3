// Device/backend decision over the whole input table: train.device x parallel.backend x
// {CPU-only build, CUDA build} x visible GPUs vs local ranks, with the expected device,
// backend or refusal written out by hand; CUDA_VISIBLE_DEVICES parsing and GPU counting
// from fake /proc and /dev folders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>

#include "device_decision.hpp"

using namespace ulysses;
namespace fs = std::filesystem;

namespace {
DeviceFacts facts(bool cuda_build, int gpus, int local_rank, int local_world) {
  DeviceFacts f;
  f.build_has_cuda = cuda_build;
  f.visible_gpus = gpus;
  f.local_rank = local_rank;
  f.local_world_size = local_world;
  return f;
}

struct Row {
  std::string device, backend;
  bool cuda_build;
  int gpus, local_rank, local_world;
  // expected: either a device + backend, or a refusal naming `field` and containing `text`
  std::string want_device, want_backend, want_field, want_text;
};
}  // namespace

TEST(DeviceDecision, WholeInputTable) {
  const std::vector<Row> table = {
      // device auto
      {"auto", "auto", false, 0, 0, 1, "cpu", "gloo", "", ""},
      {"auto", "auto", false, 8, 3, 4, "cpu", "gloo", "", ""},  // CPU-only build ignores GPUs
      {"auto", "auto", true, 0, 0, 1, "cpu", "gloo", "", ""},   // CUDA build, no GPU
      {"auto", "auto", true, 1, 0, 1, "cuda:0", "nccl", "", ""},
      {"auto", "auto", true, 4, 2, 4, "cuda:2", "nccl", "", ""},  // local rank, not global
      {"auto", "auto", true, 8, 1, 2, "cuda:1", "nccl", "", ""},
      {"auto", "auto", true, 2, 1, 4, "cpu", "gloo", "", ""},  // 4 ranks, 2 GPUs: not one each
      {"auto", "gloo", true, 2, 1, 2, "cuda:1", "gloo", "", ""},
      {"auto", "gloo", false, 0, 0, 2, "cpu", "gloo", "", ""},
      {"auto", "nccl", true, 2, 0, 2, "cuda:0", "nccl", "", ""},
      {"auto", "nccl", true, 1, 0, 2, "", "", "parallel.backend", "auto resolved to cpu"},
      {"auto", "nccl", false, 0, 0, 1, "", "", "parallel.backend", "CPU-only"},
      // device cpu
      {"cpu", "auto", false, 0, 0, 2, "cpu", "gloo", "", ""},
      {"cpu", "auto", true, 8, 5, 8, "cpu", "gloo", "", ""},  // auto must not pick NCCL on cpu
      {"cpu", "gloo", true, 8, 0, 1, "cpu", "gloo", "", ""},
      {"cpu", "nccl", true, 8, 0, 1, "", "", "parallel.backend", "train.device is cpu"},
      {"cpu", "nccl", false, 0, 0, 1, "", "", "parallel.backend", "CPU-only"},
      // device cuda
      {"cuda", "auto", true, 1, 0, 1, "cuda:0", "nccl", "", ""},
      {"cuda", "auto", true, 8, 7, 8, "cuda:7", "nccl", "", ""},
      {"cuda", "gloo", true, 2, 1, 2, "cuda:1", "gloo", "", ""},
      {"cuda", "nccl", true, 4, 3, 4, "cuda:3", "nccl", "", ""},
      {"cuda", "auto", true, 2, 0, 4, "", "", "train.device", "4 local rank(s)"},
      {"cuda", "auto", true, 2, 0, 4, "", "", "train.device", "2 visible GPU(s)"},
      {"cuda", "auto", true, 0, 0, 1, "", "", "train.device", "0 visible GPU(s)"},
      {"cuda", "auto", false, 4, 0, 1, "", "", "train.device", "CPU-only"},
      {"cuda", "nccl", false, 4, 0, 1, "", "", "parallel.backend", "CPU-only"},
  };
  for (const Row& r : table) {
    const std::string what = "device=" + r.device + " backend=" + r.backend +
                             " cuda_build=" + std::to_string(r.cuda_build) + " gpus=" + std::to_string(r.gpus) +
                             " local_rank=" + std::to_string(r.local_rank) +
                             " local_world=" + std::to_string(r.local_world);
    std::vector<ConfigIssue> issues;
    const auto d =
        decide_device(r.device, r.backend, facts(r.cuda_build, r.gpus, r.local_rank, r.local_world), &issues);
    if (r.want_field.empty()) {
      EXPECT_TRUE(issues.empty()) << what << ": " << (issues.empty() ? "" : issues[0].message);
      EXPECT_EQ(d.device, r.want_device) << what;
      EXPECT_EQ(d.backend, r.want_backend) << what;
      EXPECT_EQ(d.cuda, r.want_device != "cpu") << what;
      EXPECT_EQ(d.device_index, d.cuda ? r.local_rank : -1) << what;
      EXPECT_FALSE(d.reason.empty()) << what;
    } else {
      bool found = false;
      for (const auto& i : issues) found |= i.field == r.want_field && i.message.find(r.want_text) != std::string::npos;
      EXPECT_TRUE(found) << what << ": wanted " << r.want_field << " '" << r.want_text << "', got " << issues.size()
                         << " issue(s)" << (issues.empty() ? "" : ": " + issues[0].message);
    }
  }
}

TEST(DeviceDecision, RunConfigOverloadAndThrowingForm) {
  RunConfig c;
  c.train.device = "cuda";
  c.parallel.sp_size = 4;
  try {
    decide_device_or_throw(c, facts(true, 2, 0, 4));
    FAIL() << "4 ranks on 2 GPUs must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("4 local rank(s)"), std::string::npos) << e.what();
  }
  c.parallel.backend = "auto";
  const auto d = decide_device_or_throw(c, facts(true, 4, 1, 4));
  EXPECT_EQ(d.device, "cuda:1");
  EXPECT_EQ(d.backend, "nccl");
}

TEST(DeviceDecision, CudaVisibleDevicesFollowsTheRuntimeRules) {
  EXPECT_EQ(count_visible_gpus(nullptr, 4), 4);  // unset: every GPU
  EXPECT_EQ(count_visible_gpus(nullptr, 0), 0);
  EXPECT_EQ(count_visible_gpus("", 4), 0);    // empty: none
  EXPECT_EQ(count_visible_gpus("-1", 4), 0);  // invalid first entry: none
  EXPECT_EQ(count_visible_gpus("0", 4), 1);
  EXPECT_EQ(count_visible_gpus("2,3", 4), 2);
  EXPECT_EQ(count_visible_gpus(" 1 , 0 ", 4), 2);
  EXPECT_EQ(count_visible_gpus("0,7,1", 2), 1);  // cut at the first index that does not exist
  EXPECT_EQ(count_visible_gpus("1,1", 4), 1);    // a repeated index ends the list
  EXPECT_EQ(count_visible_gpus("0,x,1", 4), 1);
  EXPECT_EQ(count_visible_gpus("GPU-0a1b,GPU-2c3d", 4), 2);
  EXPECT_EQ(count_visible_gpus("GPU-0a1b,GPU-2c3d", 1), 1);
  EXPECT_EQ(count_visible_gpus("0,1", 0), 0);  // no GPU at all
}

TEST(DeviceDecision, PhysicalGpusFromProcOrDevNodes) {
  const fs::path root = fs::temp_directory_path() / ("ulysses_gpus_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path proc = root / "proc", dev = root / "dev";
  fs::create_directories(dev);
  EXPECT_EQ(count_physical_gpus((root / "missing").string(), (root / "missing").string()), 0);
  EXPECT_EQ(count_physical_gpus(proc.string(), dev.string()), 0);
  // device nodes: nvidia0, nvidia1 count; nvidiactl, nvidia-uvm do not
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"})
    std::ofstream(dev / n) << "";
  EXPECT_EQ(count_physical_gpus(proc.string(), dev.string()), 2);
  // /proc/driver/nvidia/gpus has one folder per GPU (bus id) and wins over /dev
  for (const char* b : {"0000:17:00.0", "0000:2a:00.0", "0000:3d:00.0"}) fs::create_directories(proc / b);
  EXPECT_EQ(count_physical_gpus(proc.string(), dev.string()), 3);
  fs::remove_all(root);
}

TEST(DeviceDecision, DetectHonoursGpuCountOverrideAndCudaVisibleDevices) {
  ::setenv("ULYSSES_GPU_COUNT", "4", 1);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(DeviceFacts::detect(0, 1).visible_gpus, 4);
  ::setenv("CUDA_VISIBLE_DEVICES", "3,1", 1);
  auto f = DeviceFacts::detect(0, 1);
  EXPECT_EQ(f.visible_gpus, 2);
  EXPECT_NE(f.gpu_source.find("CUDA_VISIBLE_DEVICES='3,1'"), std::string::npos) << f.gpu_source;
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_EQ(DeviceFacts::detect(0, 1).visible_gpus, 0);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::unsetenv("ULYSSES_GPU_COUNT");
}

TEST(DeviceDecision, DetectUsesTheBuildAndTheRankArguments) {
  const auto f = DeviceFacts::detect(3, 5);
  EXPECT_EQ(f.local_rank, 3);
  EXPECT_EQ(f.local_world_size, 5);
  EXPECT_EQ(f.build_has_cuda, ulysses::build_has_cuda());
  EXPECT_GE(f.visible_gpus, 0);
  EXPECT_FALSE(f.gpu_source.empty());
}
