// The steps of one ulysses-worker rank (worker_steps.hpp).
#include "worker_steps.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "json_checked.hpp"
#include "memory_categories.hpp"
#include "meta_dry_run.hpp"
#include "train_state.hpp"
#include "worker_failure.hpp"
#include "ulysses/profiler/clock_sync.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::worker {
namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Every save checks that train.save_to's owner record still names this run.
void check_save_owner(const WorkerRun& w) {
  if (const std::string why = launch::save_owner_problem(w.cfg.train.save_to, w.save_owner); !why.empty())
    throw std::runtime_error(why);
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

}  // namespace

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
  w.trace_path = to.path;
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

// The training steps from first_step, each recorded, with the checkpoints due. Returns the
// number of the step a signal stopped the run before, or -1 when every step ran.
int64_t run_steps(WorkerRun& w, Trainer& trainer, launch::LineAppender& metrics, int64_t first_step) {
  using launch::Phase;
  const RunConfig& cfg = w.cfg;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t s = first_step; s < cfg.train.steps; ++s) {
    if (w.stop_requested && w.stop_requested()) return s;
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

}  // namespace ulysses::worker
