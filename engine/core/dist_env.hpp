// Who this rank is in its run: torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), read and checked once. Torch-free: the
// rendezvous (rendezvous_store.hpp), the communication backends (comm_backend.hpp) and Comm
// (comm.hpp) take it.
#pragma once

#include <string>

namespace ulysses {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // ULYSSES_SINGLE_RANK_GROUPS=1: make the c10d groups (and the rendezvous on MASTER_PORT)
  // even when WORLD_SIZE is 1, so a one-GPU machine exercises the NCCL path
  // (tools/gpu-check.sh). Off by default: one rank needs no collectives.
  bool single_rank_groups = false;
  // Reads torchrun's variables; single-process defaults when RANK is unset.
  // Throws ConfigError for malformed values.
  static DistEnv from_environment();
};

}  // namespace ulysses
