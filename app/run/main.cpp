// ulysses-run CONFIG.json [--set key=value]... [--json] [--out DIR] [--worker PATH] [--force]
// ulysses-run CONFIG.json --export accelerate|deepspeed DIR [--force]: writes the equivalent
// Hugging Face accelerate + TrainingArguments or DeepSpeed configs (engine/launch/
// export_python.hpp) after the config validation; nothing is trained.
// ulysses-run CONFIG.json --plan [--json] [--max-seq GIB | --gpu-gib GIB] [--tflops T]: the memory plan per rank,
// computed by `ulysses-worker --plan` (a meta-device dry run; this program stays
// torch-free and execs the worker, whose output and exit code are the answer).
// ulysses-run CONFIG.json --simulate HW --out DIR: one step simulated on hardware HW (engine/sim,
// through `ulysses-worker --simulate`), written as a run folder marked as simulated;
// --simulate list names the shipped hardware; --calibrate RUN --simulate HW --out FILE.json fits HW
// to a measured run.
// Validates the run config (and its files) before starting anything, then runs
// sp_size x dp_size ulysses-worker processes through ulysses::launch and reports.
// Before launch: the estimated memory must fit the machine, --out must be absent or empty,
// train.save_to must be writable. --force launches past the memory check and moves an
// old --out directory aside (never into it, never appending).
// Exit codes: 0 finished, 2 bad input (config, --out in use, a rank exited 2), 1 failure
// or stopped by SIGINT/SIGTERM/SIGHUP/SIGQUIT. No exception escapes main (no abort, 134).
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include <CLI/CLI.hpp>

#include "cli_number.hpp"
#include "std_fds.hpp"
#include "cost_model.hpp"
#include "device_decision.hpp"
#include "checkpoint_layout.hpp"
#include "export_python.hpp"
#include "folder_claim.hpp"
#include "json_checked.hpp"
#include "launch_error.hpp"
#include "machine_memory.hpp"
#include "run_config.hpp"
#include "run_launcher.hpp"
#include "worker_locator.hpp"
#include "worker_process.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/common/run_layout.hpp"

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

const char* stop_signal_name() {
  return g_stop_signal == SIGINT    ? "SIGINT"
         : g_stop_signal == SIGHUP  ? "SIGHUP"
         : g_stop_signal == SIGQUIT ? "SIGQUIT"
                                    : "SIGTERM";
}

void on_terminal_stop(int) {
  static const char kMsg[] =
      "\nulysses-run: Ctrl-Z does not pause a run (its ranks would time out waiting for each other); it goes on. "
      "Ctrl-C stops it.\n";
  const ssize_t n = ::write(2, kMsg, sizeof kMsg - 1);  // async-signal-safe
  (void)n;
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
  // SIGQUIT (Ctrl-\) too: its default core dump left run.json "running" with every worker killed.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout (| head) must not kill us before the workers are stopped
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG), reported, instead of killing us
  // Ctrl-Z stopped the launcher but not the ranks (each in its own process group): their output
  // then filled the pipes, blocked their training and timed the run out. The run goes on instead.
  struct sigaction tstp {};
  tstp.sa_handler = on_terminal_stop;
  sigemptyset(&tstp.sa_mask);
  tstp.sa_flags = SA_RESTART;
  sigaction(SIGTSTP, &tstp, nullptr);
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

// Memory this machine can give the run now: MemAvailable (what the kernel can hand out without
// swapping, /proc/meminfo), or what is left under the cgroup's limit if less
// (launch::available_memory_bytes).
int64_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  auto slurp = [](const char* path) {
    std::ifstream f(path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return text.substr(0, 1 << 16);
  };
  return ulysses::launch::available_memory_bytes(slurp("/proc/meminfo"), slurp("/sys/fs/cgroup/memory.max"),
                                                 slurp("/sys/fs/cgroup/memory.current"),
                                                 slurp("/sys/fs/cgroup/memory.stat"), physical);
}

// What one CPU rank's process holds before the model (libtorch, OpenBLAS, Gloo, the tracer):
// a tiny run's worker measured at ~175 MiB resident here; counted per rank in the memory check,
// so that 1024 tiny ranks are refused on a 24 GiB machine instead of swapping it to a halt.
constexpr int64_t kRankProcessBytes = int64_t{160} << 20;
// CPU ranks per core beyond which a run is refused without --force: each rank needs at least
// one thread, and past this many the ranks spend their time descheduled (and rendezvous and the
// watchdog's timeouts with them).
constexpr int64_t kMaxRanksPerCore = 8;

// Cores this process may run on (its affinity mask, e.g. taskset or a container's cpuset).
int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// True when the run's ranks live in host memory (train.device cpu, or auto without a GPU).
bool host_run(const ulysses::RunConfig& cfg) {
  std::error_code ec;
  return cfg.train.device == "cpu" || (cfg.train.device == "auto" && !std::filesystem::exists("/dev/nvidia0", ec));
}

// Empty when the run's CPU ranks fit this machine's cores (kMaxRanksPerCore), else the refusal
// with the figures.
std::string cores_refusal(const ulysses::RunConfig& cfg) {
  if (!host_run(cfg)) return {};
  const int64_t world = cfg.parallel.world_size(), cores = usable_cores();
  if (world <= cores * kMaxRanksPerCore) return {};
  return std::to_string(world) + " CPU ranks (parallel.sp_size " + std::to_string(cfg.parallel.sp_size) +
         " x ring_size " + std::to_string(cfg.parallel.ring_size) + " x dp_size " +
         std::to_string(cfg.parallel.dp_size) + ") on " + std::to_string(cores) + " core(s) is " +
         std::to_string((world + cores - 1) / cores) + " per core, more than the " + std::to_string(kMaxRanksPerCore) +
         " this machine can keep progressing; use fewer ranks, or pass --force to launch anyway";
}

