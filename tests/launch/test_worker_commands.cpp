// engine/launch/worker_commands: the worker's argv for --plan and --simulate, and a command
// passed through (its exit code; silence judged as no ulysses-worker).
#include <gtest/gtest.h>

#include "worker_commands.hpp"

using namespace ulysses::launch;

TEST(WorkerCommands, PlanArgsCarryEveryOptionWithExactNumbers) {
  PlanRequest r{"/w", "c.json", {"a=1", "b=2"}, true, 0.1, std::nullopt, 80.0};
  const std::vector<std::string> want{"/w",
                                      "--plan",
                                      "--config",
                                      "c.json",
                                      "--set",
                                      "a=1",
                                      "--set",
                                      "b=2",
                                      "--json",
                                      "--max-seq",
                                      "0.10000000000000001",
                                      "--gpu-gib",
                                      "80"};
  EXPECT_EQ(plan_worker_args(r), want);
}

TEST(WorkerCommands, SimulateArgsLeaveOutWhatWasNotGiven) {
  SimulateRequest r;
  r.worker = "/w";
  r.hardware = "list";
  EXPECT_EQ(simulate_worker_args(r), (std::vector<std::string>{"/w", "--simulate", "list"}));
  r.hardware = "h100";
  r.config_path = "c.json";
  r.out = "o";
  r.steps = 5;
  r.no_plan = true;
  EXPECT_EQ(simulate_worker_args(r), (std::vector<std::string>{"/w", "--simulate", "h100", "--config", "c.json",
                                                               "--out", "o", "--steps", "5", "--no-plan"}));
}

TEST(WorkerCommands, APassedThroughCommandKeepsItsExitCodeAndSilenceIsNamed) {
  std::vector<std::string> args{"/bin/sh", "-c", "echo plan; exit 3"};
  EXPECT_EQ(pass_through_worker("/bin/sh", args), 3);
  args = {"/bin/true"};
  EXPECT_EQ(pass_through_worker("/bin/true", args), 1) << "exit 0 without a plan is no worker of this build";
  args = {"/bin/sh", "-c", "exit 2"};
  EXPECT_EQ(pass_through_worker("/bin/sh", args), 2) << "a silent exit 2 stays bad input";
}
