// The local multi-process run: prepares the run directory (config.json, run.json, logs/,
// trace/), starts world = sp_size x dp_size workers with torchrun's environment on a free
// loopback port, writes each rank's output to logs/rank{r}.log, hands lines and METRIC
// objects to callbacks, and stops everything when a rank fails or a stop is requested.
// When launch_run returns, no worker (nor anything in a worker's process group) is running.
// No terminal I/O here: ulysses-run prints through the callbacks, a GUI can do otherwise.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "heartbeat.hpp"
#include "metric_line.hpp"
#include "run_config.hpp"
#include "run_record.hpp"

namespace ulysses::launch {

enum class Stream { Stdout, Stderr };

struct LaunchOptions {
  std::string run_dir;  // created if needed; must not hold a run.json yet
  std::string worker;   // the worker executable (see locate_worker)
  RunConfig config;     // validated; written to run_dir/config.json
  std::string master_addr = "127.0.0.1";
  double grace_s = 3.0;          // SIGTERM, then SIGKILL after this long
  double poll_interval_s = 0.1;  // how often stop_requested is asked
  std::size_t tail_lines = 10;   // lines of the failed rank kept for the report
  // The start-up and progress watchdog (watchdog.hpp): deadlines from parallel.timeout_s;
  // when one passes, the rank that stopped progressing is named and the run fails.
  bool watchdog = true;
  // tokens_file_identity of the data file as this process checked its token ids (ulysses-run),
  // handed to the workers (kTokensCheckedEnv) so they do not read it whole again; "" = not checked.
  std::string tokens_checked;
};

struct LaunchCallbacks {
  // Every line of every rank except rank 0's METRIC lines (which go to on_metric).
  std::function<void(int rank, Stream stream, const std::string& line)> on_line;
  std::function<void(const MetricLine& metric)> on_metric;
  // Polled every poll_interval_s; returning true stops the run (status "stopped").
  std::function<bool()> stop_requested;
  // Called once the workers run (after run.json says "running"), with their process ids.
  std::function<void(const std::vector<int>& pids)> on_started;
  // A rank's liveness changed: a new phase or step from its heartbeat (responsive true), or
  // no heartbeat for a few seconds (responsive false, silent_s how long).
  std::function<void(int rank, const Beat& beat, bool responsive, double silent_s)> on_liveness;
  // Something the user should know that does not stop the run (e.g. a log that cannot be written).
  std::function<void(const std::string& message)> on_warning;
};

struct LaunchResult {
  RunRecord record;                      // as written to run_dir/run.json at the end
  int exit_code = 1;                     // 0 finished, 1 failed/stopped, 2 failing rank exited 2 (bad input)
  std::vector<std::string> failed_tail;  // last tail_lines lines of the failed rank's log
  std::optional<MetricLine> last_metric;
  int master_port = 0;
  std::vector<int> pids;  // worker process ids, by rank
  // Every rank exited 0 but rank 0's METRIC lines stopped short of train.steps (a --worker that
  // is not ulysses-worker, or one that quit early): status Failed, exit 1, failed_rank 0.
  bool ended_short = false;
};

// True when run_dir/run.json exists (a run directory must not be reused).
bool run_dir_in_use(const std::string& run_dir);

// What an --out path holds today. A run directory is only ever written fresh: anything but
// Absent or Empty is refused (ulysses-run exits 2) unless the user forces reuse, which moves
// the old directory aside; a LiveRun (run.json "running" and its launcher alive) never is.
enum class RunDirState { Absent, Empty, NotADirectory, LiveRun, OldRun, Foreign };
struct RunDirInfo {
  RunDirState state = RunDirState::Absent;
  std::string detail;  // one line for the user: what is there
};
RunDirInfo inspect_run_dir(const std::string& run_dir);

// True when a run.json "running" record's launcher (pid) is still alive.
bool run_record_launcher_alive(const RunRecord& r);

// A live run in dir or in a folder below it (at most 4 levels down): its run.json "running"
// with the launcher alive, or another process's claim on the folder (folder_claim.hpp).
// What it is, for the user; empty when there is none. --force never moves such a folder.
std::string live_run_within(const std::string& dir);

// Renames run_dir to a fresh sibling "<run_dir>.old-YYYYmmdd-HHMMSS[-n]" and returns that
// name; nothing is deleted. Throws LaunchError when the rename fails.
std::string move_run_dir_aside(const std::string& run_dir);

// Creates dir (and its parents) and writes, syncs and removes a probe file in it. Returns
// an empty string when that worked, else what went wrong (naming the path).
std::string probe_writable_dir(const std::string& dir);

// Makes relative data.path / train.init_from / train.save_to absolute (against the
// current directory), so that run_dir/config.json means the same from any directory.
RunConfig with_absolute_paths(RunConfig cfg);

// Runs the whole thing. Throws LaunchError before any worker starts when the run directory
// is in use or cannot be written; afterwards every outcome is reported in the result. The run
// folder is claimed (folder_claim.hpp) for the whole run: by the caller, or here when the
// caller holds no claim. Workers get ULYSSES_RENDEZVOUS_DIR (RUN/.rendezvous, 0700: their
// FileStore) and ULYSSES_SAVE_OWNER (the run id their save folder's owner record must name).
LaunchResult launch_run(const LaunchOptions& options, const LaunchCallbacks& callbacks);

}  // namespace ulysses::launch
