// ulysses-worker: one rank of a Ulysses run. Reads torchrun's environment, the resolved
// run config, trains, traces into RUN/trace/rank{r}.sqlite and (rank 0) reports metrics.
// Device and backend come from one decision (decide_device); a CUDA rank selects its GPU
// before any process group exists. At the end the groups are shut down cleanly; on a
// failure they are aborted so no peer waits on this rank past parallel.timeout_s.
// Exit codes: 0 success, 2 bad input, 1 failure.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <exception>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "std_fds.hpp"
#include "json_checked.hpp"
#include "checkpoint.hpp"
#include "comm.hpp"
#include "device_decision.hpp"
#include "folder_claim.hpp"
#include "heartbeat.hpp"
#include "line_appender.hpp"
#include "rendezvous.hpp"
#include "run_config.hpp"
#include "run_identity.hpp"
#include "train_state.hpp"
#include "ulysses/common/write_error.hpp"
#include "trainer.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/tracer.hpp"
#include "ulysses/common/run_layout.hpp"
#include "memory_categories.hpp"
#include "meta_dry_run.hpp"

namespace fs = std::filesystem;
using namespace ulysses;

// What a run may have, a trace can hold (its ranges' 16-bit layer, head and chunk fields).
static_assert(kMaxLayers <= prof::kMaxTraceLayers && kMaxHeads <= prof::kMaxTraceHeads &&
                  kMaxHeads <= prof::kMaxTraceChunks,
              "a run config allows layers, heads or head chunks a trace cannot hold");

namespace {
volatile std::sig_atomic_t g_stop = 0;

// Gloo's and c10d's words for a peer that went away or never came, said plainly first (their
// text follows in brackets): "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer"
// alone does not tell a user that another rank was killed or stopped.
std::string g_trace_path;                  // this rank's trace file, once known: SQLite's errors do not name it
std::atomic<bool> g_making_groups{false};  // between the rendezvous and the groups' first collectives
std::string explain_failure(const std::string& what) {
  if (g_stop) return "stopped by a signal while in a collective [" + what + "]";
  if (const std::string hint = ulysses::file_size_limit_hint(what); !hint.empty()) {
    const bool sqlite =
        what.find("disk I/O error") != std::string::npos || what.find("disk is full") != std::string::npos;
    return what + (sqlite && !g_trace_path.empty() ? " writing " + g_trace_path : std::string()) + hint;
  }
  for (const char* k : {"Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused"})
    if (what.find(k) != std::string::npos) {
      // While the groups are made, Gloo takes the first connection to a pair's port for the
      // peer's (the libgloo of libtorch 1.13 cannot refuse another): a local program that
      // connects there then breaks the pair on both sides, and is named as the other cause.
      if (g_making_groups)
        return "the ranks' Gloo connections broke while the process groups were being made: a peer rank went "
               "away, or another program on this machine connected to a rank's Gloo port during rendezvous "
               "(Gloo takes the first connection to a pair's port for the peer's and cannot refuse it); start "
               "the run again [" +
               what + "]";
      if (k != std::string("Connection refused"))
        return "a peer rank went away (it exited, failed or was stopped; ulysses-run names which) [" + what + "]";
    }
  // libtorch 1.13 and 2.x say a store's wait timed out in different words ("wait timeout
  // after 6000ms, keys: ..." in 2.6).
  for (const char* k : {"Timed out waiting", "Socket Timeout", "timed out after", "wait timeout after"})
    if (what.find(k) != std::string::npos)
      return "a peer rank did not arrive within parallel.timeout_s (stopped, hung, or never started)" +
             std::string(g_making_groups ? ", or another program on this machine connected to a rank's Gloo port "
                                           "during rendezvous and Gloo took it for the peer"
                                         : "") +
             " [" + what + "]";
  return what;
}
// An exception that escapes a thread (c10d's and Gloo's background threads) ends in
// std::terminate: said as a failure with its message, exit 1, never an abort (134).
std::atomic<int> g_rank{0};
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
std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}
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

  WorkerRun(const DistEnv& env_, RunConfig& cfg_, const std::string& out_dir_, const DeviceDecision& dev_,
            launch::Heartbeat& heartbeat_)
      : env(env_), cfg(cfg_), out_dir(out_dir_), dev(dev_), heartbeat(heartbeat_) {}
};

