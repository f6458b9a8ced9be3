// The store the ranks of one run meet through; comm.cpp makes every store here.
// - ulysses-run's local ranks (ULYSSES_RENDEZVOUS_DIR set): a c10d FileStore in a 0700 folder
//   of the run, so no network port is opened and only this user's processes can join.
// - Otherwise (torchrun, Slurm, by hand): c10d's TCPStore on MASTER_ADDR:MASTER_PORT, after a
//   probe of the port (launch::probe_store) so that a foreign program there is named as such
//   within parallel.timeout_s instead of being read as a store.
#pragma once

#include <chrono>

#include "comm.hpp"
#include "run_config.hpp"

namespace ulysses {

// Throws ConfigError for a rendezvous that cannot work as given (a store folder others can
// enter, a foreign program or another run's store on MASTER_PORT), std::runtime_error when
// rank 0's store did not come within `timeout`.
c10::intrusive_ptr<c10d::Store> make_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout);

// Right after the groups are made, before the model is built (collective): every rank's
// config (RunConfig::to_json) and `run_identity` must be rank 0's, key by key. Throws
// ConfigError on every rank when one differs, naming the first key that differs with rank 0's
// value and, on the ranks that differ, their own ("model.hidden_size is \"64\" on rank 0,
// \"128\" on rank 1"), so that ranks started with other configs, or the ranks of two runs that
// share one MASTER_PORT, stop together at rendezvous instead of training together or failing
// inside a Gloo collective. `run_identity`: what the ranks of one run share beyond the config
// (run_identity_of_worker in the worker: ULYSSES_RUN_ID, TORCHELASTIC_RUN_ID, else --out).
void check_same_config(Comm& comm, const RunConfig& cfg, const std::string& run_identity = "");

}  // namespace ulysses
