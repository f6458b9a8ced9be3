// ulysses-run --export accelerate|deepspeed DIR: the equivalent Hugging Face configs written
// into DIR (export_python.hpp builds them), after the checks that keep an export from
// replacing what it must not: the config being exported, a run directory's records, a
// checkpoint's or a model's files. Nothing is trained.
#pragma once

#include <string>

#include "export_python.hpp"
#include "run_config.hpp"

namespace ulysses::launch {

// Writes the export and says so; the exit code (2 refused, 1 the write failed, 0 written).
int export_run(const RunConfig& cfg, ExportTarget target, const std::string& dir, const std::string& config_path,
               bool force);

}  // namespace ulysses::launch