// P ranks x threads never exceed the cores: intra-op threads, one inter-op thread, and
// OpenBLAS's own pool (the -pthread build ignores at::set_num_threads; the launcher also
// sets OPENBLAS_NUM_THREADS / OMP_NUM_THREADS so no pool is sized to all cores at load).
// Returns the intra-op threads.
int set_thread_counts(const RunConfig& cfg, const DistEnv& env) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = cfg.train.threads_per_rank > 0
                          ? static_cast<int>(cfg.train.threads_per_rank)
                          : std::max(1, static_cast<int>(cores) / std::max(1, env.local_world_size));
  at::set_num_threads(threads);
  at::set_num_interop_threads(1);
  if (auto set_blas = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(threads);
  return threads;
}

// --out must be a folder this rank can write, checked before rendezvous (otherwise it is found
// only after the model build, as a bare filesystem error)
void check_out_folder(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw ConfigError("--out " + out_dir + " cannot be made a run folder" +
                      (ec ? ": " + ec.message() : std::string(": it is not a folder")));
  if (::access(out_dir.c_str(), W_OK) != 0)
    throw ConfigError("--out " + out_dir + " is not writable: " + std::strerror(errno));
}

// train.save_to belongs to one run at a time (engine/launch/folder_claim.hpp): ulysses-run
// claimed it and names this run in ULYSSES_SAVE_OWNER; started otherwise (torchrun, Slurm),
// rank 0 claims it here, before the first save. Every save checks that the owner record
// still names this run.
void claim_save_folder(WorkerRun& w) {
  const RunConfig& cfg = w.cfg;
  if (cfg.train.save_to.empty()) return;
  if (const char* o = std::getenv(launch::kSaveOwnerEnv); o && *o) {
    w.save_owner = o;
    return;
  }
  w.save_owner = fs::absolute(w.out_dir).lexically_normal().string();
  if (w.env.rank != 0) return;
  launch::ClaimAttempt a = launch::claim_folder(cfg.train.save_to, {w.save_owner, ::getpid(), "ulysses-worker rank 0"});
  if (a.holder)
    throw ConfigError("train.save_to " + cfg.train.save_to + " belongs to " + a.holder->describe() +
                      ", which is still going; pick another train.save_to");
  if (!a.error.empty()) throw ConfigError("train.save_to: " + a.error);
  w.save_claim = std::move(a.claim);
}

void check_save_owner(const WorkerRun& w) {
  const RunConfig& cfg = w.cfg;
  const auto rec = launch::last_owner(cfg.train.save_to);
  if (rec && rec->run == w.save_owner) return;
  throw std::runtime_error("train.save_to " + cfg.train.save_to + " now belongs to " +
                           (rec ? rec->describe() : std::string("no run (its owner record is gone)")) +
                           ", not to this run (" + w.save_owner +
                           "): nothing saved, so that the folder's checkpoints stay whole");
}

