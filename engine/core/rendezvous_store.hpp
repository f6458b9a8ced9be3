// The store the ranks of one run meet through; Comm (comm.hpp) makes its groups on it.
// - ulysses-run's local ranks (ULYSSES_RENDEZVOUS_DIR set): a c10d FileStore in a 0700 folder
//   of the run, so no network port is opened and only this user's processes can join.
// - Otherwise (torchrun, Slurm, by hand): c10d's TCPStore on MASTER_ADDR:MASTER_PORT, after a
//   probe of the port (launch::probe_store) so that a foreign program there is named as such
//   within parallel.timeout_s instead of being read as a store.
// After the groups, the ranks check that they belong to one run (rendezvous.hpp).
#pragma once

#include <chrono>

#include "dist_env.hpp"
#include "torch_compat.hpp"

namespace ulysses {

// Throws ConfigError for a rendezvous that cannot work as given (a store folder others can
// enter, a foreign program or another run's store on MASTER_PORT), std::runtime_error when
// rank 0's store did not come within `timeout`.
c10::intrusive_ptr<c10d::Store> make_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout);

}  // namespace ulysses
