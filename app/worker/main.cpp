// ulysses-worker: one rank of a Ulysses run. Reads torchrun's environment, the resolved
// run config, trains, traces into RUN/trace/rank{r}.sqlite and (rank 0) reports metrics.
// Device and backend come from one decision (decide_device); a CUDA rank selects its GPU
// before any process group exists. --out, train.save_to and train.resume_from follow the
// admission rules ulysses-run follows (engine/launch/admission.hpp). The steps themselves are
// in worker_steps.hpp. At the end the groups are shut down cleanly; on a failure they are
// aborted so no peer waits on this rank past parallel.timeout_s.
// Exit codes: 0 success, 2 bad input, 1 failure.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "admission.hpp"
#include "run_identity.hpp"
#include "std_fds.hpp"
#include "train_state.hpp"
#include "worker_failure.hpp"
#include "worker_steps.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace fs = std::filesystem;
using namespace ulysses;
using namespace ulysses::worker;

// What a run may have, a trace can hold (its ranges' 16-bit layer, head and chunk fields).
static_assert(kMaxLayers <= prof::kMaxTraceLayers && kMaxHeads <= prof::kMaxTraceHeads &&
                  kMaxHeads <= prof::kMaxTraceChunks,
              "a run config allows layers, heads or head chunks a trace cannot hold");

