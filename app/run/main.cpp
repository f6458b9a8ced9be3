// ulysses-run CONFIG.json [--set key=value]... [--json] [--out DIR] [--worker PATH] [--force]: validates
// the run config (and its files), checks that the run fits this machine (engine/cost/machine_fit.hpp)
// and that its folders may be used (engine/launch/admission.hpp), then runs the ulysses-worker
// processes through ulysses::launch and reports. Also --plan (the worker's memory plan), --export
// accelerate|deepspeed DIR (Hugging Face configs, nothing trained) and --simulate HW / --calibrate
// (one step simulated, through the worker): docs/USAGE.md. This file parses the command line and
// calls those units in order. Exit codes: 0 finished, 2 bad input (config, --out in use, a rank
// exited 2), 1 failure or stopped by a signal. No exception escapes main (no abort, 134).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_number.hpp"
#include "export_command.hpp"
#include "json_checked.hpp"
#include "launch_error.hpp"
#include "machine_fit.hpp"
#include "machine_memory.hpp"
#include "run_args.hpp"
#include "run_checks.hpp"
#include "run_config.hpp"
#include "run_command.hpp"
#include "run_output.hpp"
#include "std_fds.hpp"
#include "stop_signals.hpp"
#include "worker_commands.hpp"
#include "worker_locator.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace L = ulysses::launch;
using L::say;