// `p` absolute, without symlinks, "." or ".." (as far as it exists), for comparing paths.
std::filesystem::path canonical_path(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
}

// --plan: the worker's answer passed through (stdout, stderr, exit code). A worker that prints
// no plan and exits 0 (`--plan --worker /bin/true` prints nothing, exit 0) or fails without a
// word (`/bin/false`: exit 1, no message) is said to be no ulysses-worker of this build.
int run_plan(const std::string& path, std::vector<std::string>& args) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    say(std::string("cannot start ") + path + ": " + std::strerror(errno));
    return 1;
  }
  std::vector<char*> argv_exec;
  for (auto& a : args) argv_exec.push_back(a.data());
  argv_exec.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) {
    say(std::string("cannot start ") + path + ": " + std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execv(path.c_str(), argv_exec.data());
    const std::string m = "ulysses-run: cannot start " + path + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] const ssize_t n = ::write(2, m.data(), m.size());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  size_t out_bytes = 0, err_bytes = 0;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[8192];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? out_bytes : err_bytes) += static_cast<size_t>(n);
      for (ssize_t done = 0; done < n;) {  // passed on as it comes (a closed stdout: dropped, counted)
        const ssize_t w = ::write(i == 0 ? 1 : 2, buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += w;
      }
    }
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (code == 0 && out_bytes == 0) {
    say("--plan: " + path + " exited 0 without printing a plan; is --worker a ulysses-worker of this build?");
    return 1;
  }
  if (code != 0 && err_bytes == 0 && out_bytes == 0) {
    say("--plan: " + path + " " +
        (WIFEXITED(st) ? "exited with code " + std::to_string(code)
                       : "was killed by signal " + std::to_string(WTERMSIG(st))) +
        " without a message; is --worker a ulysses-worker of this build?");
    return code == 2 ? 2 : 1;
  }
  return code;
}

// A train.save_to that no --force allows because of --out, or "": the run directory --out or a
// folder inside it (saving into --out would replace the run's own config.json with the model's;
// a folder inside it would be made before the run directory, which would then be refused as
// "not a run directory of ulysses-run"). The rest of save_to's rules: ckpt::save_to_issues.
std::string save_to_refusal(const std::string& save_to, const std::string& out_dir) {
  const std::filesystem::path st = canonical_path(save_to);
  const std::filesystem::path rel = st.lexically_relative(canonical_path(out_dir));
  if (!rel.empty() && *rel.begin() != "..")
    return "train.save_to: " + save_to + (rel == "." ? " is" : " lies inside") + " the run directory --out " + out_dir +
           ", which ulysses-run writes fresh (the model's config.json would replace the run's); pick a "
           "folder outside it";
  return "";
}

// What --force must not move aside with an old --out folder: the folder the user stands in
// (or one above it), or the run's own inputs (config, data, init_from, resume_from), which the
// ranks would then not find. "" when the move is safe.
std::string force_refusal(const std::string& out_dir, const ulysses::RunConfig& cfg, const std::string& config_path) {
  namespace fs = std::filesystem;
  const fs::path out = canonical_path(out_dir);
  auto holds = [&](const std::string& p) {  // p is out or lies inside it
    if (p.empty()) return false;
    const fs::path rel = canonical_path(p).lexically_relative(out);
    return !rel.empty() && *rel.begin() != "..";
  };
  if (const std::string live = ulysses::launch::live_run_within(out_dir); !live.empty())
    return "--force would move " + out_dir + " aside, and " + live +
           "; pick another --out (--force never moves a live run)";
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  if (!ec && holds(cwd))
    return "--force would move " + out_dir + " aside, and the current folder " +
           (canonical_path(cwd) == out ? std::string("is that folder") : "is inside it") + "; pick another --out";
  const std::pair<const char*, const std::string*> inputs[] = {{"the config", &config_path},
                                                               {"data.path", &cfg.data.path},
                                                               {"train.init_from", &cfg.train.init_from},
                                                               {"train.resume_from", &cfg.train.resume_from}};
  for (const auto& [what, p] : inputs)
    if (holds(*p))
      return "--force would move " + out_dir + " aside, and " + what + " (" + *p +
             ") is inside it, so the ranks would not find it; pick another --out, or move the file out first";
  return "";
}

