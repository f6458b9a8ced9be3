// Training-state checkpoints: atomic save (temp folder, fsync, manifest, rename, prune)
// and exact restore (weights, AdamW moments + step counts, RNG) for train.resume_from.
#include "train_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "checkpoint.hpp"
#include "checkpoint_layout.hpp"
#include "run_identity.hpp"
#include "torch_compat.hpp"
#include "ulysses/common/atomic_file.hpp"

namespace ulysses {
namespace fs = std::filesystem;

namespace {

// Whole and synced (atomic_file.hpp); the staging folder's rename makes the checkpoint appear.
void write_file(const std::string& path, const void* data, size_t n) {
  ulysses::write_file_atomically(path, std::string_view(static_cast<const char*>(data), n));
}
void write_text(const std::string& path, const std::string& s) { write_file(path, s.data(), s.size()); }

const char* kExpAvg = "exp_avg/";
const char* kExpAvgSq = "exp_avg_sq/";
const char* kStep = "step/";

}  // namespace

bool checkpoint_due(const TrainConfig& t, int64_t steps_done) {
  return t.save_every > 0 && !t.save_to.empty() && steps_done > 0 && steps_done % t.save_every == 0;
}

std::string agree_run_id(Comm& comm, const std::string& proposal) {
  int64_t hi = -1, lo = -1;
  if (comm.rank() == 0) run_id_halves(is_run_id(proposal) ? proposal : new_run_id(), &hi, &lo);
  auto t = torch::tensor({hi, lo}, torch::kInt64).to(comm.device());  // (2,): rank 0's halves, -1 elsewhere
  comm.all_reduce_max(t);
  t = t.cpu();
  return run_id_from_halves(t[0].item<int64_t>(), t[1].item<int64_t>());
}

namespace {
// Every rank: its RNG state (the default CPU generator; nothing in a CPU step draws from
// it today, kept so that a future dropout or sampler resumes exactly too).
void save_rng_state(const fs::path& tmp, int rank) {
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor st;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    st = gen.get_state().contiguous();  // (S,) uint8
  }
  write_file((tmp / ckpt::rng_file_name(rank)).string(), st.data_ptr(), static_cast<size_t>(st.numel()));
}

// ZeRO: every rank its shard of the AdamW state (the fp32 masters are the saved weights:
// after the all-gather every rank's parameters hold every shard's updated masters exactly).
void save_zero_shard(Trainer& trainer, int rank, const fs::path& tmp, int64_t steps_done, const std::string& run_id,
                     const ckpt::Layout& layout) {
  auto& z = trainer.zero_optimizer();
  const std::string name = ckpt::zero_optimizer_file_name(rank);
  write_safetensors((tmp / name).string(),
                    {{"exp_avg", z.exp_avg.to(torch::kCPU)},
                     {"exp_avg_sq", z.exp_avg_sq.to(torch::kCPU)},
                     {"step", torch::tensor({z.steps}, torch::kInt64)}},  // (S), (S), (1,)
                    ckpt::file_identity(run_id, steps_done, name, layout));
}

// The replicated run's AdamW state, per parameter: m, v (its shape, fp32) and the step count.
std::vector<std::pair<std::string, at::Tensor>> adamw_state_tensors(Trainer& trainer, int64_t steps_done) {
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [name, p] : trainer.model().named_parameters()) {
    auto& state = trainer.optimizer().state();
    auto it = state.find(compat::optimizer_state_key(state, p));
    if (it == state.end())
      throw std::runtime_error("no AdamW state for " + name + " after " + std::to_string(steps_done) + " step(s)");
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    ts.emplace_back(kExpAvg + name, s.exp_avg());       // same shape as the parameter, fp32
    ts.emplace_back(kExpAvgSq + name, s.exp_avg_sq());  // same shape as the parameter, fp32
    ts.emplace_back(kStep + name, torch::tensor({static_cast<int64_t>(s.step())}, torch::kInt64));  // (1,)
  }
  return ts;
}

