// Full training state for an exact resume: model weights (a loadable Hugging Face model),
// AdamW moments and step counts per parameter, the global step (which is also the schedule
// position and the data cursor: batches and the learning rate are functions of the step),
// and each rank's RNG state. Written atomically into train.save_to/step-N (temp folder,
// fsync, `complete` manifest last, rename), keeping the last train.save_keep; read back
// with train.resume_from. Folder layout and rules: engine/config/checkpoint_layout.hpp
// and docs/CONTRACTS.md ("Training-state checkpoints").
//
// Who writes: every rank holds the full parameters, so rank 0 writes them; at
// train.zero_stage 0 it also writes the replicated AdamW state (optimizer.safetensors), at
// stage >= 1 every rank writes its own shard (optimizer-rank{r}.safetensors), which resumes
// only at the same world size (other sizes are refused, docs/ZERO.md); every rank writes its
// own rng-rank{r}.bin. save_train_state is
// collective (two barriers); save_to must be one file system that all ranks see.
#pragma once

#include <string>

#include "comm.hpp"
#include "run_config.hpp"
#include "trainer.hpp"

namespace ulysses {

// True when a checkpoint is due after `steps_done` steps (train.save_every divides it).
bool checkpoint_due(const TrainConfig& t, int64_t steps_done);

// Every rank calls it after its step `steps_done - 1`. Returns the checkpoint folder.
// Throws std::runtime_error naming the file and the step when a write fails. `run_id`: the
// run's identity (run_identity.hpp), rank 0's is the one written (a fresh one when it is
// not a run id); every file of the checkpoint carries it (checkpoint_layout.hpp, version 2).
std::string save_train_state(Trainer& trainer, Comm& comm, const RunConfig& cfg, int64_t steps_done,
                             const std::string& run_id = "");

// Rank 0's run id for every rank (collective): `proposal` when it is a run id, else a fresh one.
std::string agree_run_id(Comm& comm, const std::string& proposal);

struct ResumePoint {
  std::string dir;        // the checkpoint folder restored
  int64_t next_step = 0;  // the first step still to train
};

// Every rank calls it right after building its Trainer, before any step: restores the
// weights, AdamW state and this rank's RNG state from cfg.train.resume_from. Throws
// ConfigError (exit 2) when resume_from is not a complete checkpoint, its config differs
// from cfg in a key that must match, or a tensor is missing or misshapen.
ResumePoint restore_train_state(Trainer& trainer, Comm& comm, const RunConfig& cfg);

}  // namespace ulysses
