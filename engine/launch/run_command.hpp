// A run on this host, once its config and the machine have passed their checks: the run
// folder and the save folder admitted and claimed (run_folders.hpp), the workers launched
// (run_launcher.hpp), the progress and the end said (run_progress.hpp).
#pragma once

#include <functional>
#include <string>

#include "run_args.hpp"
#include "run_config.hpp"

namespace ulysses::launch {

// The run folder --out names, or the default runs/<YYYYmmdd-HHMMSS>-<config name>.
std::string run_folder_for(const RunArgs& a);

// Runs it; the exit code. `after_finished(out_dir)` runs once a finished run is said (the
// trace's caches, written by the caller, which links the profiler).
int train_here(const RunArgs& a, const RunConfig& cfg, const std::string& worker, const std::string& tokens_checked,
               const std::function<void(const std::string&)>& after_finished);

}  // namespace ulysses::launch