// Runs `ulysses-worker --plan --json` for the user's config and returns its plan, or nullopt
// with *why when the planner is not available (another worker, a failure, over time_s).
std::optional<nlohmann::json> run_planner(const std::string& worker, const std::string& config_path,
                                          const std::vector<std::string>& overrides, double time_s, std::string* why) {
  namespace L = ulysses::launch;
  L::SpawnSpec spec;
  spec.executable = worker;
  spec.args = {"--plan", "--json", "--config", config_path};
  for (const auto& o : overrides) {
    spec.args.push_back("--set");
    spec.args.push_back(o);
  }
  std::string out, err;
  try {
    L::WorkerProcess proc(spec);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(time_s);
    char buf[8192];
    while (proc.stdout_fd() >= 0 || proc.stderr_fd() >= 0) {
      if (std::chrono::steady_clock::now() > end) {
        *why = "ulysses-worker --plan took longer than " + std::to_string(static_cast<int>(time_s)) + " s";
        return std::nullopt;  // the destructor kills it
      }
      if (g_stop_signal != 0) {  // SIGINT/SIGTERM while planning: obeyed at once (run_main says so)
        *why = "stopped";
        return std::nullopt;  // the destructor kills it
      }
      pollfd fds[2] = {{proc.stdout_fd(), POLLIN, 0}, {proc.stderr_fd(), POLLIN, 0}};
      if (::poll(fds, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !fds[i].revents) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          std::string& dst = i == 0 ? out : err;
          if (dst.size() < (1u << 20)) dst.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          if (i == 0)
            proc.close_stdout();
          else
            proc.close_stderr();
        }
      }
    }
    while (!proc.try_reap()) {
      if (std::chrono::steady_clock::now() > end) {
        *why = "ulysses-worker --plan did not exit";
        return std::nullopt;
      }
      ::poll(nullptr, 0, 20);
    }
    if (!proc.exit_info().success()) {
      const auto nl = err.find('\n');
      *why = "ulysses-worker --plan " + proc.exit_info().describe() +
             (err.empty() ? std::string() : ": " + err.substr(0, nl));
      return std::nullopt;
    }
  } catch (const std::exception& e) {
    *why = e.what();
    return std::nullopt;
  }
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object() || !j.contains("peak_bytes") || !j["peak_bytes"].is_number_integer() ||
      j["peak_bytes"].get<int64_t>() <= 0) {
    *why = "ulysses-worker --plan printed no plan";
    return std::nullopt;
  }
  return j;
}

// Empty when the run's memory fits this machine, else the refusal with the numbers. Only for
// runs whose ranks all live in host memory (train.device cpu, or auto without a GPU). The
// figure is the memory planner's (a meta-device dry run of one step through the real model
// code, `ulysses-worker --plan`) where it is worth asking and available, else the cost
// model's. Tiny configs never start the planner: it is asked only when the cost model puts
// the run above half the machine, and not when weights, gradients and AdamW state alone
// (the same exact count in both) already exceed it.
std::string memory_refusal(const ulysses::RunConfig& cfg, const std::string& worker, const std::string& config_path,
                           const std::vector<std::string>& overrides) {
  namespace C = ulysses::cost;
  if (!host_run(cfg)) return {};
  C::CostOptions o;
  // The engine's default attention on CPU is blocked (no N x N scores); sdpa's math path keeps them.
  o.math_attention = cfg.train.attention == "sdpa" ? 1 : 0;
  const C::CostEstimate e = C::estimate(cfg, o);
  const int64_t world = cfg.parallel.world_size();
  const double have = static_cast<double>(machine_memory_bytes());
  if (have <= 0) return {};
  const double static_per_rank = static_cast<double>(e.param_bytes + e.grad_bytes + e.master_bytes + e.optimizer_bytes);
  const double process = static_cast<double>(kRankProcessBytes);
  double per_rank = static_cast<double>(e.total_bytes());
  double activations = static_cast<double>(e.activation_bytes);
  std::string source = "estimated memory (cost model)";
  std::string planner_note;
  if (per_rank * static_cast<double>(world) > 0.5 * have && static_per_rank * static_cast<double>(world) <= have &&
      !worker.empty()) {
    std::string why;
    if (const auto plan = run_planner(worker, config_path, overrides, 60.0, &why)) {
      per_rank = static_cast<double>((*plan)["peak_bytes"].get<int64_t>());
      activations = per_rank - static_per_rank;
      source = "planned peak memory (meta-device dry run of one step, ulysses-worker --plan)";
    } else {
      planner_note = " (the memory planner was not used: " + why + ")";
    }
  }
  const double total = (per_rank + process) * static_cast<double>(world);
  if (total <= have) return {};
  return source + " " + C::format_bytes(total) + " (" + std::to_string(world) + " rank(s) x " +
         C::format_bytes(per_rank + process) + ": weights, gradients and AdamW state " +
         C::format_bytes(static_per_rank) + ", activations and the rest " +
         C::format_bytes(std::max(0.0, activations)) + ", the rank's process itself " + C::format_bytes(process) +
         ") exceeds the memory this machine has available (MemAvailable) of " + C::format_bytes(have) + planner_note +
         "; make the model, train.seq_length or the number of ranks smaller, or pass --force to launch anyway";
}

std::string config_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  for (char& c : stem)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  return stem.empty() ? "run" : stem;
}

}  // namespace

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

int g_closed_std_fds = 0;  // what ulysses::cli::reopen_closed_std_fds() found closed at start

// What the command line asked for (run_main's first part).
struct RunArgs {
  std::string config_path, out_dir, worker;
  std::vector<std::string> overrides, export_args;
  bool json_mode = false, force = false, plan_mode = false, export_mode = false;
  bool out_given = false, max_seq_given = false, tflops_given = false, gpu_gib_given = false;
  double max_seq_gib = 0, tflops = 0, gpu_gib = 0;
  std::optional<ulysses::launch::ExportTarget> export_target;
};

