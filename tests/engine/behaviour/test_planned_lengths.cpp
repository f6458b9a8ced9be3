// The sequence lengths the planner gives the shipped Llama-3-8B and bench-1b configs on the GPUs
// docs/LONG_SEQUENCES.md ("Cuts of the transient") reports, held so that a change that makes
// any of them need more memory fails: each case is planned at its length (the meta-device dry
// run of the real step, GPU reserve included) and its GPU total must fit the GPU's usable
// memory less kGpuHeadroom, decided by plan::fits_device, the one rule `ulysses-run CONFIG --plan
// --max-seq GIB` searches with (the allocator replayed at the GPU's limit), with the allocator
// replayed as expandable segments (train.allocator=expandable).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meta_dry_run.hpp"
#include "run_config.hpp"

using namespace ulysses;

namespace {

struct Case {
  const char* what;
  const char* config;  // under resources/configs
  std::vector<std::string> sets;
  int64_t tokens;     // the length held
  double usable_gib;  // the GPU's usable memory (docs/ZERO.md: 80 GB H100 79.6 GiB, 141 GB H200 139 GiB)
};

void expect_fits(const Case& k) {
  SCOPED_TRACE(k.what);
  std::vector<std::string> sets = k.sets;
  // PyTorch's expandable segments, as ALST runs (docs/GPU.md "Allocator model"): the planner
  // replays the dry run's allocations through them; the caching allocator's segments plan
  // 25-45% more at these lengths, which is why ALST sets it.
  sets.push_back("train.allocator=expandable");
  sets.push_back("train.seq_length=" + std::to_string(k.tokens));
  const RunConfig cfg = load_run_config(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/" + k.config, sets);
  plan::PlanOptions o;
  o.detail = true;  // the per-layer input that offload moves to the host (as max_seq_length plans)
  const double gib = 1024.0 * 1024.0 * 1024.0;
  plan::MemoryPlan p;
  const bool fits = plan::fits_device(cfg, static_cast<int64_t>(k.usable_gib * gib), o, &p);
  ASSERT_TRUE(p.has_gpu_reserve) << "a GPU plan";
  const double limit = double(static_cast<int64_t>(k.usable_gib * gib)) * (1.0 - cost::kGpuHeadroom);
  std::printf("%-58s %9lld tokens: peak %6.2f GiB, GPU total %6.2f GiB of %6.2f GiB (%.2f s)\n", k.what,
              static_cast<long long>(k.tokens), double(p.peak_bytes) / gib, double(p.gpu.device_bytes()) / gib,
              limit / gib, p.dry_run_s);
  EXPECT_TRUE(fits) << "planned GPU total " << p.gpu.device_bytes() << " B at " << k.tokens << " tokens exceeds "
                    << limit;
  EXPECT_LE(double(p.gpu.device_bytes()), limit);
}

}  // namespace

TEST(PlannedLengths, Llama3_8bOnOne80GbGpuStage3BothOffloads) {
  expect_fits({"Llama-3-8B, 1 x 80 GB, stage 3 + both offloads",
               "llama3-8b.json",
               {"parallel.sp_size=1", "train.offload_optimizer=true", "train.offload_params=true",
                "model.max_position_embeddings=16777216"},
               524288,
               79.6});
}

TEST(PlannedLengths, Llama3_8bOnEight80GbGpusStage3BothOffloads) {
  expect_fits({"Llama-3-8B, 8 x 80 GB, stage 3 + both offloads",
               "llama3-8b.json",
               {"train.offload_optimizer=true", "train.offload_params=true", "model.max_position_embeddings=16777216"},
               4194304,
               79.6});
}

TEST(PlannedLengths, Bench1bOnOne141GbGpuStage3BothOffloads) {
  expect_fits({"bench-1b, 1 x 141 GB, stage 3 + both offloads",
               "bench-1b.json",
               {"train.zero_stage=3", "train.offload_optimizer=true", "train.offload_params=true",
                "model.max_position_embeddings=16777216"},
               2097152,
               139.0});
}
