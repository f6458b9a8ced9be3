// ulysses-run's command-line rules (run_args.hpp).
#include "run_args.hpp"

#include <cctype>
#include <filesystem>

namespace ulysses::launch {

std::string run_args_problem(RunArgs& a, bool stdout_closed) {
  if (a.json_mode && stdout_closed)  // the steps would go nowhere, exit 0
    return "--json prints each step on stdout, which is closed (started with >&-); give it a file or a pipe";
  if (a.out_given && a.out_dir.empty())  // not the default runs/<timestamp> folder unsaid
    return "--out needs a folder name, e.g. --out runs/mine";
  if (a.max_seq_given && !a.plan_mode) return "--max-seq needs --plan";
  if (a.tflops_given && !a.plan_mode) return "--tflops needs --plan";
  if (a.gpu_gib_given && !a.plan_mode) return "--gpu-gib needs --plan";
  if (a.plan_mode && a.out_given)  // not ignored without a word
    return "--plan cannot be combined with --out (a plan is printed, nothing is written)";
  if (!a.export_mode) return "";
  if (a.plan_mode || a.out_given)
    return std::string("--export cannot be combined with ") + (a.plan_mode ? "--plan" : "--out") +
           " (an export trains nothing)";
  if (a.export_args.size() != 2) return "--export needs a target and a folder: --export accelerate|deepspeed DIR";
  a.export_target = parse_export_target(a.export_args[0]);
  if (!a.export_target) return "--export: unknown target '" + a.export_args[0] + "' (use accelerate or deepspeed)";
  if (a.export_args[1].empty()) return "--export: the directory name is empty";
  return "";
}

std::string config_name(const std::string& config_path) {
  std::string stem = std::filesystem::path(config_path).stem().string();
  for (char& c : stem)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  return stem.empty() ? "run" : stem;
}

}  // namespace ulysses::launch
