// engine/launch/run_args: the combinations of ulysses-run's options that are refused (exit 2),
// and the default run folder's name.
#include <gtest/gtest.h>

#include "run_args.hpp"

using namespace ulysses::launch;

TEST(RunArgs, OptionsThatNeedPlanOrCannotBeCombinedAreNamed) {
  RunArgs a;
  EXPECT_EQ(run_args_problem(a, false), "");
  a.json_mode = true;
  EXPECT_NE(run_args_problem(a, true).find("--json prints each step on stdout, which is closed"), std::string::npos);
  EXPECT_EQ(run_args_problem(a, false), "");
  a = RunArgs{};
  a.out_given = true;
  EXPECT_EQ(run_args_problem(a, false), "--out needs a folder name, e.g. --out runs/mine");
  a.out_dir = "runs/x";
  EXPECT_EQ(run_args_problem(a, false), "");
  a.plan_mode = true;
  EXPECT_EQ(run_args_problem(a, false), "--plan cannot be combined with --out (a plan is printed, nothing is written)");
  a = RunArgs{};
  a.max_seq_given = true;
  EXPECT_EQ(run_args_problem(a, false), "--max-seq needs --plan");
  a.plan_mode = true;
  EXPECT_EQ(run_args_problem(a, false), "");
  a = RunArgs{};
  a.tflops_given = true;
  EXPECT_EQ(run_args_problem(a, false), "--tflops needs --plan");
  a = RunArgs{};
  a.gpu_gib_given = true;
  EXPECT_EQ(run_args_problem(a, false), "--gpu-gib needs --plan");
}

TEST(RunArgs, ExportNeedsAKnownTargetAndAFolderAndNothingThatTrains) {
  RunArgs a;
  a.export_mode = true;
  a.export_args = {"accelerate", "out"};
  EXPECT_EQ(run_args_problem(a, false), "");
  ASSERT_TRUE(a.export_target.has_value());
  EXPECT_EQ(*a.export_target, ExportTarget::Accelerate);
  a.export_args = {"megatron", "out"};
  EXPECT_EQ(run_args_problem(a, false), "--export: unknown target 'megatron' (use accelerate or deepspeed)");
  a.export_args = {"deepspeed", ""};
  EXPECT_EQ(run_args_problem(a, false), "--export: the directory name is empty");
  a.export_args = {"deepspeed", "out"};
  a.plan_mode = true;
  EXPECT_EQ(run_args_problem(a, false), "--export cannot be combined with --plan (an export trains nothing)");
  a.plan_mode = false;
  a.out_given = true;
  a.out_dir = "r";
  EXPECT_EQ(run_args_problem(a, false), "--export cannot be combined with --out (an export trains nothing)");
}

TEST(RunArgs, TheDefaultFolderNameIsTheConfigsStemMadePlain) {
  EXPECT_EQ(config_name("resources/configs/tiny-cpu.json"), "tiny-cpu");
  EXPECT_EQ(config_name("/x/my config (2).json"), "my_config__2_");
  EXPECT_EQ(config_name("/x/.json"), ".json");  // a dot file's stem is its whole name
  EXPECT_EQ(config_name(""), "run");
}