// The rank's tracer (profile.enabled): its trace file, the run's shape and config, memory
// sampling, and the clock offset to rank 0.
void open_tracer(WorkerRun& w) {
  const RunConfig& cfg = w.cfg;
  Comm& comm = *w.comm;
  const std::string& out_dir = w.out_dir;
  if (!cfg.profile.enabled) return;
  fs::create_directories(run_layout::trace_dir(out_dir));
  prof::TracerOptions to;
  to.path = run_layout::rank_trace(out_dir, w.env.rank).string();
  g_trace_path = to.path;
  to.rank = w.env.rank;
  to.world_size = w.env.world_size;
  to.sp_rank = comm.sp_rank();
  to.sp_size = comm.sp_size();
  // The trace schema has no ring axis yet (docs/RING.md): with ring_size > 1 the ring ranks
  // are recorded as a further data-parallel axis (rank = that dp_rank x sp + sp_rank holds),
  // so worldSize = spSize x dpSize stays true; the stored config says ring_size.
  to.dp_rank = comm.rank() / comm.sp_size();
  to.dp_size = comm.dp_size() * comm.ring_size();
  to.device = w.dev.device;  // "cuda:N" starts CUPTI in the tracer
  to.hostname = host_name();
  to.run_config_json = cfg.to_json().dump();
  // The run's id (agreed by every rank after rendezvous): the trace loader leaves out a rank file
  // of another run found in the same folder.
  to.run_id = w.run_id;
  to.step_begin = cfg.profile.step_begin;
  to.step_end = cfg.profile.step_end;
  to.memory = cfg.profile.memory;
  // Memory by category (memory_categories.hpp) on CPU ranks: every CPU tensor storage from
  // here on is counted under the scope it was made in, sampled at each range's edges.
  if (cfg.profile.memory && w.dev.device == "cpu") {
    mem::install_cpu_counting();
    to.memory_probe = mem::cpu_probe();
  } else if (cfg.profile.memory && w.dev.device.rfind("cuda:", 0) == 0) {
    // GPU ranks: the caching allocator's blocks, through its trace hook (libtorch >= 2.1), after
    // CUDA's lazy init; an allocator still missing then throws (the rank fails, saying why).
    const mem::CudaCounting c = mem::install_cuda_counting(std::stoi(w.dev.device.substr(5)));
    if (c.counting)
      to.memory_probe = mem::cuda_probe();
    else
      std::fprintf(stderr, "ulysses-worker: rank %d: memory categories off: %s\n", w.env.rank, c.why_not.c_str());
  }
  w.tracer = prof::Tracer::open(to);
  // One clock: this rank's offset to rank 0 (every rank measures, profile.enabled is the same everywhere).
  if (comm.has_groups()) w.tracer->record_clock("start", comm.sync_clock("start"));
}

// The planner's prediction of the same step's peak by category, beside what is measured
// (rank 0, once; a config the dry run cannot model has none).
void record_planned_memory(WorkerRun& w) {
  if (!w.tracer || !w.cfg.profile.memory || w.env.rank != 0 || w.dev.device != "cpu") return;
  try {
    const plan::MemoryPlan p = plan::plan_memory(w.cfg);
    w.tracer->record_planned_memory(p.peak_categories);
    w.tracer->record_planned_curve(p.curve);
    std::vector<prof::PeakTensor> named;  // what the plan names alive at its peak
    for (const auto& g : p.peak_tensors) named.push_back(mem::peak_tensor(g));
    w.tracer->record_planned_tensors(named);
  } catch (const std::exception& e) {
    std::cerr << "ulysses-worker: note: no memory plan in the trace (" << e.what() << ")" << std::endl;
  }
}

// What the load of train.init_from left unread (rank 0).
void note_unused_init_tensors(const Trainer& trainer, const RunConfig& cfg) {
  const auto& unused = trainer.unused_init_tensors();
  if (unused.empty()) return;
  std::cerr << "ulysses-worker: note: " << cfg.train.init_from << " holds " << unused.size()
            << " tensor(s) the model has no parameter for, not loaded (more layers than model.num_hidden_layers, "
               "or another model?): ";
  // Quoted and escaped: a name with a newline or an escape sequence split the note or
  // coloured the terminal.
  for (size_t i = 0; i < unused.size() && i < 8; ++i)
    std::cerr << (i ? ", " : "") << ulysses::json_for_message(nlohmann::json(unused[i]));
  if (unused.size() > 8) std::cerr << ", and " << unused.size() - 8 << " more";
  std::cerr << std::endl;
}

// One step's figures: into the trace, and (rank 0) a whole line of metrics.jsonl and a
// METRIC line on stdout.
void record_step_metrics(WorkerRun& w, launch::LineAppender& metrics, int64_t s, const StepMetrics& m,
                         std::chrono::steady_clock::time_point t_start) {
  if (w.tracer) {
    prof::StepRecord r;
    r.step = s;
    r.loss = m.loss;
    r.lr = m.lr;
    r.grad_norm = m.grad_norm;
    r.tokens = m.tokens;
    r.tokens_per_s = m.tokens_per_s;
    r.step_ms = m.step_ms;
    r.max_mem_bytes = m.max_mem_bytes;
    w.tracer->end_step(r);
  }
  if (w.env.rank != 0) return;
  json j = {{"step", s},
            {"steps", w.cfg.train.steps},
            {"loss", m.loss},
            {"lr", m.lr},
            {"grad_norm", m.grad_norm},
            {"tokens", m.tokens},
            {"tokens_per_s", m.tokens_per_s},
            {"step_ms", m.step_ms},
            {"max_mem_bytes", m.max_mem_bytes},
            {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()}};
  const std::string line = j.dump();
  if (const std::string why = metrics.append(line, "step " + std::to_string(s)); !why.empty())
    throw std::runtime_error(why);
  std::cout << "METRIC " << line << std::endl;
}