namespace {
volatile std::sig_atomic_t g_stop = 0;
std::string g_trace_path;                  // this rank's trace file, once known: SQLite's errors do not name it
std::atomic<bool> g_making_groups{false};  // between the rendezvous and the groups' first collectives
std::atomic<int> g_rank{0};

std::string explain_failure(const std::string& what) {
  return launch::explain_worker_failure(what, {g_stop != 0, g_making_groups.load(), g_trace_path});
}

// An exception that escapes a thread (c10d's and Gloo's background threads) ends in
// std::terminate: said as a failure with its message, exit 1, never an abort (134).
[[noreturn]] void on_terminate() {
  std::string what = "an unknown exception";
  try {
    if (auto e = std::current_exception()) std::rethrow_exception(e);
    what = "std::terminate without an exception";
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  const std::string line = "ulysses-worker (rank " + std::to_string(g_rank.load()) +
                           "): error: " + explain_failure(what) + " (in a background thread)\n";
  [[maybe_unused]] const ssize_t n = ::write(2, line.data(), line.size());
  std::_Exit(1);
}

void on_signal(int) {
  if (g_stop) std::_Exit(143);  // second signal: leave now; finished steps are committed
  g_stop = 1;
}

// --out, train.save_to and train.resume_from by the rules ulysses-run follows (admission.hpp),
// before rendezvous. Started by ulysses-run, the worker finds its save folder claimed and named
// in ULYSSES_SAVE_OWNER; started otherwise (torchrun, Slurm), rank 0 checks and claims it here,
// before the first save. Every save checks that the owner record still names this run.
void admit_worker(WorkerRun& w) {
  const char* owner = std::getenv(launch::kSaveOwnerEnv);
  const bool by_launcher = owner && *owner;
  const launch::AdmissionRequest req = launch::worker_request(w.cfg, w.out_dir, w.env.rank, by_launcher);
  const launch::Admission a = launch::admit(req, launch::gather_admission_facts(req, w.cfg));
  if (!a.admitted()) throw ConfigError(a.refusal->message);
  w.save_owner = by_launcher ? owner : fs::absolute(w.out_dir).lexically_normal().string();
  if (!a.claim_save_to) return;
  launch::ClaimAttempt at =
      launch::claim_folder(w.cfg.train.save_to, {w.save_owner, ::getpid(), "ulysses-worker rank 0"});
  if (at.holder || !at.error.empty())
    throw ConfigError(launch::claim_refusal("train.save_to", w.cfg.train.save_to, at).message);
  w.save_claim = std::move(at.claim);
}
}  // namespace

namespace ulysses {
int plan_command(int argc, char** argv);      // plan_command.cpp: --plan, the memory planner
int simulate_command(int argc, char** argv);  // simulate_command.cpp: --simulate, --calibrate
}  // namespace ulysses

int main(int argc, char** argv) {
  ulysses::cli::reopen_closed_std_fds();  // a closed stdout must not become a checkpoint file
  std::set_terminate(on_terminate);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit: writes fail with EFBIG and a message, no silent kill
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--plan") return ulysses::plan_command(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--simulate") return ulysses::simulate_command(argc, argv);
  CLI::App app{
      "ulysses-worker: one rank of a Ulysses sequence-parallel run (environment: RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).\n"
      "Also: ulysses-worker --plan --config CONFIG [--set k=v]... [--json] [--max-seq GIB] [--tflops T] prints the "
      "memory plan "
      "(what ulysses-run --plan runs); ulysses-worker --simulate HW --config CONFIG --out DIR simulates a step "
      "(ulysses-run --simulate)"};
  std::string config_path, out_dir;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "run config JSON (ulysses-run writes RUN/config.json)")->required();
  app.add_option("--out", out_dir, "run directory for trace/ and metrics.jsonl")->required();
  app.add_option("--set", overrides, "override a config key, e.g. --set train.steps=5");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Liveness for the launcher's watchdog (ULYSSES_HEARTBEAT_FD; inert when started by hand).
  using launch::Phase;
  launch::Heartbeat heartbeat(launch::Heartbeat::fd_from_environment());
  int rank = 0;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  // Outside the try block, so that the failure paths below can abort the process groups
  // before anything is destroyed.
  std::unique_ptr<Comm> comm_holder;
  auto abort_comm = [&] {
    try {
      if (comm_holder) comm_holder->abort();
    } catch (const std::exception& e) {
      std::cerr << "ulysses-worker (rank " << rank << "): while aborting the process group: " << e.what() << std::endl;
    }
  };
  try {
    const DistEnv env = DistEnv::from_environment();
    rank = env.rank;
    g_rank = rank;
    RunConfig cfg = load_checked_config(config_path, overrides, env);
    // One decision for device and backend; a refusal (e.g. more local ranks than GPUs) is
    // bad input. The GPU is selected before the process groups are made.
    const DeviceDecision dev = decide_device_or_throw(cfg, DeviceFacts::detect(env.local_rank, env.local_world_size));
    if (dev.cuda) compat::set_cuda_device(dev.device_index);
    const int threads = set_thread_counts(cfg, env);
    WorkerRun w(env, cfg, out_dir, dev, heartbeat);
    w.stop_requested = [] { return g_stop != 0; };
    admit_worker(w);
    heartbeat.set(Phase::Rendezvous);
    g_making_groups = true;
    comm_holder = make_comm(w);
    w.comm = comm_holder.get();
    // One run: the same config on every rank (named key by key otherwise), one run id.
    check_same_config(*w.comm, cfg, launch::worker_run_identity(out_dir));
    const char* run_id = std::getenv(kRunIdEnv);
    w.run_id = agree_run_id(*w.comm, run_id ? run_id : "");
    g_making_groups = false;
    heartbeat.set(Phase::Build);
    set_fault_delay(w);
    try {  // the trace file is named before it is opened: a failure to open it names it too
      open_tracer(w);
    } catch (...) {
      g_trace_path = w.trace_path;
      throw;
    }
    g_trace_path = w.trace_path;
    w.comm->set_tracer(w.tracer.get());  // the loss all-reduce, barriers and the fault delay as ranges
    record_planned_memory(w);
    Trainer trainer(cfg, *w.comm, w.tracer.get());
    const int64_t first_step = resume_if_asked(w, trainer);
    if (env.rank == 0) note_unused_init_tensors(trainer, cfg);
    if (env.rank == 0) print_run_line(w, threads);
    launch::LineAppender metrics;  // whole lines only: a full disk never leaves a torn step
    if (env.rank == 0) {
      fs::create_directories(out_dir);
      if (const std::string why = metrics.open(run_layout::metrics(out_dir).string()); !why.empty())
        throw std::runtime_error(why);
    }
    if (const int64_t stopped = run_steps(w, trainer, metrics, first_step); stopped >= 0) {
      abort_comm();  // the other ranks are being stopped too: wait for none of them
      if (w.tracer) w.tracer->close();
      std::cerr << "ulysses-worker (rank " << rank << "): stopped by a signal after " << stopped << " step(s)"
                << std::endl;
      return 1;
    }
    const std::unique_ptr<GatheredParameters> full = save_final_model(w, trainer);
    finish_run(w);
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "ulysses-worker (rank " << rank << "): " << e.what() << std::endl;
    abort_comm();
    return 2;
  } catch (const c10::Error& e) {  // libtorch's message without its C++ stack (16 frame lines)
    std::cerr << "ulysses-worker (rank " << rank << "): error: " << explain_failure(e.what_without_backtrace())
              << std::endl;
    abort_comm();
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ulysses-worker (rank " << rank << "): error: " << explain_failure(e.what()) << std::endl;
    abort_comm();
    return 1;
  } catch (...) {  // nothing escapes main as an abort (134)
    std::cerr << "ulysses-worker (rank " << rank << "): error: unknown exception" << std::endl;
    return 1;
  }
}
