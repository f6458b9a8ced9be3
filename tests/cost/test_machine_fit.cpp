// engine/cost/machine_fit: a run's CPU ranks against the cores and its memory against what the
// machine has, each refusal with its figures; the planner asked only when it matters.
#include <gtest/gtest.h>

#include "cost_model.hpp"
#include "machine_fit.hpp"

using namespace ulysses::cost;

namespace {
ulysses::RunConfig cpu_run(int64_t sp, int64_t dp) {
  ulysses::RunConfig c;
  c.train.device = "cpu";
  c.parallel.sp_size = sp;
  c.parallel.dp_size = dp;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 4;
  return c;
}
}  // namespace

TEST(MachineFit, OnlyHostRunsAreJudged) {
  ulysses::RunConfig c = cpu_run(2, 1);
  EXPECT_TRUE(host_run(c, true));
  c.train.device = "auto";
  EXPECT_TRUE(host_run(c, false));
  EXPECT_FALSE(host_run(c, true));
  c.train.device = "cuda";
  EXPECT_FALSE(host_run(c, false));
  EXPECT_EQ(cores_refusal(c, false, 1), "") << "GPU ranks are not counted against the cores";
}

TEST(MachineFit, MoreThanEightCpuRanksPerCoreAreRefusedWithTheFigures) {
  const ulysses::RunConfig c = cpu_run(4, 4);  // 16 ranks
  EXPECT_EQ(cores_refusal(c, false, 2), "");   // 8 per core
  const std::string why = cores_refusal(c, false, 1);
  EXPECT_NE(why.find("16 CPU ranks (parallel.sp_size 4 x ring_size 1 x dp_size 4) on 1 core(s) is 16 per core, more "
                     "than the 8"),
            std::string::npos)
      << why;
  EXPECT_NE(cores_refusal(c, false, 0), "") << "no cores known counts as one";
}

TEST(MachineFit, MemoryAsksThePlannerOnlyAboveHalfTheMachine) {
  const ulysses::RunConfig c = cpu_run(2, 1);
  CostOptions o;
  const CostEstimate e = estimate(c, o);
  const double per_rank = static_cast<double>(e.total_bytes()) + static_cast<double>(kRankProcessBytes);
  // A tiny model: its process (160 MiB) outweighs its bytes, so 3 x its bytes is above half of
  // what 2 ranks' bytes need (the planner is asked) and below what 2 processes need (refused).
  const double tb = static_cast<double>(e.total_bytes());
  ASSERT_LT(2.0 * tb, static_cast<double>(kRankProcessBytes));
  int asked = 0;
  AskPlanner planner = [&](std::string*) -> std::optional<int64_t> {
    ++asked;
    return e.total_bytes();
  };
  EXPECT_EQ(memory_refusal(c, false, 100.0 * per_rank, planner), "");
  EXPECT_EQ(asked, 0) << "a tiny run never starts the planner";
  const std::string why = memory_refusal(c, false, 3.0 * tb, planner);
  EXPECT_EQ(asked, 1);
  EXPECT_NE(why.find("planned peak memory (meta-device dry run of one step, ulysses-worker --plan)"), std::string::npos)
      << why;
  EXPECT_NE(why.find("(2 rank(s) x "), std::string::npos) << why;
  AskPlanner absent = [](std::string* w) -> std::optional<int64_t> {
    *w = "no worker";
    return std::nullopt;
  };
  const std::string est = memory_refusal(c, false, 3.0 * tb, absent);
  EXPECT_NE(est.find("estimated memory (cost model)"), std::string::npos) << est;
  EXPECT_NE(est.find("(the memory planner was not used: no worker)"), std::string::npos) << est;
  ulysses::RunConfig on_gpu = c;
  on_gpu.train.device = "auto";
  EXPECT_EQ(memory_refusal(on_gpu, true, 1.0, absent), "") << "GPU runs: not this check";
  EXPECT_NE(memory_refusal(on_gpu, false, 1.0, absent), "") << "auto without a GPU is a host run";
  EXPECT_EQ(memory_refusal(c, false, 0.0, absent), "") << "nothing known about the machine: no refusal";
}
