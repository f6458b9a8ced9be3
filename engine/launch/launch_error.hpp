// The error type of the launch library: something a user or an installation must fix
// (no worker binary, run directory in use, cannot spawn). Programs print it and exit 1.
#pragma once

#include <stdexcept>

namespace ulysses::launch {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// launch_run refusing its run directory (it holds a run, someone's files, or another launcher
// is setting it up): bad input, exit 2, as when ulysses-run finds the same before calling it.
class RunDirRefused : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

}  // namespace ulysses::launch
