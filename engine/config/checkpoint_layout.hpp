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
#include <map>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses::ckpt {

inline constexpr const char* kCompleteFile = "complete";
inline constexpr const char* kRunConfigFile = "run_config.json";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kFormat = "ulysses-train-state";
// Version 2 adds the run's identity: the manifest's run_id, layout and xxh64 per file, and the
// same run id, step and file name in every safetensors file's __metadata__ and in state.json.
// Version 1 checkpoints (sizes only) are still read.
inline constexpr int64_t kFormatVersion = 2;

// What the ranks of a run are, as far as a checkpoint's files depend on it: one RNG state per
// world rank, ZeRO shards of the flat parameters over world_size ranks.
struct Layout {
  int64_t sp_size = 1, ring_size = 1, dp_size = 1, world_size = 1, zero_stage = 0;
};
Layout layout_of(const RunConfig& cfg);
json layout_json(const Layout& l);
// Where the files of a checkpoint of another layout cannot go: the key that differs, said as
// "parallel.ring_size 2 in the checkpoint, 1 now" (world size first, then the ZeRO stage).
// Empty when the checkpoint's RNG states and shards fit this run.
std::string layout_mismatch(const Layout& saved, const Layout& now);

// The identity every safetensors file of a checkpoint carries in its __metadata__ (string
// values, as the format asks): the run, the step, the file's own name (a shard moved into
// another rank's place says whose it is), the ZeRO stage and world size it was cut for.
inline constexpr const char* kMetaRunId = "ulysses.run_id";
inline constexpr const char* kMetaStep = "ulysses.step";
inline constexpr const char* kMetaFile = "ulysses.file";
inline constexpr const char* kMetaZeroStage = "ulysses.zero_stage";
inline constexpr const char* kMetaWorldSize = "ulysses.world_size";
std::map<std::string, std::string> file_identity(const std::string& run_id, int64_t step, const std::string& file,
                                                 const Layout& layout);

// The `complete` manifest of the checkpoint folder `dir` whose files are all written: the name,
// size and XXH64 of each (read back), the run id, the step and the layout.
json make_manifest(const std::string& dir, int64_t step, const std::string& run_id, const Layout& layout);

// Empty when every file of a complete checkpoint (checkpoint_problem is empty) is the one its
// manifest lists: for version 2, each safetensors file and state.json carry the manifest's run
// id and step and their own name (and a ZeRO shard the manifest's stage and world size), and
// each file's XXH64 is the manifest's. Else the first difference, naming the file ("is
// optimizer-rank1.safetensors of its checkpoint: a shard in another rank's place").
std::string checkpoint_contents_problem(const std::string& dir);

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