// Parses and checks the command line; an exit code when the program should stop (--help: 0,
// bad flags: 2), nothing when `a` is complete.
std::optional<int> parse_run_args(int argc, char** argv, RunArgs& a) {
  namespace L = ulysses::launch;
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
  app.add_option(
         "--export", a.export_args,
         "Write the equivalent Hugging Face accelerate + TrainingArguments (accelerate) or DeepSpeed (deepspeed) "
         "configs, the model's config.json, README.txt and launch.sh into DIR instead of training")
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
  if (a.json_mode && (g_closed_std_fds & 2)) {  // the steps would go nowhere, exit 0
    say("--json prints each step on stdout, which is closed (started with >&-); give it a file or a pipe");
    return 2;
  }
  if (a.out_given && a.out_dir.empty()) {  // not the default runs/<timestamp> folder unsaid
    say("--out needs a folder name, e.g. --out runs/mine");
    return 2;
  }
  if (a.max_seq_given && !a.plan_mode) {
    say("--max-seq needs --plan");
    return 2;
  }
  if (a.tflops_given && !a.plan_mode) {
    say("--tflops needs --plan");
    return 2;
  }
  if (a.gpu_gib_given && !a.plan_mode) {
    say("--gpu-gib needs --plan");
    return 2;
  }
  if (a.plan_mode && a.out_given) {  // not ignored without a word
    say("--plan cannot be combined with --out (a plan is printed, nothing is written)");
    return 2;
  }
  if (a.export_mode) {
    if (a.plan_mode || a.out_given) {
      say(std::string("--export cannot be combined with ") + (a.plan_mode ? "--plan" : "--out") +
          " (an export trains nothing)");
      return 2;
    }
    a.export_target = L::parse_export_target(a.export_args.at(0));
    if (!a.export_target) {
      say("--export: unknown target '" + a.export_args[0] + "' (use accelerate or deepspeed)");
      return 2;
    }
    if (a.export_args.at(1).empty()) {
      say("--export: the directory name is empty");
      return 2;
    }
  }
  return std::nullopt;
}

// The config and its files, before anything starts (a plan or an export reads no data and is
// not for this host's devices); exit code 2 with the reasons when it is refused.
std::optional<int> load_checked_config(const RunArgs& a, ulysses::RunConfig& cfg, std::string& tokens_checked) {
  const bool here = !a.plan_mode && !a.export_mode;  // a run on this host
  try {
    cfg = ulysses::load_run_config(a.config_path, a.overrides);
    if (here) tokens_checked = ulysses::tokens_file_identity(cfg.data.path, cfg.data, cfg.model.vocab_size);
    // A large token file's id check reads it whole (about 0.4 GiB/s here): said first, not
    // minutes of silence.
    if (here && cfg.data.kind == "tokens") {
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(cfg.data.path, ec);
      if (!ec && bytes >= (uintmax_t{1} << 30))
        say("checking the token ids of " + cfg.data.path + " (" + std::to_string(bytes >> 30) +
            " GiB) against model.vocab_size before anything starts; Ctrl-C stops it");
    }
    auto issues = here ? ulysses::validate_with_files(cfg) : ulysses::validate(cfg);
    // Device and backend, decided as each worker will: every rank runs on this host.
    if (issues.empty() && here)
      ulysses::decide_device(cfg, ulysses::DeviceFacts::detect(0, static_cast<int>(cfg.parallel.world_size())),
                             &issues);
    if (!issues.empty()) {
      for (const auto& i : issues) say_each_line(i.message);
      return 2;
    }
  } catch (const ulysses::ConfigError& e) {
    say_each_line(e.what());
    return 2;
  }
  // Data with fewer windows of seq_length + 1 tokens than the run draws sequences: windows
  // repeat (a file of exactly seq_length + 1 tokens trained on one sequence every step, unsaid).
  if (here && (cfg.data.kind == "text" || cfg.data.kind == "tokens")) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(cfg.data.path, ec);
    const int64_t width = cfg.data.token_bytes();
    if (!ec) {
      const int64_t windows = static_cast<int64_t>(bytes) / width - cfg.train.seq_length;
      const double draws = double(cfg.train.steps) * double(cfg.train.micro_batch_size) * double(cfg.parallel.dp_size) *
                           double(std::max<int64_t>(1, cfg.train.gradient_accumulation_steps));
      if (windows >= 1 && double(windows) < draws)
        say("note: " + cfg.data.path + " holds " + std::to_string(windows) +
            " distinct window(s) of train.seq_length + 1 = " + std::to_string(cfg.train.seq_length + 1) +
            " tokens for the " + std::to_string(static_cast<long long>(draws)) +
            " sequences this run draws: sequences repeat (more data, or a shorter seq_length, gives more)");
    }
  }
  return std::nullopt;
}