json train_state_json(const Trainer& trainer, const Comm& comm, const RunConfig& cfg, int64_t steps_done,
                      const std::string& run_id) {
  return {{"format", ckpt::kFormat},
          {"version", ckpt::kFormatVersion},
          {"run_id", run_id},
          {"step", steps_done},
          {"next_step", steps_done},
          {"schedule_step", steps_done},
          {"data_cursor",
           {{"next_step", steps_done}, {"seed", cfg.train.seed}, {"kind", cfg.data.kind}, {"path", cfg.data.path}}},
          {"world_size", comm.world_size()},
          {"sp_size", comm.sp_size()},
          {"dp_size", comm.dp_size()},
          {"ring_size", comm.ring_size()},
          {"zero_stage", trainer.zero_stage()},
          {"rng", "rng-rank{r}.bin: torch's default CPU generator state of rank r"}};
}

// Rank 0: the replicated state.
void save_replicated_state(Trainer& trainer, const Comm& comm, const RunConfig& cfg, const fs::path& tmp,
                           int64_t steps_done, const std::string& run_id, const ckpt::Layout& layout) {
  torch::NoGradGuard ng;
  // fp32 masters, bit-exact; a Hugging Face model that says which run and step it is of
  save_checkpoint(trainer.model(), tmp.string(), torch::kFloat32, 0,
                  ckpt::file_identity(run_id, steps_done, ckpt::kWeightsFile, layout));
  if (trainer.zero_stage() == 0)
    write_safetensors((tmp / ckpt::kOptimizerFile).string(), adamw_state_tensors(trainer, steps_done),
                      ckpt::file_identity(run_id, steps_done, ckpt::kOptimizerFile, layout));
  write_text((tmp / ckpt::kStateFile).string(),
             train_state_json(trainer, comm, cfg, steps_done, run_id).dump(2) + "\n");
  write_text((tmp / ckpt::kRunConfigFile).string(), cfg.to_json().dump(2) + "\n");
}

// Rank 0, after every rank's files are in: the manifest last (the name, size and XXH64 of every
// file, each synced first, the run id and the layout), the rename that makes the checkpoint
// appear, and the pruning of older ones.
void publish_checkpoint(const fs::path& root, const fs::path& tmp, const fs::path& fin, int64_t steps_done,
                        const std::string& run_id, const ckpt::Layout& layout, int64_t save_keep) {
  const json manifest = ckpt::make_manifest(tmp.string(), steps_done, run_id, layout);
  write_text((tmp / ckpt::kCompleteFile).string(), manifest.dump(2) + "\n");
  ulysses::sync_path(tmp.string(), true);
  std::error_code ec;
  fs::remove_all(fin, ec);  // an older run's checkpoint of the same step
  fs::rename(tmp, fin, ec);
  if (ec) throw std::runtime_error("cannot rename " + tmp.string() + " to " + fin.string() + ": " + ec.message());
  ulysses::sync_path(root.string(), true);
  // Keep the last save_keep complete checkpoints; drop temp folders of interrupted saves.
  auto all = ckpt::complete_checkpoints(root.string());
  for (size_t i = 0; i + static_cast<size_t>(save_keep) < all.size(); ++i) fs::remove_all(all[i].dir, ec);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int64_t s = 0;
    if (name.rfind(".tmp-", 0) == 0 && ckpt::parse_step_dir_name(name.substr(5), &s)) fs::remove_all(e.path(), ec);
  }
}
}  // namespace

