// What ulysses-run's command line asked for, and the combinations it refuses (exit 2). The
// program's main declares the options (CLI11) and fills RunArgs; the rules are here, tested
// without a program.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "export_python.hpp"

namespace ulysses::launch {

struct RunArgs {
  std::string config_path, out_dir, worker;
  std::vector<std::string> overrides, export_args;
  bool json_mode = false, force = false, plan_mode = false, export_mode = false;
  bool out_given = false, max_seq_given = false, tflops_given = false, gpu_gib_given = false;
  double max_seq_gib = 0, tflops = 0, gpu_gib = 0;
  std::optional<ExportTarget> export_target;  // set by run_args_problem when --export names one
};

// The first combination the command line may not make, as the message ulysses-run says; empty
// when `a` is complete (export_target is then set for --export). `stdout_closed`: the program
// was started with stdout closed (>&-), where --json's lines would go nowhere.
std::string run_args_problem(RunArgs& a, bool stdout_closed);

// The default run folder's name part from the config's file name: runs/<timestamp>-<this>.
std::string config_name(const std::string& config_path);

}  // namespace ulysses::launch
