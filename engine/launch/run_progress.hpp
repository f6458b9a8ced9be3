// What ulysses-run says while a run goes and when it ends: the workers' lines on stderr, each
// step as progress (or its METRIC JSON on stdout with --json), each rank's phase and silences
// from its heartbeats, and the end (loss, stop signal, or the failed rank's last lines).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "run_config.hpp"
#include "run_launcher.hpp"

namespace ulysses::launch {

// The launcher's callbacks. They keep their state (each rank's shown phase and step start)
// in shared storage of their own.
LaunchCallbacks make_run_callbacks(bool json_mode, const RunConfig& cfg, const std::string& out_dir);

// The run's end said; returns the exit code (a finished --json run whose lines could not all be
// written to stdout exits 1). `after_finished` runs once a finished run is said (the trace's caches).
int report_run(const LaunchResult& res, const std::string& out_dir, bool json_mode,
               const std::function<void()>& after_finished = {});

}  // namespace ulysses::launch
