// ulysses-run CONFIG.json [--set key=value]... [--json] [--out DIR] [--worker PATH]
// ulysses-run CONFIG.json --plan [--json] [--max-seq GIB]: the memory plan per rank,
// computed by `ulysses-worker --plan` (a meta-device dry run; this program stays
// torch-free and execs the worker, whose output and exit code are the answer).
// Validates the run config (and its files) before starting anything, then runs
// sp_size x dp_size ulysses-worker processes through ulysses::launch and reports.
// Exit codes: 0 finished, 2 bad input (config, --out in use, a rank exited 2), 1 failure
// or stopped by SIGINT/SIGTERM.
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "launch_error.hpp"
#include "run_config.hpp"
#include "run_launcher.hpp"
#include "worker_locator.hpp"

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout (| head) must not kill us before the workers are stopped
}

void err_line(const std::string& s) {
  const std::string line = s + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void say(const std::string& s) { err_line("ulysses-run: " + s); }

// Every line of a (possibly multi-line) ConfigError message gets the prefix.
void say_each_line(const std::string& msg) {
  size_t start = 0;
  while (start <= msg.size()) {
    const size_t nl = msg.find('\n', start);
    const std::string line = msg.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) say(line);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

std::string config_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  for (char& c : stem)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  return stem.empty() ? "run" : stem;
}

}  // namespace

int main(int argc, char** argv) {
  namespace L = ulysses::launch;
  CLI::App app{"ulysses-run: launch a local multi-process Ulysses sequence-parallel training run.\n"
               "Starts parallel.sp_size x parallel.dp_size ulysses-worker processes and writes the run\n"
               "directory (config.json, run.json, logs/, trace/, metrics.jsonl).",
               "ulysses-run"};
  std::string config_path, out_dir, worker;
  std::vector<std::string> overrides;
  bool json_mode = false, plan_mode = false;
  double max_seq_gib = 0;
  app.add_option("config", config_path, "Run config JSON (see resources/configs/)")->required();
  app.add_option("--set", overrides, "Override a config field, e.g. --set parallel.sp_size=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--json", json_mode, "Print each step's METRIC JSON object on stdout, one per line");
  app.add_option("--out", out_dir, "Run directory (default runs/<YYYYmmdd-HHMMSS>-<config name>)");
  app.add_option("--worker", worker, "ulysses-worker executable (default: $ULYSSES_WORKER, then next to ulysses-run)");
  app.add_flag("--plan", plan_mode, "Print the memory plan per rank (meta-device dry run of one step) instead of training");
  app.add_option("--max-seq", max_seq_gib, "With --plan: the longest seq_length whose planned peak fits in this many GiB per rank");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    say(e.what());
    say("usage: ulysses-run CONFIG.json [--set key=value]... [--json] [--out DIR] [--worker PATH]; see --help");
    return 2;
  }

  if (app.count("--max-seq") && !plan_mode) {
    say("--max-seq needs --plan");
    return 2;
  }
  // 1. Config and its files, before anything starts (a plan reads no data).
  ulysses::RunConfig cfg;
  try {
    cfg = ulysses::load_run_config(config_path, overrides);
    const auto issues = plan_mode ? ulysses::validate(cfg) : ulysses::validate_with_files(cfg);
    if (!issues.empty()) {
      for (const auto& i : issues) say_each_line(i.message);
      return 2;
    }
  } catch (const ulysses::ConfigError& e) {
    say_each_line(e.what());
    return 2;
  }

  // 2. Worker binary.
  const L::WorkerLocation where = L::locate_worker(worker, std::getenv("ULYSSES_WORKER"), L::self_executable());
  if (where.path.empty()) {
    say(where.error);
    return where.exit_code;
  }

  if (plan_mode) {  // the worker answers; exec keeps its stdout, stderr and exit code
    std::vector<std::string> args{where.path, "--plan", "--config", config_path};
    for (const auto& o : overrides) {
      args.push_back("--set");
      args.push_back(o);
    }
    if (json_mode) args.push_back("--json");
    if (app.count("--max-seq")) {
      args.push_back("--max-seq");
      char g[64];
      std::snprintf(g, sizeof g, "%.17g", max_seq_gib);
      args.push_back(g);
    }
    std::vector<char*> argv_exec;
    for (auto& a : args) argv_exec.push_back(a.data());
    argv_exec.push_back(nullptr);
    std::fflush(stdout);
    execv(where.path.c_str(), argv_exec.data());
    say("cannot start " + where.path + ": " + std::strerror(errno));
    return 1;
  }

  // 3. Run directory.
  if (out_dir.empty())
    out_dir = (std::filesystem::path("runs") /
               (L::compact_local_timestamp(std::chrono::system_clock::now()) + "-" + config_name(config_path)))
                  .string();
  if (L::run_dir_in_use(out_dir)) {
    say(out_dir + "/run.json exists: that directory already holds a run; pick another --out or delete it");
    return 2;
  }

  install_signal_handlers();
  L::LaunchOptions opt;
  opt.run_dir = out_dir;
  opt.worker = where.path;
  opt.config = cfg;
  L::LaunchCallbacks cb;
  cb.on_line = [](int rank, L::Stream, const std::string& line) {
    err_line("[rank " + std::to_string(rank) + "] " + line);
  };
  cb.on_metric = [json_mode](const L::MetricLine& m) {
    if (json_mode) {
      std::fwrite(m.raw.data(), 1, m.raw.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      err_line(L::format_progress(m.value));
    }
  };
  cb.stop_requested = [] { return g_stop_signal != 0; };
  cb.on_started = [&](const std::vector<int>& pids) {
    say("started " + std::to_string(pids.size()) + " worker(s) (sp_size " + std::to_string(cfg.parallel.sp_size) +
        " x dp_size " + std::to_string(cfg.parallel.dp_size) + "), run directory " + out_dir);
  };

  L::LaunchResult res;
  try {
    res = L::launch_run(opt, cb);
  } catch (const L::LaunchError& e) {
    say(e.what());
    return 1;
  }

  const auto& rec = res.record;
  switch (rec.status) {
    case L::RunStatus::Finished:
      say(rec.message + (rec.final_loss ? ", final loss " + std::to_string(*rec.final_loss) : std::string()) +
          "; run directory " + out_dir);
      break;
    case L::RunStatus::Stopped:
      say(std::string("stopped by ") + (g_stop_signal == SIGINT ? "SIGINT" : g_stop_signal == SIGHUP ? "SIGHUP" : "SIGTERM") +
          " after " + std::to_string(rec.steps_done) + " steps; every worker was terminated; run directory " + out_dir);
      break;
    default:
      say(rec.message + "; the other workers were stopped");
      if (!res.failed_tail.empty()) {
        say("last " + std::to_string(res.failed_tail.size()) + " lines of rank " + std::to_string(*rec.failed_rank) +
            " (" + out_dir + "/logs/rank" + std::to_string(*rec.failed_rank) + ".log):");
        for (const auto& l : res.failed_tail) err_line("  " + l);
      }
      break;
  }
  return res.exit_code;
}
