// After the groups are made (comm.hpp, on the store of rendezvous_store.hpp): the ranks check
// that they belong to one run before any of them builds a model.
#pragma once

#include <string>

#include "comm.hpp"
#include "run_config.hpp"

namespace ulysses {

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
