// ulysses-run's questions to ulysses-worker (worker_commands.hpp).
#include "worker_commands.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "run_output.hpp"
#include "worker_process.hpp"

namespace ulysses::launch {
namespace {

// Copies what comes on the two pipes to this process's stdout and stderr until both close;
// returns the bytes seen on each (a closed stdout: dropped, counted).
std::pair<size_t, size_t> relay_pipes(int out_fd, int err_fd) {
  size_t out_bytes = 0, err_bytes = 0;
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
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
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = ::write(i == 0 ? 1 : 2, buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += w;
      }
    }
  }
  return {out_bytes, err_bytes};
}

std::string number_arg(double v) {
  char g[64];
  std::snprintf(g, sizeof g, "%.17g", v);
  return g;
}

}  // namespace

int pass_through_worker(const std::string& path, std::vector<std::string>& args, const std::string& what) {
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
  const auto [out_bytes, err_bytes] = relay_pipes(out_pipe[0], err_pipe[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (code == 0 && out_bytes == 0) {
    say(what + ": " + path + " exited 0 without printing a plan; is --worker a ulysses-worker of this build?");
    return 1;
  }
  if (code != 0 && err_bytes == 0 && out_bytes == 0) {
    say(what + ": " + path + " " +
        (WIFEXITED(st) ? "exited with code " + std::to_string(code)
                       : "was killed by signal " + std::to_string(WTERMSIG(st))) +
        " without a message; is --worker a ulysses-worker of this build?");
    return code == 2 ? 2 : 1;
  }
  return code;
}

std::vector<std::string> simulate_worker_args(const SimulateRequest& r) {
  std::vector<std::string> args{r.worker, "--simulate", r.hardware};
  if (!r.config_path.empty()) args.insert(args.end(), {"--config", r.config_path});
  for (const auto& o : r.overrides) args.insert(args.end(), {"--set", o});
  if (!r.out.empty()) args.insert(args.end(), {"--out", r.out});
  if (!r.calibrate.empty()) args.insert(args.end(), {"--calibrate", r.calibrate});
  if (r.steps) args.insert(args.end(), {"--steps", std::to_string(*r.steps)});
  if (r.json) args.push_back("--json");
  if (r.no_plan) args.push_back("--no-plan");
  if (!r.background_load.empty()) args.insert(args.end(), {"--background-load", r.background_load});
  return args;
}

std::vector<std::string> plan_worker_args(const PlanRequest& r) {
  std::vector<std::string> args{r.worker, "--plan", "--config", r.config_path};
  for (const auto& o : r.overrides) args.insert(args.end(), {"--set", o});
  if (r.json) args.push_back("--json");
  if (r.max_seq_gib) args.insert(args.end(), {"--max-seq", number_arg(*r.max_seq_gib)});
  if (r.tflops) args.insert(args.end(), {"--tflops", number_arg(*r.tflops)});
  if (r.gpu_gib) args.insert(args.end(), {"--gpu-gib", number_arg(*r.gpu_gib)});
  return args;
}

namespace {

// Reads the planner's two streams (up to 1 MiB each) until both close, then reaps it. Empty
// when it answered in time, else why not.
std::string collect_planner(WorkerProcess& proc, std::chrono::steady_clock::time_point end,
                            const std::function<bool()>& stop, double time_s, std::string& out, std::string& err) {
  char buf[8192];
  while (proc.stdout_fd() >= 0 || proc.stderr_fd() >= 0) {
    if (std::chrono::steady_clock::now() > end)
      return "ulysses-worker --plan took longer than " + std::to_string(static_cast<int>(time_s)) + " s";
    if (stop && stop()) return "stopped";  // obeyed at once (the caller says so)
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
    if (std::chrono::steady_clock::now() > end) return "ulysses-worker --plan did not exit";
    ::poll(nullptr, 0, 20);
  }
  return "";
}

}  // namespace

std::optional<nlohmann::json> run_planner(const std::string& worker, const std::string& config_path,
                                          const std::vector<std::string>& overrides, double time_s,
                                          const std::function<bool()>& stop, std::string* why) {
  SpawnSpec spec;
  spec.executable = worker;
  spec.args = {"--plan", "--json", "--config", config_path};
  for (const auto& o : overrides) spec.args.insert(spec.args.end(), {"--set", o});
  std::string out, err;
  try {
    WorkerProcess proc(spec);  // its destructor kills it when we leave early
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                            std::chrono::duration<double>(time_s));
    *why = collect_planner(proc, end, stop, time_s, out, err);
    if (!why->empty()) return std::nullopt;
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

}  // namespace ulysses::launch
