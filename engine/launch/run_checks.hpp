// ulysses-run's checks of the run config and the environment before anything starts: the
// config and its files (for a run on this host: the data, the token ids, the device), what the
// data holds against what the run draws, and the thread counts the workers inherit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses::launch {

// Loads and validates the config. `on_this_host`: a run here (not a plan or an export), whose
// files and devices are checked too; tokens_checked gets the token file's identity as its ids
// were checked. Exit code 2 (the reasons said) when refused, nothing when cfg is good.
std::optional<int> load_checked_config(const std::string& config_path, const std::vector<std::string>& overrides,
                                       bool on_this_host, RunConfig& cfg, std::string& tokens_checked);

// A note when the data holds fewer distinct windows of seq_length + 1 tokens than the run draws
// sequences (they repeat), given the data file's size; "" otherwise.
std::string repeated_windows_note(const RunConfig& cfg, uint64_t data_bytes);

// Empty when `value` of the environment variable `name` is a thread count OpenMP and OpenBLAS
// read (positive whole numbers, comma-separated for nested levels: "4,2"), else the refusal.
std::string thread_count_problem(const std::string& name, const std::string& value);

// thread_count_problem for OMP_NUM_THREADS and OPENBLAS_NUM_THREADS as this process has them.
std::string thread_env_problem();

}  // namespace ulysses::launch
