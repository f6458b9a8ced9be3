// ulysses-worker's failures in words a user can act on, and its torch-free checks: Gloo's and
// c10d's words for a peer that went away or never came said plainly first (their text follows
// in brackets), the save folder's owner checked before every save, and what the ranks of one
// run share beyond their config. Pure where it can be: the tests hand in the messages.
#pragma once

#include <string>

namespace ulysses::launch {

// Where the worker was when the failure came.
struct FailureContext {
  bool stopped = false;        // a stop signal arrived
  bool making_groups = false;  // between the rendezvous and the groups' first collectives
  std::string trace_path;      // this rank's trace file once known (SQLite's errors do not name it)
};

// `what` (an exception's message) explained: "a peer rank went away ... [what]", a file-size
// limit's hint, a stop; else `what` itself.
std::string explain_worker_failure(const std::string& what, const FailureContext& c);

// Empty when train.save_to's owner record names `save_owner` (this run), else why nothing may be saved.
std::string save_owner_problem(const std::string& save_to, const std::string& save_owner);

// What the ranks of one run share beyond their config, from the environment: ulysses-run's run
// id, torchrun's, else (ranks started by hand on one machine: MASTER_ADDR on loopback) the run
// folder. Ranks started by hand on several machines each write their own folder: "" (the
// config alone is compared).
std::string worker_run_identity(const std::string& out_dir);

}  // namespace ulysses::launch