// The training steps from first_step, each recorded, with the checkpoints due. Returns the
// number of the step a signal stopped the run before, or -1 when every step ran.
int64_t run_steps(WorkerRun& w, Trainer& trainer, launch::LineAppender& metrics, int64_t first_step) {
  using launch::Phase;
  const RunConfig& cfg = w.cfg;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t s = first_step; s < cfg.train.steps; ++s) {
    if (g_stop) return s;
    w.heartbeat.set(Phase::Step, s);
    if (w.tracer) w.tracer->begin_step(s);
    StepMetrics m;
    {
      // The first step's tensors give the peak table's groups their dtype and shape (CPU ranks).
      std::optional<mem::DescribeCpuTensors> describe;
      if (s == first_step && w.tracer && w.cfg.profile.memory && mem::cpu_counting_installed()) describe.emplace();
      m = trainer.step(s);
    }
    if (!std::isfinite(m.loss))  // the first step's loss comes before any update: no learning rate made it
      throw std::runtime_error(
          "loss is " + std::to_string(m.loss) + " at step " + std::to_string(s) +
          (s == first_step ? ", before any update by this run: the weights or the model settings give a non-finite "
                             "loss (check train.init_from / train.resume_from's weights and the model section, "
                             "e.g. rope_*)"
                           : "; lower train.lr"));
    record_step_metrics(w, metrics, s, m, t_start);
    if (checkpoint_due(cfg.train, s + 1)) {  // full training state into save_to/step-N (collective)
      if (w.tracer) w.tracer->flush();       // the trace holds every step up to the checkpoint
      w.heartbeat.set(Phase::Save, s);       // a failure or a stall here is the save's, not step s's
      check_save_owner(w);
      const std::string dir = save_train_state(trainer, *w.comm, w.cfg, s + 1, w.run_id);
      if (w.env.rank == 0) std::cerr << "ulysses-worker: saved training state to " << dir << std::endl;
    }
  }
  return -1;
}

// The Hugging Face model after the last step, into train.save_to (rank 0 writes it). Returns
// the gathered parameters (ZeRO stage 3), held until the run is finished.
std::unique_ptr<GatheredParameters> save_final_model(WorkerRun& w, Trainer& trainer) {
  const RunConfig& cfg = w.cfg;
  // ZeRO stage 3: every rank gathers every layer for rank 0's save (collective; nothing below stage 3).
  std::unique_ptr<GatheredParameters> full;
  if (!cfg.train.save_to.empty()) full = std::make_unique<GatheredParameters>(trainer);
  if (!cfg.train.save_to.empty() && w.env.rank == 0) {
    w.heartbeat.set(launch::Phase::Save, cfg.train.steps - 1);  // the Hugging Face model after the last step
    check_save_owner(w);
    save_checkpoint(trainer.model(), cfg.train.save_to,
                    cfg.train.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32, cfg.train.save_shard_bytes);
    std::cerr << "ulysses-worker: saved Hugging Face checkpoint to " << cfg.train.save_to << std::endl;
  }
  return full;
}
// The run config of --config and --set, valid, for the world this rank is part of.
RunConfig load_checked_config(const std::string& config_path, const std::vector<std::string>& overrides,
                              const DistEnv& env) {
  RunConfig cfg = load_run_config(config_path, overrides);
  throw_if_invalid(validate(cfg));
  if (env.world_size != cfg.parallel.world_size())
    throw ConfigError("WORLD_SIZE (" + std::to_string(env.world_size) +
                      ") does not match parallel.sp_size x parallel.ring_size x parallel.dp_size (" +
                      std::to_string(cfg.parallel.sp_size) + " x " + std::to_string(cfg.parallel.ring_size) + " x " +
                      std::to_string(cfg.parallel.dp_size) + " = " + std::to_string(cfg.parallel.world_size()) + ")");
  return cfg;
}