// --export: nothing starts, the files are the answer.
int run_export(const RunArgs& a, const ulysses::RunConfig& cfg) {
  namespace L = ulysses::launch;
  namespace fs = std::filesystem;
  const std::string& dir = a.export_args[1];
  // Hugging Face's set_seed seeds numpy, which takes 0..2^32-1 only: the Trainer would fail.
  if (*a.export_target == L::ExportTarget::Accelerate && (cfg.train.seed < 0 || cfg.train.seed > 4294967295LL)) {
    say("--export accelerate: train.seed " + std::to_string(cfg.train.seed) +
        " is outside Hugging Face's seeds (0 to 4294967295: set_seed seeds numpy); export with another train.seed");
    return 2;
  }
  if (const std::string why = L::export_dir_problem(dir, a.force); !why.empty()) {
    say("--export: " + why);
    return 2;
  }
  const auto files = L::build_export(cfg, *a.export_target, a.config_path);
  // --force replaces an earlier export's files, never the config being exported, a run
  // directory's records or a checkpoint's files (the export's config.json over them would
  // leave a checkpoint whose manifest no longer matches).
  std::error_code ec;
  for (const auto& f : files) {
    if (fs::equivalent(fs::path(dir) / f.name, a.config_path, ec)) {
      say("--export: " + (fs::path(dir) / f.name).string() + " is the config being exported (" + a.config_path +
          "); pick another export directory");
      return 2;
    }
  }
  // A model in any of its layouts: ours (model_file_held: the single file, the index, or
  // shards without it) and PyTorch's pickled weights.
  std::string model_file = ulysses::ckpt::model_file_held(dir);
  for (const char* pt : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (model_file.empty() && fs::exists(fs::path(dir) / pt, ec)) model_file = pt;
  for (const std::string& kept :
       {std::string(ulysses::run_layout::kRunRecord), std::string(ulysses::run_layout::kMetrics),
        std::string(ulysses::ckpt::kCompleteFile), std::string(ulysses::ckpt::kStateFile), model_file}) {
    if (!kept.empty() && fs::exists(fs::path(dir) / kept, ec)) {
      say("--export: " + dir + " holds " + kept +
          " (a run directory, a checkpoint or a model), whose files the export would replace; pick another "
          "export directory (--force replaces only an earlier export)");
      return 2;
    }
  }
  try {
    L::write_export(files, dir);
  } catch (const std::exception& e) {
    say(std::string("--export: ") + e.what());
    return 1;
  }
  say(std::string("wrote the ") + L::export_target_name(*a.export_target) + " export of " + a.config_path + " to " +
      dir + " (README.txt lists the command and every difference); nothing was trained");
  return 0;
}

// Thread counts the workers inherit: a value OpenMP or OpenBLAS cannot read (0, -1, abc, an
// empty string) only draws a libgomp warning per rank, and the run goes on with 1 thread.
std::optional<int> check_thread_env() {
  for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* v = std::getenv(k);
    if (!v) continue;
    // OpenMP's syntax: positive whole numbers, comma-separated for nested levels ("4,2").
    const std::string text = v;
    bool ok = !text.empty();
    size_t at = 0;
    while (ok && at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string part = text.substr(at, comma - at);
      ok = !part.empty() && part.size() <= 6 && part.find_first_not_of("0123456789") == std::string::npos &&
           std::stol(part) >= 1;
      at = comma + 1;
    }
    if (!ok) {
      say(std::string(k) + "='" + text +
          "' is not a thread count (a positive whole number); unset it to get train.threads_per_rank (or cores / "
          "ranks) per rank, or set it to, say, 1");
      return 2;
    }
  }
  return std::nullopt;
}