namespace {

int g_closed_std_fds = 0;  // what ulysses::cli::reopen_closed_std_fds() found closed at start

// A finished traced run: its summary and the studio's overview written beside the trace
// (every worker has exited, so the trace is complete), so that `ulysses-trace summary` and the
// studio open it without reading every range. Never changes the run's exit code.
void prepare_trace(const std::string& out_dir) {
  namespace prof = ulysses::prof;
  const std::string trace_dir = out_dir + "/trace";
  std::error_code ec;
  if (!std::filesystem::is_directory(trace_dir, ec) || prof::summary_cache_disabled_by_env()) return;
  try {
    const std::vector<std::string> files = prof::trace_input_files(trace_dir);
    if (files.empty()) return;
    uintmax_t bytes = 0;
    for (const auto& f : files) {
      const uintmax_t n = std::filesystem::file_size(f, ec);
      if (!ec) bytes += n;
    }
    if (bytes > (64u << 20))  // about a second per million ranges: say so before the wait
      say("trace: " + std::to_string(bytes >> 20) +
          " MiB; reading it once to write its summary, overview and caches...");
    const prof::PreparedCaches p = prof::prepare_trace_caches(out_dir, 0);
    char line[256];
    std::snprintf(
        line, sizeof line, "trace: %lld ranges, summary, overview%s %s beside it (%.2f s)",
        static_cast<long long>(p.ranges), p.rank_files > 0 ? " and rank-file caches" : "",
        p.summary_cached && p.overview_cached && p.rank_files_cached == p.rank_files ? "written" : "NOT all written",
        p.seconds);
    say(line);
  } catch (const std::exception& e) {
    say(std::string("trace: not prepared for the studio (") + e.what() + ")");
  }
}

// The command line into `a`; an exit code when the program should stop (--help: 0, bad flags: 2).
std::optional<int> parse_run_args(int argc, char** argv, L::RunArgs& a) {
  CLI::App app{
      "ulysses-run: launch a local multi-process Ulysses sequence-parallel training run.\n"
      "Starts parallel.sp_size x parallel.dp_size ulysses-worker processes and writes the run\n"
      "directory (config.json, run.json, logs/, trace/, metrics.jsonl).",
      "ulysses-run"};
  app.add_option("config", a.config_path, "Run config JSON (see resources/configs/)")->required();
  app.add_option("--set", a.overrides, "Override a config field, e.g. --set parallel.sp_size=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--json", a.json_mode, "Print each step's METRIC JSON object on stdout, one per line");
  app.add_option("--out", a.out_dir, "Run directory (default runs/<YYYYmmdd-HHMMSS>-<config name>)");
  app.add_option("--worker", a.worker,
                 "ulysses-worker executable (default: $ULYSSES_WORKER, then next to ulysses-run)");
  app.add_flag("--force", a.force,
               "Launch even when the estimated memory exceeds this machine's, and reuse a non-empty --out by moving "
               "the old directory aside to DIR.old-TIMESTAMP");
  app.add_flag("--plan", a.plan_mode,
               "Print the memory plan per rank (meta-device dry run of one step) instead of training");
  app.add_option("--max-seq", a.max_seq_gib,
                 "With --plan: the longest seq_length whose planned peak fits in this many GiB per rank")
      ->check(ulysses::cli::kGiven);
  app.add_option("--tflops", a.tflops,
                 "With --plan: sustained TFLOP/s of one rank, to print the step's compute time beside its FLOPs");
  app.add_option("--gpu-gib", a.gpu_gib,
                 "With --plan: whether the plan fits a GPU of this many GiB per rank, the allocator replayed at that "
                 "limit (the rule --max-seq searches with)")
      ->check(ulysses::cli::kGiven);
  app.add_option("--export", a.export_args,
                 "Write the equivalent Hugging Face accelerate + TrainingArguments (accelerate) or DeepSpeed "
                 "(deepspeed) configs, the model's config.json, README.txt and launch.sh into DIR instead of training")
      ->type_name("TARGET DIR")
      ->expected(2)
      ->allow_extra_args(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    say(e.what());
    say("usage: ulysses-run CONFIG.json [--set key=value]... [--json] [--out DIR] [--worker PATH] [--force] "
        "| --plan | --export accelerate|deepspeed DIR | --simulate HW --out DIR; see --help");
    return 2;
  }
  a.out_given = app.count("--out") > 0;
  a.max_seq_given = app.count("--max-seq") > 0;
  a.tflops_given = app.count("--tflops") > 0;
  a.gpu_gib_given = app.count("--gpu-gib") > 0;
  a.export_mode = app.count("--export") > 0;
  if (const std::string why = L::run_args_problem(a, (g_closed_std_fds & 2) != 0); !why.empty()) {
    say(why);
    return 2;
  }
  return std::nullopt;
}

// --simulate HW / --calibrate RUN (docs/PERFORMANCE.md, "What if"): the worker answers, as for
// --plan: it records the step on the meta device and the simulator (engine/sim) replays it.
int simulate_through_worker(int argc, char** argv) {
  CLI::App app{
      "ulysses-run --simulate: one training step of CONFIG simulated on hardware HW, written as a run folder that "
      "every view opens (ulysses-trace, the studio), marked as simulated.\n"
      "  ulysses-run CONFIG --simulate HW --out DIR      HW: a shipped name or a JSON file\n"
      "  ulysses-run --simulate list                     the shipped names\n"
      "  ulysses-run --calibrate RUN --simulate HW --out FILE.json   fit HW to a measured run",
      "ulysses-run"};
  L::SimulateRequest r;
  int steps = 3;
  app.add_option("config", r.config_path, "Run config JSON");
  app.add_option("--simulate", r.hardware, "Hardware: a shipped name (list: --simulate list) or a JSON file")
      ->required();
  app.add_option("--calibrate", r.calibrate, "Fit HW's efficiencies and link to this measured run folder");
  app.add_option("--set", r.overrides, "Override a config field (repeatable)")->type_name("KEY=VALUE");
  app.add_option("--out", r.out, "Run folder to write (with --calibrate: the hardware JSON file)");
  app.add_option("--steps", steps, "Identical simulated steps written (default 3)");
  app.add_option("--worker", r.worker,
                 "ulysses-worker executable (default: $ULYSSES_WORKER, then next to ulysses-run)");
  app.add_flag("--json", r.json, "Print the result as one JSON object");
  app.add_flag("--no-plan", r.no_plan, "Leave the memory planner's figures out of the simulated run");
  app.add_option("--background-load", r.background_load,
                 "CPU ranks: other runnable processes sharing the cores (with --calibrate: during the measured run)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    say(e.what());
    say("usage: ulysses-run CONFIG --simulate HW --out DIR | --simulate list | --calibrate RUN --simulate HW --out "
        "FILE.json; see --simulate x --help");
    return 2;
  }
  if (app.count("--steps")) r.steps = steps;
  if (r.hardware != "list" && r.out.empty()) {
    say(r.calibrate.empty() ? "--simulate needs --out DIR (the simulated run folder to write)"
                            : "--calibrate needs --out FILE.json (the calibrated hardware description to write)");
    return 2;
  }
  if (r.hardware != "list" && r.calibrate.empty() && r.config_path.empty()) {
    say("--simulate needs a run config: ulysses-run CONFIG --simulate " + r.hardware + " --out DIR");
    return 2;
  }
  const L::WorkerLocation where = L::locate_worker(r.worker, std::getenv("ULYSSES_WORKER"), L::self_executable());
  if (where.path.empty()) {
    say(where.error);
    return where.exit_code;
  }
  r.worker = where.path;
  std::vector<std::string> args = L::simulate_worker_args(r);
  return L::pass_through_worker(where.path, args);
}

// The machine's checks (cores, memory); --force turns a refusal into a warning. An exit code
// when the run must not start.
std::optional<int> check_machine_fit(const L::RunArgs& a, const ulysses::RunConfig& cfg, const std::string& worker) {
  std::error_code ec;
  const bool have_gpu = std::filesystem::exists("/dev/nvidia0", ec);
  auto refused = [&](const std::string& why) -> std::optional<int> {
    if (why.empty()) return std::nullopt;
    if (!a.force) {
      say(why);
      return 2;
    }
    say("warning (--force): " + why);
    return std::nullopt;
  };
  if (auto code = refused(ulysses::cost::cores_refusal(cfg, have_gpu, L::usable_cores()))) return code;
  ulysses::cost::AskPlanner ask;
  if (!worker.empty())
    ask = [&](std::string* why) -> std::optional<int64_t> {
      const auto plan = L::run_planner(
          worker, a.config_path, a.overrides, 60.0, [] { return L::stop_signal() != 0; }, why);
      return plan ? std::optional<int64_t>((*plan)["peak_bytes"].get<int64_t>()) : std::nullopt;
    };
  const std::string why =
      ulysses::cost::memory_refusal(cfg, have_gpu, static_cast<double>(L::machine_memory_bytes()), ask);
  if (L::stop_signal() != 0) {
    say(std::string("stopped by ") + L::stop_signal_name() + " before launch (while checking the run's memory)");
    return 1;
  }
  return refused(why);
}

int run_main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--simulate" || std::string(argv[i]) == "--calibrate")
      return simulate_through_worker(argc, argv);
  L::RunArgs a;
  if (const auto code = parse_run_args(argc, argv, a)) return *code;
  // 1. Config and its files, before anything starts (a plan or an export reads no data).
  ulysses::RunConfig cfg;
  std::string tokens_checked;  // the data file as its ids were checked here (taken before the check)
  if (const auto code =
          L::load_checked_config(a.config_path, a.overrides, !a.plan_mode && !a.export_mode, cfg, tokens_checked))
    return *code;
  if (a.export_mode) return L::export_run(cfg, *a.export_target, a.export_args[1], a.config_path, a.force);
  if (const std::string why = L::thread_env_problem(); !why.empty()) {
    say(why);
    return 2;
  }
  // 2. Worker binary. Memory: refuse what cannot fit before a worker builds it (a plan is itself
  // the answer to that question: --plan is never refused). A stop from here on is obeyed.
  const L::WorkerLocation where = L::locate_worker(a.worker, std::getenv("ULYSSES_WORKER"), L::self_executable());
  if (!a.plan_mode) {
    L::install_stop_signal_handlers();
    if (const auto code = check_machine_fit(a, cfg, where.path)) return *code;
  }
  if (where.path.empty()) {
    say(where.error);
    return where.exit_code;
  }
  if (a.plan_mode) {
    L::PlanRequest p{where.path, a.config_path, a.overrides, a.json_mode, {}, {}, {}};
    if (a.max_seq_given) p.max_seq_gib = a.max_seq_gib;
    if (a.tflops_given) p.tflops = a.tflops;
    if (a.gpu_gib_given) p.gpu_gib = a.gpu_gib;
    std::vector<std::string> args = L::plan_worker_args(p);
    return L::pass_through_worker(where.path, args);
  }
  if (const std::string why = ulysses::not_yet_trained(cfg); !why.empty()) {  // --plan above answers it
    say(why);
    return 2;
  }
  // 3. Run directory and save folder (admission.hpp), each claimed until the run ends; 4. launch.
  return L::train_here(a, cfg, where.path, tokens_checked, prepare_trace);
}

}  // namespace

int main(int argc, char** argv) {
  g_closed_std_fds = ulysses::cli::reopen_closed_std_fds();
  // A file-size limit (ulimit -f) makes writes fail with EFBIG, said with the file, from the
  // start: otherwise SIGXFSZ kills --export (exit 153, no message, its temp file left behind).
  std::signal(SIGXFSZ, SIG_IGN);
  // Every exception ends as a message and an exit code, never as an abort.
  try {
    return run_main(argc, argv);
  } catch (const ulysses::ConfigError& e) {
    L::say_each_line(e.what());
    return 2;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 1;
  } catch (...) {
    say("error: unknown exception");
    return 1;
  }
}
