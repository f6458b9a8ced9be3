// The error type of the launch library: something a user or an installation must fix
// (no worker binary, run directory in use, cannot spawn). Programs print it and exit 1.
#pragma once

#include <stdexcept>

namespace ulysses::launch {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ulysses::launch
