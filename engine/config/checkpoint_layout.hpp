// Training-state checkpoints inside train.save_to: folder names, the `complete` manifest
// written last, finding the latest complete checkpoint, and the resume checks (a folder
// that holds checkpoints, the saved run config against the current one). Torch-free: the
// launcher's validation uses it; engine/core/train_state.* writes and reads the tensors.
//
// Layout (docs/CONTRACTS.md, "Training-state checkpoints"):
//   SAVE_TO/step-00000012/   model.safetensors, config.json (a Hugging Face model),
//                            optimizer.safetensors, state.json, run_config.json,
//                            rng-rank{r}.bin (one per rank), complete (manifest, last)
//   SAVE_TO/.tmp-step-00000012/   a checkpoint being written (renamed when complete)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses::ckpt {

inline constexpr const char* kCompleteFile = "complete";
inline constexpr const char* kRunConfigFile = "run_config.json";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kFormat = "ulysses-train-state";
inline constexpr int64_t kFormatVersion = 1;

std::string step_dir_name(int64_t step);  // "step-00000012"
std::string tmp_dir_name(int64_t step);   // ".tmp-step-00000012"
std::string rng_file_name(int64_t rank);  // "rng-rank0.bin"
// train.zero_stage >= 1: rank r's shard of the AdamW state, "optimizer-rank0.safetensors":
// exp_avg and exp_avg_sq (S) F32 and step (1) I64, S = ceil(parameters / world size).
std::string zero_optimizer_file_name(int64_t rank);
// True for "step-<digits>" (the step parsed into *step).
bool parse_step_dir_name(const std::string& name, int64_t* step);

// A Hugging Face model's files in a folder (train.save_to, train.init_from): the single
// weights file, the index of a sharded one, and shard names as transformers' save_pretrained
// and our save write them, model-00001-of-00003.safetensors (five digits each). A save removes
// only these: a file merely like them (model-best-of-run3.safetensors) is the user's.
inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";
inline constexpr const char* kModelConfigFile = "config.json";
bool is_shard_file_name(const std::string& name);
// The first of the above `dir` holds ("model.safetensors", or a shard's name), "" when none.
std::string model_file_held(const std::string& dir);

// What train.save_to must not be, found before launch by ulysses-run and by the studio's
// launcher form (one rule set): a training checkpoint itself (step-N, .tmp-step-N, a folder
// holding `complete` or state.json: the final model would leave it disagreeing with its own
// optimizer state); a folder where a name the save writes (model.safetensors, the index,
// config.json) is a folder or other non-file (the save would fail after training); and, unless
// `force` (the studio never passes it), one holding a model, training checkpoints or a lone
// config.json that the save would overwrite (a run resuming from that folder may). The field of
// each issue is train.save_to. Nothing is created or written.
std::vector<ConfigIssue> save_to_issues(const RunConfig& cfg, bool force);

// Empty when `dir` is a complete checkpoint: its `complete` manifest parses, has our
// format and version, and every file it lists is present with the listed size. Else why
// not ("no complete marker (half-written?)", "model.safetensors has 12 bytes, the
// manifest says 4096").
std::string checkpoint_problem(const std::string& dir);

struct Checkpoint {
  std::string dir;
  int64_t step = 0;
};
// Complete checkpoints directly inside save_to, oldest first. Folders named step-* that are
// not complete are listed in *skipped with the reason.
std::vector<Checkpoint> complete_checkpoints(const std::string& save_to, std::vector<std::string>* skipped = nullptr);

// train.resume_from: a checkpoint folder itself, or a save_to folder (its latest complete
// checkpoint). Throws ConfigError naming the path when it is neither.
Checkpoint resolve_resume(const std::string& resume_from);

// The first config key whose value differs between a checkpoint's saved run config and
// the current one, among the keys that fix the run's geometry and its numbers (model.*,
// data.*, parallel.sp_size/dp_size, every train.* key except those that may change on a
// resume: steps, save_*, resume_from, init_from, device, threads_per_rank). Empty when
// they agree. `what` gets "model.hidden_size = 64, the checkpoint has 32".
std::string resume_mismatch(const json& saved, const json& now, std::string* what);

// Every resume check that touches files: resume_from resolves to a complete checkpoint,
// its run config agrees (resume_mismatch) and train.steps leaves something to train.
std::vector<ConfigIssue> resume_issues(const RunConfig& cfg);

}  // namespace ulysses::ckpt
