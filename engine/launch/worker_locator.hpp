// Which ulysses-worker binary to start (docs/CONTRACTS.md): --worker, else
// $ULYSSES_WORKER, else `ulysses-worker` next to the launcher executable, else
// `../worker/ulysses-worker` relative to it (the build tree layout app/run, app/worker).
#pragma once

#include <string>
#include <vector>

namespace ulysses::launch {

struct WorkerLocation {
  std::string path;   // absolute path of an executable file; empty when not found
  std::string error;  // what went wrong, for the user
  int exit_code = 0;  // 2: an explicitly given path is wrong; 1: installation lacks the worker
  std::vector<std::string> tried;
};

// explicit_path: --worker (may be empty); env_value: $ULYSSES_WORKER (may be null or empty);
// launcher_exe: the launcher's own executable path (see self_executable()).
WorkerLocation locate_worker(const std::string& explicit_path, const char* env_value, const std::string& launcher_exe);

// The running program's executable path via /proc/self/exe; empty if unavailable.
std::string self_executable();

}  // namespace ulysses::launch