// --plan: the worker answers; exec keeps its stdout, stderr and exit code.
int plan_through_worker(const RunArgs& a, const std::string& worker) {
  std::vector<std::string> args{worker, "--plan", "--config", a.config_path};
  for (const auto& o : a.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  if (a.json_mode) args.push_back("--json");
  if (a.max_seq_given) {
    args.push_back("--max-seq");
    char g[64];
    std::snprintf(g, sizeof g, "%.17g", a.max_seq_gib);
    args.push_back(g);
  }
  if (a.tflops_given) {
    args.push_back("--tflops");
    char t[64];
    std::snprintf(t, sizeof t, "%.17g", a.tflops);
    args.push_back(t);
  }
  if (a.gpu_gib_given) {
    args.push_back("--gpu-gib");
    char g[64];
    std::snprintf(g, sizeof g, "%.17g", a.gpu_gib);
    args.push_back(g);
  }
  return run_plan(worker, args);
}

// The save folder's checks and claim (folder_claim.hpp): refused before launch when another
// run holds it, it breaks save_to's rules, or it cannot be written.
std::optional<int> claim_save_folder(const ulysses::RunConfig& cfg, const std::string& out_dir, bool force,
                                     const ulysses::launch::OwnerRecord& me, ulysses::launch::FolderClaim& claim) {
  namespace L = ulysses::launch;
  if (cfg.train.save_to.empty()) return std::nullopt;
  const std::string& save_to = cfg.train.save_to;
  auto held = [&](const L::OwnerRecord& o) {
    say("train.save_to: " + save_to + " belongs to " + o.describe() +
        ", which is still going; pick another train.save_to (a save folder holds one run's checkpoints)");
    return 2;
  };
  // A folder another run holds is said first, --force or not (taken below).
  if (const auto o = L::live_owner(save_to)) return held(*o);
  // The rules the studio's form shows too (ckpt::save_to_issues), then --out's own.
  const auto issues = ulysses::ckpt::save_to_issues(cfg, force);
  if (!issues.empty()) {
    say(issues.front().message);
    return 2;
  }
  if (const std::string why = save_to_refusal(save_to, out_dir); !why.empty()) {
    say(why);
    return 2;
  }
  if (const std::string why = L::probe_writable_dir(save_to); !why.empty()) {
    say("train.save_to: " + why + " (checked before launch, so the trained model is not lost at the end)");
    return 2;
  }
  // Held until this process ends: the save folder belongs to one run at a time (two runs on one
  // train.save_to would both report their saves, and the folder end with the second's).
  L::ClaimAttempt at = L::claim_folder(save_to, me);
  if (at.holder) return held(*at.holder);
  if (!at.error.empty()) {
    say("train.save_to: " + at.error);
    return 2;
  }
  claim = std::move(at.claim);
  return std::nullopt;
}

// The run folder: written fresh, never into the user's files, never appending; claimed by one
// atomic lock (never a look at files another launcher may be writing: two launchers on one
// --out would both refuse, or with --force neither run, when one read the other's probe file
// as foreign content); with --force an old run is moved aside. Exit code 2 when refused.
std::optional<int> claim_run_folder(const RunArgs& a, const ulysses::RunConfig& cfg, const std::string& out_dir,
                                    const ulysses::launch::OwnerRecord& me, ulysses::launch::FolderClaim& claim) {
  namespace L = ulysses::launch;
  auto claim_out = [&]() -> bool {
    L::ClaimAttempt at = L::claim_folder(out_dir, me);
    if (at.holder) {
      say(out_dir + " is being set up or run by another ulysses-run" +
          (at.holder->pid > 0 ? " (pid " + std::to_string(at.holder->pid) + ")" : std::string()) +
          "; pick another --out (--force never touches a live run)");
      return false;
    }
    if (!at.error.empty()) {
      say("--out: " + at.error);
      return false;
    }
    claim = std::move(at.claim);
    return true;
  };
  if (!claim_out()) return 2;
  // What --out holds, looked at again now that no other launcher can change it.
  const L::RunDirInfo claimed_state = L::inspect_run_dir(out_dir);
  const bool empty = claimed_state.state == L::RunDirState::Absent || claimed_state.state == L::RunDirState::Empty;
  if (claimed_state.state != L::RunDirState::OldRun && claimed_state.state != L::RunDirState::Foreign) {
    if (empty) return std::nullopt;
    say(claimed_state.detail + "; pick another --out");
    return 2;
  }
  if (!a.force) {
    say(claimed_state.detail + "; pick another --out or delete it, or pass --force to move it aside");
    return 2;
  }
  if (const std::string why = force_refusal(out_dir, cfg, a.config_path); !why.empty()) {
    say(why);
    return 2;
  }
  try {
    // Moved with its lock, still held: a launcher that took the path's lock before the move
    // finds it moved and takes the new path's; the fresh folder is then claimed again here.
    say("--force: moved the old " + out_dir + " aside to " + L::move_run_dir_aside(out_dir));
  } catch (const L::LaunchError& e) {
    say(e.what());
    return 2;
  }
  claim.release();
  if (!claim_out()) return 2;
  if (const L::RunDirInfo fresh = L::inspect_run_dir(out_dir);
      fresh.state != L::RunDirState::Absent && fresh.state != L::RunDirState::Empty) {
    say(fresh.detail + "; pick another --out");
    return 2;
  }
  return std::nullopt;
}

// What --out holds before any claim: refused at once when it can never be used.
std::optional<int> check_run_folder(const std::string& out_dir, bool force) {
  namespace L = ulysses::launch;
  const L::RunDirInfo out_state = L::inspect_run_dir(out_dir);
  switch (out_state.state) {
    case L::RunDirState::Absent:
    case L::RunDirState::Empty:
      break;
    case L::RunDirState::NotADirectory:
      say(out_state.detail + "; pick another --out");
      return 2;
    case L::RunDirState::LiveRun:
      say(out_state.detail + "; pick another --out (--force never touches a live run)");
      return 2;
    case L::RunDirState::OldRun:
    case L::RunDirState::Foreign:
      if (!force) {
        say(out_state.detail + "; pick another --out or delete it, or pass --force to move it aside");
        return 2;
      }
      break;
  }
  return std::nullopt;
}

// The launcher's callbacks: worker lines to stderr, METRIC lines as progress (or --json on
// stdout), liveness from the workers' heartbeats.
ulysses::launch::LaunchCallbacks make_callbacks(const RunArgs& a, const ulysses::RunConfig& cfg,
                                                const std::string& out_dir, std::vector<int>& shown_phase) {
  namespace L = ulysses::launch;
  L::LaunchCallbacks cb;
  cb.on_line = [](int rank, L::Stream, const std::string& line) {
    err_line("[rank " + std::to_string(rank) + "] " + line);
  };
  cb.on_metric = [json_mode = a.json_mode](const L::MetricLine& m) {
    if (json_mode) {
      std::fwrite(m.raw.data(), 1, m.raw.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      err_line(L::format_progress(m.value));
    }
  };
  cb.stop_requested = [] { return g_stop_signal != 0; };
  cb.on_warning = [](const std::string& m) { say("warning: " + m); };
  // One line per rank and phase (not per step), and when a rank goes quiet or comes back. The
  // studio's rank table reads these lines ("ulysses-run: rank R: PHASE", docs/CONTRACTS.md).
  shown_phase.assign(static_cast<size_t>(std::max<int64_t>(1, cfg.parallel.world_size())), -1);
  // With --json (the studio), each rank's step time as its heartbeat shows it: "rank R: step K
  // took X ms" when the rank leaves step K (the launcher's clock; the Monitor's rank table).
  struct StepMark {
    int64_t step = -1;
    std::chrono::steady_clock::time_point since;
  };
  auto marks = std::make_shared<std::vector<StepMark>>(shown_phase.size());
  cb.on_liveness = [&shown_phase, marks, json_mode = a.json_mode](int rank, const L::Beat& b, bool responsive,
                                                                  double silent_s) {
    if (rank < 0 || static_cast<size_t>(rank) >= shown_phase.size()) return;
    if (responsive && json_mode) {
      StepMark& mk = (*marks)[static_cast<size_t>(rank)];
      const auto now = std::chrono::steady_clock::now();
      const bool in_step = b.phase == L::Phase::Step;
      if (mk.step >= 0 && !(in_step && b.step == mk.step)) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "step %lld took %.1f ms", static_cast<long long>(mk.step),
                      std::chrono::duration<double, std::milli>(now - mk.since).count());
        say("rank " + std::to_string(rank) + ": " + buf);
        mk.step = -1;
      }
      if (in_step && mk.step < 0) {
        mk.step = b.step;
        mk.since = now;
      }
    }
    int& shown = shown_phase[static_cast<size_t>(rank)];
    if (!responsive) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", silent_s);
      say("rank " + std::to_string(rank) + ": no heartbeat for " + buf + " s (in " +
          L::describe_phase(b.phase, b.step) + ")");
      shown = -2;  // say the phase again once it beats
      return;
    }
    if (static_cast<int>(b.phase) == shown) return;
    shown = static_cast<int>(b.phase);
    if (b.phase == L::Phase::Init || b.phase == L::Phase::Finish) return;  // brief; not worth a line
    say("rank " + std::to_string(rank) + ": " +
        (b.phase == L::Phase::Step ? "training (step " + std::to_string(b.step) + ")"
                                   : L::describe_phase(b.phase, b.step)));
  };
  cb.on_started = [&cfg, out_dir](const std::vector<int>& pids) {
    say("started " + std::to_string(pids.size()) + " worker(s) (sp_size " + std::to_string(cfg.parallel.sp_size) +
        " x dp_size " + std::to_string(cfg.parallel.dp_size) + "), run directory " + out_dir);
  };
  return cb;
}