std::string save_train_state(Trainer& trainer, Comm& comm, const RunConfig& cfg, int64_t steps_done,
                             const std::string& run_id_proposal) {
  const std::string run_id = agree_run_id(comm, run_id_proposal);
  const ckpt::Layout layout = ckpt::layout_of(cfg);
  const fs::path root(cfg.train.save_to);
  const fs::path tmp = root / ckpt::tmp_dir_name(steps_done);
  const fs::path fin = root / ckpt::step_dir_name(steps_done);
  const std::string at_step =
      " (checkpoint " + ckpt::step_dir_name(steps_done) + ", after step " + std::to_string(steps_done - 1) + ")";
  // Rank 0 prepares the temp folder; errors are carried past the barriers so no rank waits
  // for one that has already thrown.
  std::exception_ptr err;
  if (comm.rank() == 0) {
    try {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      fs::create_directories(tmp, ec);
      if (ec) throw std::runtime_error("cannot create " + tmp.string() + ": " + ec.message());
    } catch (...) {
      err = std::current_exception();
    }
  }
  comm.barrier();
  if (err) std::rethrow_exception(err);
  auto carry = [&](auto&& save) {
    try {
      save();
    } catch (const std::exception& e) {
      err = std::make_exception_ptr(std::runtime_error(std::string(e.what()) + at_step));
    }
  };
  carry([&] { save_rng_state(tmp, comm.rank()); });
  if (trainer.zero_stage() > 0 && !err)
    carry([&] { save_zero_shard(trainer, comm.rank(), tmp, steps_done, run_id, layout); });
  // Stage 3: every rank gathers every unit (collective, whatever failed above) so that rank 0
  // writes the whole model; released after the barrier.
  auto full = std::make_unique<GatheredParameters>(trainer);
  if (comm.rank() == 0 && !err)
    carry([&] { save_replicated_state(trainer, comm, cfg, tmp, steps_done, run_id, layout); });
  comm.barrier();  // every rank's RNG file is on disk
  full.reset();
  if (err) std::rethrow_exception(err);
  if (comm.rank() != 0) return fin.string();
  try {
    publish_checkpoint(root, tmp, fin, steps_done, run_id, layout, cfg.train.save_keep);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) + at_step);
  }
  return fin.string();
}

