// The steps of one ulysses-worker rank (app/worker/main.cpp calls them in order): threads,
// config, process groups, tracer, resume, the training steps with their checkpoints and
// metrics, the final save and a clean finish. Each step takes the WorkerRun they share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "comm.hpp"
#include "device_decision.hpp"
#include "folder_claim.hpp"
#include "heartbeat.hpp"
#include "line_appender.hpp"
#include "rendezvous.hpp"
#include "run_config.hpp"
#include "trainer.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::worker {

// What the steps of one rank's run share: its environment, config and device, the liveness
// beat, the save folder's owner, the process groups and the tracer.
struct WorkerRun {
  const DistEnv& env;
  RunConfig& cfg;
  const std::string& out_dir;
  const DeviceDecision& dev;
  launch::Heartbeat& heartbeat;
  launch::FolderClaim save_claim;
  std::string save_owner;
  std::string run_id;  // rank 0's (run_identity.hpp), agreed after rendezvous: in every checkpoint file
  Comm* comm = nullptr;
  std::unique_ptr<prof::Tracer> tracer;
  std::string trace_path;                // this rank's trace file, once open_tracer made it
  std::function<bool()> stop_requested;  // a stop signal arrived: the steps end before the next one

  WorkerRun(const DistEnv& env_, RunConfig& cfg_, const std::string& out_dir_, const DeviceDecision& dev_,
            launch::Heartbeat& heartbeat_)
      : env(env_), cfg(cfg_), out_dir(out_dir_), dev(dev_), heartbeat(heartbeat_) {}
};

// P ranks x threads never exceed the cores (intra-op, one inter-op, OpenBLAS's pool); returns
// the intra-op threads.
int set_thread_counts(const RunConfig& cfg, const DistEnv& env);
// The run config of --config and --set, valid, for the world this rank is part of.
RunConfig load_checked_config(const std::string& config_path, const std::vector<std::string>& overrides,
                              const DistEnv& env);
// The process groups (rendezvous with the other ranks).
std::unique_ptr<Comm> make_comm(const WorkerRun& w);
// faults.*: a straggler on demand.
void set_fault_delay(const WorkerRun& w);
// The rank's tracer (profile.enabled), its clock offset to rank 0.
void open_tracer(WorkerRun& w);
// The planner's prediction of the step's peak by category, into the trace (rank 0, CPU).
void record_planned_memory(WorkerRun& w);
// train.resume_from restored; the first step to run.
int64_t resume_if_asked(WorkerRun& w, Trainer& trainer);
// What the load of train.init_from left unread (rank 0).
void note_unused_init_tensors(const Trainer& trainer, const RunConfig& cfg);
// The run's shape, backend, device, threads and size, said once (rank 0).
void print_run_line(const WorkerRun& w, int threads);
// The training steps from first_step with the checkpoints due; the step a stop came before, or -1.
int64_t run_steps(WorkerRun& w, Trainer& trainer, launch::LineAppender& metrics, int64_t first_step);
// The Hugging Face model after the last step into train.save_to; the gathered parameters (ZeRO 3).
std::unique_ptr<GatheredParameters> save_final_model(WorkerRun& w, Trainer& trainer);
// Every rank at the barrier, the clock measured again, the groups shut down, the trace closed.
void finish_run(WorkerRun& w);

}  // namespace ulysses::worker