// The run's end said: the loss and the trace, the stop signal, or the failure with the failed
// rank's last lines; the exit code.
int report_run(const ulysses::launch::LaunchResult& res, const std::string& out_dir, bool json_mode) {
  namespace L = ulysses::launch;
  const auto& rec = res.record;
  switch (rec.status) {
    case L::RunStatus::Finished:
      say(rec.message + (rec.final_loss ? ", final loss " + std::to_string(*rec.final_loss) : std::string()) +
          "; run directory " + out_dir);
      prepare_trace(out_dir);
      break;
    case L::RunStatus::Stopped:
      say(std::string("stopped by ") + stop_signal_name() + " after " + std::to_string(rec.steps_done) +
          " steps; every worker was terminated; run directory " + out_dir);
      break;
    default:
      say(rec.message + (res.ended_short ? "" : "; the other workers were stopped"));
      if (!res.failed_tail.empty()) {
        say("last " + std::to_string(res.failed_tail.size()) + " lines of rank " + std::to_string(*rec.failed_rank) +
            " (" + ulysses::run_layout::rank_log(out_dir, *rec.failed_rank).string() + "):");
        for (const auto& l : res.failed_tail) err_line("  " + l);
      }
      break;
  }
  // --json's lines go to stdout alone: lines that could not be written there (a full disk
  // under "> steps.jsonl", /dev/full) make a finished run exit 1, not 0 with a short file.
  if (json_mode && (std::fflush(stdout) != 0 || std::ferror(stdout))) {
    say("--json: the METRIC lines could not all be written to stdout; every step is in " +
        ulysses::run_layout::metrics(out_dir).string());
    if (res.exit_code == 0) return 1;
  }
  return res.exit_code;
}

