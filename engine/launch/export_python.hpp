// Export of a run config to the Python stack (docs/CONTRACTS.md): `ulysses-run CONFIG --export
// accelerate|deepspeed DIR` writes the Hugging Face accelerate (ParallelismConfig sp_size,
// sp_backend "deepspeed") + TrainingArguments files, or the DeepSpeed ds_config.json with
// Ulysses sequence_parallel_size, plus the model's config.json, a README.txt (mapping of every
// key and every difference) and a launch.sh. Torch-free and Qt-free; writes nothing but DIR.
//
// Key names come from the projects' own sources (read 2026-11-30):
//   accelerate   src/accelerate/parallelism_config.py (ParallelismConfig: dp_replicate_size,
//                dp_shard_size, sp_size, sp_backend, sp_handler) and utils/dataclasses.py
//                (DeepSpeedSequenceParallelConfig: sp_seq_length, sp_seq_length_is_variable,
//                sp_attn_implementation); docs/source/concept_guides/sequence_parallelism.md
//   transformers src/transformers/training_args.py (TrainingArguments fields);
//                docs/source/en/deepspeed_alst.md (TrainingArguments(deepspeed=...,
//                parallelism_config=...), `accelerate launch --num_processes P`)
//   DeepSpeed    docs/_tutorials/ulysses-alst-sequence-parallelism.md ("sequence_parallel_size"
//                in the config, UlyssesSPAttentionHF.register_with_transformers kwargs,
//                `deepspeed --num_gpus P`); deepspeed/runtime/constants.py
//                (train_micro_batch_size_per_gpu, gradient_accumulation_steps,
//                gradient_clipping); deepspeed/runtime/lr_schedules.py (WarmupLR,
//                WarmupDecayLR, WarmupCosineLR and their params)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_config.hpp"

namespace ulysses::launch {

enum class ExportTarget { Accelerate, DeepSpeed };

// "accelerate" | "deepspeed"; nullopt otherwise.
std::optional<ExportTarget> parse_export_target(const std::string& name);
const char* export_target_name(ExportTarget t);

// One of our config keys and where it went: `theirs` names the exported key ("" = none),
// `difference` marks a setting without an exact equivalent, explained in `note`.
struct ExportMapping {
  std::string ours;    // dotted key, e.g. "train.lr" (or a topic, e.g. "data")
  std::string value;   // our value, as JSON text
  std::string theirs;  // e.g. "training_args.json: learning_rate"
  bool difference = false;
  std::string note;
};

// Hugging Face TrainingArguments keyword arguments (HF's names) for the accelerate target.
nlohmann::json training_arguments_json(const RunConfig& cfg);
// accelerate ParallelismConfig keyword arguments; "sp_handler" holds the
// DeepSpeedSequenceParallelConfig keyword arguments.
nlohmann::json parallelism_config_json(const RunConfig& cfg);
// ds_config.json. For accelerate the batch, clipping and precision keys are "auto" (the
// Trainer fills them from TrainingArguments) and there is no optimizer/scheduler section
// (the Trainer's own AdamW and get_scheduler run); for deepspeed every value is concrete.
nlohmann::json deepspeed_config_json(const RunConfig& cfg, ExportTarget target);
// UlyssesSPAttentionHF.register_with_transformers keyword arguments (deepspeed target).
nlohmann::json ulysses_sp_registration_json(const RunConfig& cfg);
// Every key of the run config (model as one entry) with its destination or difference.
std::vector<ExportMapping> export_mappings(const RunConfig& cfg, ExportTarget target);

struct ExportFile {
  std::string name;  // plain file name inside DIR
  std::string text;
  bool executable = false;
};
// All files of one export, in writing order. config_label names the source config in texts.
std::vector<ExportFile> build_export(const RunConfig& cfg, ExportTarget target, const std::string& config_label);

// Why DIR cannot take an export ("" = it can): not a directory, not empty (unless force),
// cannot be created or written. Bad input: the caller exits 2.
std::string export_dir_problem(const std::string& dir, bool force);
// Writes the files into dir (each through a temporary name and a rename). Throws
// std::runtime_error naming the file when a write fails.
void write_export(const std::vector<ExportFile>& files, const std::string& dir);

}  // namespace ulysses::launch