// What the ranks of one run share beyond their config: ulysses-run's run id, torchrun's, else
// (ranks started by hand on one machine: MASTER_ADDR on loopback) the run folder. Ranks started
// by hand on several machines each write their own folder, so there the config alone is compared.
std::string run_identity_of_worker(const std::string& out_dir) {
  for (const char* k : {kRunIdEnv, "TORCHELASTIC_RUN_ID"})
    if (const char* v = std::getenv(k); v && *v) return std::string(k) + "=" + v;
  const char* addr = std::getenv("MASTER_ADDR");
  const std::string a = addr ? addr : "127.0.0.1";
  const bool loopback = a.rfind("127.", 0) == 0 || a == "::1" || a == "localhost";
  return loopback ? "--out " + fs::absolute(out_dir).lexically_normal().string() : std::string();
}

// The process groups (rendezvous with the other ranks).
std::unique_ptr<Comm> make_comm(const WorkerRun& w) {
  const RunConfig& cfg = w.cfg;
  return std::make_unique<Comm>(w.env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size),
                                w.dev, std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000)),
                                static_cast<int>(cfg.parallel.ring_size));
}

// faults.*: a straggler on demand.
void set_fault_delay(const WorkerRun& w) {
  const RunConfig& cfg = w.cfg;
  w.comm->set_fault_delay(static_cast<int>(cfg.faults.slow_rank), cfg.faults.delay_ms);
  if (cfg.faults.slow_rank == w.env.rank)
    std::cerr << "ulysses-worker (rank " << w.env.rank << "): faults.delay_ms: sleeping " << cfg.faults.delay_ms
              << " ms before each collective" << std::endl;
}

// train.resume_from: weights, AdamW state, RNG and the step to continue at. Returns the first
// step to run.
int64_t resume_if_asked(WorkerRun& w, Trainer& trainer) {
  if (w.cfg.train.resume_from.empty()) return 0;
  const ResumePoint rp = restore_train_state(trainer, *w.comm, w.cfg);
  if (w.env.rank == 0)
    std::cerr << "ulysses-worker: resumed from " << rp.dir << " at step " << rp.next_step << std::endl;
  return rp.next_step;
}

// The run's shape, backend, device, threads and size, said once (rank 0).
void print_run_line(const WorkerRun& w, int threads) {
  const Comm& comm = *w.comm;
  std::cerr << "ulysses-worker: " << w.env.world_size << " rank(s), sp_size " << comm.sp_size()
            << (comm.ring_size() > 1 ? " x ring_size " + std::to_string(comm.ring_size()) : std::string())
            << " x dp_size " << comm.dp_size() << ", backend " << comm.backend_name()
            << (comm.has_groups() ? " (c10d groups made)" : "") << ", device " << w.dev.device << " (" << w.dev.reason
            << "), " << threads << " thread(s) per rank, " << w.cfg.model.num_parameters() << " parameters"
            << std::endl;
}

// The end of a run that finished: every rank at the barrier, the clock measured again (drift
// over the run), the groups shut down and the trace closed.
void finish_run(WorkerRun& w) {
  Comm& comm = *w.comm;
  w.heartbeat.set(launch::Phase::Finish);
  comm.barrier();
  if (w.tracer && comm.has_groups()) w.tracer->record_clock("close", comm.sync_clock("close"));  // drift over the run
  comm.shutdown();
  if (w.tracer) w.tracer->close();
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
    check_out_folder(out_dir);
    WorkerRun w(env, cfg, out_dir, dev, heartbeat);
    claim_save_folder(w);
    heartbeat.set(Phase::Rendezvous);
    g_making_groups = true;
    comm_holder = make_comm(w);
    w.comm = comm_holder.get();
    // One run: the same config on every rank (named key by key otherwise), one run id.
    check_same_config(*w.comm, cfg, run_identity_of_worker(out_dir));
    const char* run_id = std::getenv(kRunIdEnv);
    w.run_id = agree_run_id(*w.comm, run_id ? run_id : "");
    g_making_groups = false;
    heartbeat.set(Phase::Build);
    set_fault_delay(w);
    open_tracer(w);
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
