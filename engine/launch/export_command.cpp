// ulysses-run --export (export_command.hpp).
#include "export_command.hpp"

#include <filesystem>

#include "checkpoint_layout.hpp"
#include "run_output.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::launch {
namespace {

// Why the export's files must not go into dir ("" when they may): one of them is the config
// being exported, or dir holds a run's records, a checkpoint or a model.
std::string export_target_refusal(const std::vector<ExportFile>& files, const std::string& dir,
                                  const std::string& config_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& f : files)
    if (fs::equivalent(fs::path(dir) / f.name, config_path, ec))
      return (fs::path(dir) / f.name).string() + " is the config being exported (" + config_path +
             "); pick another export directory";
  // A model in any of its layouts: ours (model_file_held: the single file, the index, or
  // shards without it) and PyTorch's pickled weights.
  std::string model_file = ckpt::model_file_held(dir);
  for (const char* pt : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (model_file.empty() && fs::exists(fs::path(dir) / pt, ec)) model_file = pt;
  for (const std::string& kept : {std::string(run_layout::kRunRecord), std::string(run_layout::kMetrics),
                                  std::string(ckpt::kCompleteFile), std::string(ckpt::kStateFile), model_file})
    if (!kept.empty() && fs::exists(fs::path(dir) / kept, ec))
      return dir + " holds " + kept +
             " (a run directory, a checkpoint or a model), whose files the export would replace; pick another "
             "export directory (--force replaces only an earlier export)";
  return "";
}

}  // namespace

int export_run(const RunConfig& cfg, ExportTarget target, const std::string& dir, const std::string& config_path,
               bool force) {
  // Hugging Face's set_seed seeds numpy, which takes 0..2^32-1 only: the Trainer would fail.
  if (target == ExportTarget::Accelerate && (cfg.train.seed < 0 || cfg.train.seed > 4294967295LL)) {
    say("--export accelerate: train.seed " + std::to_string(cfg.train.seed) +
        " is outside Hugging Face's seeds (0 to 4294967295: set_seed seeds numpy); export with another train.seed");
    return 2;
  }
  if (const std::string why = export_dir_problem(dir, force); !why.empty()) {
    say("--export: " + why);
    return 2;
  }
  const auto files = build_export(cfg, target, config_path);
  // --force replaces an earlier export's files, never the config being exported, a run
  // directory's records or a checkpoint's files (the export's config.json over them would
  // leave a checkpoint whose manifest no longer matches).
  if (const std::string why = export_target_refusal(files, dir, config_path); !why.empty()) {
    say("--export: " + why);
    return 2;
  }
  try {
    write_export(files, dir);
  } catch (const std::exception& e) {
    say(std::string("--export: ") + e.what());
    return 1;
  }
  say(std::string("wrote the ") + export_target_name(target) + " export of " + config_path + " to " + dir +
      " (README.txt lists the command and every difference); nothing was trained");
  return 0;
}

}  // namespace ulysses::launch
