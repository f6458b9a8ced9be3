// The memory planner through the front door: `ulysses-run CONFIG --plan [--json]
// [--max-seq G | --gpu-gib G]` execs `ulysses-worker --plan`, starts no training worker and writes no
// run directory; a GPU plan on this CPU-only machine; bench-1b at 512K tokens on one H200
// with and without the long-sequence techniques; --max-seq and --gpu-gib (one rule); bad input exits 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using ulysses::test::sh;

std::string scratch() {
  auto d = fs::temp_directory_path() / ("ulysses_plan_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

// The shared tiny model (e2e_util.hpp) on CPU; its data path names no file: a plan reads no data.
std::string tiny_config() {
  json c = ulysses::test::tiny_config(2, 2, "/nonexistent");
  c["train"]["device"] = "cpu";
  const auto p = scratch() + "/tiny.json";
  std::ofstream(p) << c.dump(2);
  return p;
}

const std::string kRun = std::string("'") + ULYSSES_RUN_BIN + "' ";
const std::string kWorker = std::string(" --worker '") + ULYSSES_WORKER_BIN + "'";
const std::string kBench = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/bench-1b.json";
constexpr double kH200Bytes = 141e9;  // "141 GB" as sold; the device reports ~140 GiB, so this is the stricter bound

json plan_json(const std::string& args) {
  auto p = sh(kRun + args + " --plan --json" + kWorker, scratch());
  EXPECT_EQ(p.code, 0) << args;
  return p.code == 0 ? json::parse(p.out) : json();
}

}  // namespace

TEST(PlanCli, TextPlanStartsNoWorkerAndWritesNoRunDirectory) {
  const auto dir = scratch() + "/text";
  fs::create_directories(dir);
  auto p = sh(kRun + "'" + tiny_config() + "' --plan" + kWorker, dir);
  ASSERT_EQ(p.code, 0) << p.out;
  for (const char* s : {"parameters", "gradients", "optimizer state", "saved activations", "per layer",
                        "loss/logits peak", "transient at peak", "peak total", "cpu"})
    EXPECT_NE(p.out.find(s), std::string::npos) << s << " missing in:\n" << p.out;
  EXPECT_FALSE(fs::exists(dir + "/runs"));
}

TEST(PlanCli, JsonHasPeakAndActivationsConsistentWithTheParts) {
  const auto j = plan_json("'" + tiny_config() + "'");
  ASSERT_TRUE(j.contains("peak_bytes"));
  ASSERT_TRUE(j.contains("activation_bytes"));
  const int64_t peak = j["peak_bytes"], act = j["activation_bytes"], st = j["static_bytes"];
  EXPECT_GT(act, 0);
  EXPECT_EQ(peak, st + act + j["transient_bytes"].get<int64_t>());
  EXPECT_EQ(j["activation_bytes"].get<int64_t>(),
            j["layers"].get<int64_t>() * j["activation_per_layer_bytes"].get<int64_t>() +
                j["activation_other_bytes"].get<int64_t>());
  EXPECT_EQ(j["sp_size"], 2);
  EXPECT_EQ(j["local_tokens"], 32);
  // --set reaches the plan: twice the tokens, more activations
  const auto j2 = plan_json("'" + tiny_config() + "' --set train.seq_length=128");
  EXPECT_GT(j2["activation_bytes"].get<int64_t>(), act);
}

// bench-1b names cuda: the plan is for the GPU even though this machine has none.
TEST(PlanCli, GpuPlanOnACpuMachine) {
  const auto j = plan_json("'" + kBench + "' --set train.seq_length=16384");
  EXPECT_EQ(j["device"], "cuda");
  EXPECT_EQ(j["attention"], "flash");
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_EQ(j["measured_static_bytes"].get<int64_t>(), 16 * j["params"].get<int64_t>());
  EXPECT_LT(j["peak_bytes"].get<double>(), kH200Bytes);
}

// bench-1b at 512K tokens on one H200: the config's techniques (layer checkpointing with
// offload, tiled loss, TiledMLP) make it fit; without them it does not.
TEST(PlanCli, Bench1bAt512KFitsOneH200OnlyWithTechniques) {
  const auto off =
      plan_json("'" + kBench +
                "' --set train.seq_length=524288 --set train.activation_checkpointing=none --set "
                "train.offload_activations=false --set train.loss_chunk_tokens=0 --set train.mlp_chunk_tokens=0");
  EXPECT_EQ(off["seq_length"], 524288);
  EXPECT_GT(off["peak_bytes"].get<double>(), kH200Bytes) << off.dump(1);
  const auto on = plan_json("'" + kBench + "' --set train.seq_length=524288");
  EXPECT_TRUE(on.value("memory_techniques_applied", false));
  EXPECT_LT(on["peak_bytes"].get<double>(), kH200Bytes) << on.dump(1);
  EXPECT_LT(on["peak_bytes"].get<double>(), off["peak_bytes"].get<double>());
}

TEST(PlanCli, MaxSeqIsTheLongestThatFits) {
  const auto cfg = "'" + tiny_config() + "'";
  const auto base = plan_json(cfg + " --set train.seq_length=256");
  const double gib = (base["peak_bytes"].get<double>() + 200000.0) / (1024.0 * 1024.0 * 1024.0);
  char g[64];
  std::snprintf(g, sizeof g, "%.12g", gib);
  auto p = sh(kRun + cfg + " --plan --json --max-seq " + g + kWorker, scratch());
  ASSERT_EQ(p.code, 0);
  const auto j = json::parse(p.out);
  const int64_t N = j["max_seq_length"], limit = j["limit_bytes"];
  EXPECT_GT(N, 256);
  EXPECT_EQ(N % 2, 0);
  EXPECT_LE(j["peak_bytes"].get<int64_t>(), limit);
  const auto next = plan_json(cfg + " --set train.seq_length=" + std::to_string(N + 2));
  EXPECT_GT(next["peak_bytes"].get<int64_t>(), limit);
  auto t = sh(kRun + cfg + " --plan --max-seq " + g + kWorker, scratch());
  EXPECT_EQ(t.code, 0);
  EXPECT_NE(t.out.find(std::to_string(N) + " tokens"), std::string::npos) << t.out;
  // --gpu-gib: a plan at a fixed length decided by the rule --max-seq searched with (plan::fits_device):
  // N fits, N + 2 does not.
  for (const int64_t n : {N, N + 2}) {
    auto f = sh(kRun + cfg + " --set train.seq_length=" + std::to_string(n) + " --plan --json --gpu-gib " + g + kWorker,
                scratch());
    ASSERT_EQ(f.code, 0) << f.out;
    const auto fj = json::parse(f.out);
    EXPECT_EQ(fj["fits"].get<bool>(), n == N) << n;
    EXPECT_EQ(fj["gpu_limit_bytes"].get<int64_t>(), limit);
  }
  auto ft =
      sh(kRun + cfg + " --set train.seq_length=" + std::to_string(N) + " --plan --gpu-gib " + g + kWorker, scratch());
  EXPECT_NE(ft.out.find("% headroom): yes"), std::string::npos) << ft.out;
}

TEST(PlanCli, BadInputExits2) {
  const auto cfg = "'" + tiny_config() + "'";
  EXPECT_EQ(sh(kRun + cfg + " --plan --max-seq -1" + kWorker, scratch()).code, 2);
  EXPECT_EQ(sh(kRun + cfg + " --plan --max-seq 0" + kWorker, scratch()).code, 2);
  // A limit past int64 bytes wrapped to a negative one: "none fits", exit 0.
  const auto huge = sh(kRun + cfg + " --plan --json --max-seq 1e10" + kWorker + " 2>&1", scratch());
  EXPECT_EQ(huge.code, 2) << huge.out;
  EXPECT_NE(huge.out.find("between 0 and 1048576"), std::string::npos) << huge.out;
  const auto with_out = sh(kRun + cfg + " --plan --out " + scratch() + "/plan-out" + kWorker + " 2>&1", scratch());
  EXPECT_EQ(with_out.code, 2) << with_out.out;  // --out is not ignored without a word
  EXPECT_NE(with_out.out.find("--plan cannot be combined with --out"), std::string::npos) << with_out.out;
  EXPECT_EQ(sh(kRun + cfg + " --max-seq 4" + kWorker, scratch()).code, 2);  // --max-seq without --plan
  EXPECT_EQ(sh(kRun + cfg + " --gpu-gib 4" + kWorker, scratch()).code, 2);  // --gpu-gib without --plan
  EXPECT_EQ(sh(kRun + cfg + " --plan --gpu-gib 0" + kWorker, scratch()).code, 2);
  const auto both = sh(kRun + cfg + " --plan --gpu-gib 4 --max-seq 4" + kWorker + " 2>&1", scratch());
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("both name the device"), std::string::npos) << both.out;
  EXPECT_EQ(sh(kRun + cfg + " --plan --set parallel.sp_size=3" + kWorker, scratch()).code, 2);
  EXPECT_EQ(sh(std::string("'") + ULYSSES_WORKER_BIN + "' --plan --config /nonexistent.json", scratch()).code, 2);
}