ResumePoint restore_train_state(Trainer& trainer, Comm& comm, const RunConfig& cfg) {
  throw_if_invalid(ckpt::resume_issues(cfg));  // complete checkpoint, matching config, steps left
  const ckpt::Checkpoint c = ckpt::resolve_resume(cfg.train.resume_from);
  // Every rank picks the latest complete checkpoint itself; they must have picked the same
  // one. A run still writing into resume_from (a save between two ranks' looks) would have ranks
  // load different steps and train on, out of step with each other, until the run hangs.
  {
    auto t = torch::tensor({c.step, -c.step}, torch::kInt64).to(comm.device());
    comm.all_reduce_max(t);
    t = t.cpu();
    const int64_t hi = t[0].item<int64_t>(), lo = -t[1].item<int64_t>();
    if (hi != lo)
      throw ConfigError("train.resume_from: the ranks found different latest checkpoints in " + cfg.train.resume_from +
                        " (steps " + std::to_string(lo) + " to " + std::to_string(hi) +
                        "): another run is saving into it; stop that run, or resume from one step-* folder of it");
  }
  const fs::path dir(c.dir);
  const json st = load_json_file((dir / ckpt::kStateFile).string());
  if (!st.is_object() || !st.contains("next_step") || !st["next_step"].is_number_integer() ||
      !st.contains("world_size") || !st["world_size"].is_number_integer())
    throw ConfigError((dir / ckpt::kStateFile).string() + " lacks next_step / world_size");
  if (st["world_size"].get<int64_t>() != comm.world_size())
    throw ConfigError(c.dir + " was written by " + std::to_string(st["world_size"].get<int64_t>()) +
                      " rank(s), this run has " + std::to_string(comm.world_size()));
  ResumePoint rp{c.dir, st["next_step"].get<int64_t>()};

  {
    // Stage 3: the parameters need their storage to be loaded into (every unit gathered,
    // collective); this rank's shard then takes its pieces and the units are released.
    GatheredParameters full(trainer);
    load_checkpoint(trainer.model(), c.dir);  // fp32 weights, copied into the parameters in place
    if (trainer.zero3()) trainer.zero3()->copy_full_into_shard();
  }
  if (trainer.zero_stage() > 0) {
    // This rank's AdamW shard. A checkpoint of another world size has other shards: refused
    // above (state.json's world_size; resume_issues refuses other sp_size / dp_size first).
    const std::string zp = (dir / ckpt::zero_optimizer_file_name(comm.rank())).string();
    auto zt = read_safetensors(zp);
    auto& z = trainer.zero_optimizer();
    torch::NoGradGuard ng;
    for (auto* t : {&z.exp_avg, &z.exp_avg_sq}) {
      const std::string key = t == &z.exp_avg ? "exp_avg" : "exp_avg_sq";
      auto it = zt.find(key);
      if (it == zt.end() || it->second.numel() != t->numel() || it->second.scalar_type() != torch::kFloat32)
        throw ConfigError(zp + ": " + key + " is not " + std::to_string(t->numel()) +
                          " F32 values (this rank's shard)");
      t->copy_(it->second);
    }
    auto st_it = zt.find("step");
    if (st_it == zt.end() || st_it->second.numel() != 1 || st_it->second.scalar_type() != torch::kInt64)
      throw ConfigError(zp + ": step is not one int64");
    z.steps = st_it->second.item<int64_t>();
    trainer.zero_sync_masters_from_params();
  }
  const std::string opt_path = (dir / ckpt::kOptimizerFile).string();
  auto tensors = trainer.zero_stage() > 0 ? std::map<std::string, at::Tensor>{} : read_safetensors(opt_path);
  torch::NoGradGuard ng;
  for (auto& [name, p] : trainer.zero_stage() > 0 ? std::vector<std::pair<std::string, at::Tensor>>{}
                                                  : trainer.model().named_parameters()) {
    auto& state = trainer.optimizer().state();
    auto get = [&, &name = name, &p = p](const std::string& key, bool like_param) {
      auto it = tensors.find(key + name);
      if (it == tensors.end()) throw ConfigError(opt_path + " lacks " + key + name);
      if (like_param && it->second.sizes() != p.sizes()) {
        std::ostringstream msg;
        msg << opt_path << ": " << key << name << " has shape " << it->second.sizes() << ", the parameter has "
            << p.sizes();
        throw ConfigError(msg.str());
      }
      return it->second;
    };
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(get(kExpAvg, true).to(p.device(), p.scalar_type()).contiguous());
    s->exp_avg_sq(get(kExpAvgSq, true).to(p.device(), p.scalar_type()).contiguous());
    const at::Tensor step = get(kStep, false);
    if (step.numel() != 1 || step.scalar_type() != torch::kInt64)
      throw ConfigError(opt_path + ": " + kStep + name + " is not one int64");
    s->step(step.item<int64_t>());
    state[compat::optimizer_state_key(state, p)] = std::move(s);
  }

  // This rank's RNG state.
  const std::string rng_path = (dir / ckpt::rng_file_name(comm.rank())).string();
  const std::string why = regular_file_problem(rng_path, 1 << 20);
  if (!why.empty()) throw ConfigError("cannot read " + rng_path + ": " + why);
  std::ifstream in(rng_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError("cannot read " + rng_path);
  auto rng = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);  // (S,)
  std::memcpy(rng.data_ptr(), bytes.data(), bytes.size());
  auto gen = at::detail::getDefaultCPUGenerator();
  try {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  } catch (const c10::Error& e) {  // its what() carries libtorch's C++ stack: not for the user
    throw ConfigError(rng_path + " is not a CPU generator state: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw ConfigError(rng_path + " is not a CPU generator state: " + e.what());
  }
  return rp;
}

}  // namespace ulysses