// --simulate HW / --calibrate RUN (docs/PERFORMANCE.md, "What if"): the worker answers, as for
// --plan (its stdout, stderr and exit code): it records the step on the meta device and the
// simulator (engine/sim) replays it. Nothing trains.
int simulate_through_worker(int argc, char** argv) {
  namespace L = ulysses::launch;
  CLI::App app{
      "ulysses-run --simulate: one training step of CONFIG simulated on hardware HW, written as a run folder that "
      "every view opens (ulysses-trace, the studio), marked as simulated.\n"
      "  ulysses-run CONFIG --simulate HW --out DIR      HW: a shipped name or a JSON file\n"
      "  ulysses-run --simulate list                     the shipped names\n"
      "  ulysses-run --calibrate RUN --simulate HW --out FILE.json   fit HW to a measured run",
      "ulysses-run"};
  std::string config, hw, out, calibrate, worker;
  std::vector<std::string> overrides;
  bool json = false, no_plan = false;
  int steps = 3;
  std::string background;
  app.add_option("config", config, "Run config JSON");
  app.add_option("--simulate", hw, "Hardware: a shipped name (list: --simulate list) or a JSON file")->required();
  app.add_option("--calibrate", calibrate, "Fit HW's efficiencies and link to this measured run folder");
  app.add_option("--set", overrides, "Override a config field (repeatable)")->type_name("KEY=VALUE");
  app.add_option("--out", out, "Run folder to write (with --calibrate: the hardware JSON file)");
  app.add_option("--steps", steps, "Identical simulated steps written (default 3)");
  app.add_option("--worker", worker, "ulysses-worker executable (default: $ULYSSES_WORKER, then next to ulysses-run)");
  app.add_flag("--json", json, "Print the result as one JSON object");
  app.add_flag("--no-plan", no_plan, "Leave the memory planner's figures out of the simulated run");
  app.add_option("--background-load", background,
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
  if (hw != "list" && out.empty()) {
    say(calibrate.empty() ? "--simulate needs --out DIR (the simulated run folder to write)"
                          : "--calibrate needs --out FILE.json (the calibrated hardware description to write)");
    return 2;
  }
  if (hw != "list" && calibrate.empty() && config.empty()) {
    say("--simulate needs a run config: ulysses-run CONFIG --simulate " + hw + " --out DIR");
    return 2;
  }
  const L::WorkerLocation where = L::locate_worker(worker, std::getenv("ULYSSES_WORKER"), L::self_executable());
  if (where.path.empty()) {
    say(where.error);
    return where.exit_code;
  }
  std::vector<std::string> args{where.path, "--simulate", hw};
  if (!config.empty()) args.insert(args.end(), {"--config", config});
  for (const auto& o : overrides) args.insert(args.end(), {"--set", o});
  if (!out.empty()) args.insert(args.end(), {"--out", out});
  if (!calibrate.empty()) args.insert(args.end(), {"--calibrate", calibrate});
  if (app.count("--steps")) args.insert(args.end(), {"--steps", std::to_string(steps)});
  if (json) args.push_back("--json");
  if (no_plan) args.push_back("--no-plan");
  if (!background.empty()) args.insert(args.end(), {"--background-load", background});
  return run_plan(where.path, args);
}

int run_main(int argc, char** argv) {
  namespace L = ulysses::launch;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--simulate" || std::string(argv[i]) == "--calibrate")
      return simulate_through_worker(argc, argv);
  RunArgs a;
  if (const auto code = parse_run_args(argc, argv, a)) return *code;
  // 1. Config and its files, before anything starts.
  ulysses::RunConfig cfg;
  std::string tokens_checked;  // the data file as its ids were checked here (taken before the check)
  if (const auto code = load_checked_config(a, cfg, tokens_checked)) return *code;
  if (a.export_mode) return run_export(a, cfg);
  if (const auto code = check_thread_env()) return *code;
  // 2. Worker binary.
  const L::WorkerLocation where = L::locate_worker(a.worker, std::getenv("ULYSSES_WORKER"), L::self_executable());
  // Memory: refuse what cannot fit before a worker builds it and the machine swaps (a plan
  // is itself the answer to that question: --plan is never refused). A stop from here on is
  // obeyed: the planner is killed, and from the launch on run.json ends "stopped".
  if (!a.plan_mode) {
    install_signal_handlers();
    if (const std::string why = cores_refusal(cfg); !why.empty()) {
      if (!a.force) {
        say(why);
        return 2;
      }
      say("warning (--force): " + why);
    }
    const std::string why = memory_refusal(cfg, where.path, a.config_path, a.overrides);
    if (g_stop_signal != 0) {
      say(std::string("stopped by ") + stop_signal_name() + " before launch (while checking the run's memory)");
      return 1;
    }
    if (!why.empty()) {
      if (!a.force) {
        say(why);
        return 2;
      }
      say("warning (--force): " + why);
    }
  }
  if (where.path.empty()) {
    say(where.error);
    return where.exit_code;
  }
  if (a.plan_mode) return plan_through_worker(a, where.path);
  if (const std::string why = ulysses::not_yet_trained(cfg); !why.empty()) {  // --plan above answers it
    say(why);
    return 2;
  }
  // 3. Run directory and save folder, each claimed for this run until it ends.
  const std::string out_dir =
      a.out_dir.empty()
          ? (std::filesystem::path("runs") /
             (L::compact_local_timestamp(std::chrono::system_clock::now()) + "-" + config_name(a.config_path)))
                .string()
          : a.out_dir;
  // Run records are JSON, whose strings are UTF-8: a folder name that is not would make the
  // owner record and run.json unwritable after the folder was claimed.
  if (ulysses::name_for_message(out_dir) != out_dir) {
    say("--out " + ulysses::name_for_message(out_dir) +
        " holds control characters or bytes that are not UTF-8; pick a plain folder name");
    return 2;
  }
  if (const auto code = check_run_folder(out_dir, a.force)) return *code;
  const std::string run_id = std::filesystem::absolute(out_dir).lexically_normal().string();
  const L::OwnerRecord me{run_id, ::getpid(), "ulysses-run"};
  L::FolderClaim save_claim, out_claim;
  if (const auto code = claim_save_folder(cfg, out_dir, a.force, me, save_claim)) return *code;
  if (const auto code = claim_run_folder(a, cfg, out_dir, me, out_claim)) return *code;
  // 4. Launch.
  L::LaunchOptions opt;
  opt.run_dir = out_dir;
  opt.worker = where.path;
  opt.config = cfg;
  opt.tokens_checked = tokens_checked;
  std::vector<int> shown_phase;
  const L::LaunchCallbacks cb = make_callbacks(a, cfg, out_dir, shown_phase);
  L::LaunchResult res;
  try {
    res = L::launch_run(opt, cb);
  } catch (const L::RunDirRefused& e) {  // found in the last moment by launch_run: still bad input
    say(e.what());
    return 2;
  } catch (const L::LaunchError& e) {
    say(e.what());
    return 1;
  }
  return report_run(res, out_dir, a.json_mode);
}

int main(int argc, char** argv) {
  g_closed_std_fds = ulysses::cli::reopen_closed_std_fds();
  // A file-size limit (ulimit -f) makes writes fail with EFBIG, said with the file, from the
  // start: otherwise SIGXFSZ kills --export (exit 153, no message, its temp file left behind).
  std::signal(SIGXFSZ, SIG_IGN);
  // Every exception ends as a message and an exit code, never as an abort.
  try {
    return run_main(argc, argv);
  } catch (const ulysses::ConfigError& e) {
    say_each_line(e.what());
    return 2;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 1;
  } catch (...) {
    say("error: unknown exception");
    return 1;
  }
}
