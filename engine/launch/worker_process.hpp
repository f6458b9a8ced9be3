// One child process with its stdout and stderr on pipes, in its own process group, so the
// launcher can signal it and anything it starts with one kill(-pgid). The child also gets
// PR_SET_PDEATHSIG=SIGKILL: if the launcher dies without cleaning up (SIGKILL, crash), the
// kernel kills the worker too, so no worker outlives its launcher. (Linux: the death
// signal fires when the *thread* that spawned the child exits; spawn from a long-lived
// thread.) Uses fork + execve with everything prepared before fork, so it is safe from a
// multi-threaded program.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace ulysses::launch {

struct SpawnSpec {
  std::string executable;                                // path; not searched in $PATH
  std::vector<std::string> args;                         // argv[1..]
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the current environment
  // A socket for the worker's heartbeat lines (heartbeat.hpp): its end is left open in the
  // child and named in ULYSSES_HEARTBEAT_FD; heartbeat_fd() reads the other end.
  bool heartbeat = false;
};

struct ExitInfo {
  bool exited = false;  // true: normal exit with `code`; false: killed by `signal`
  int code = 0;
  int signal = 0;
  bool success() const { return exited && code == 0; }
  // "exited with code 1", "was killed by signal 9 (Killed)"
  std::string describe() const;
};

class WorkerProcess {
 public:
  // Starts the process. Throws LaunchError when it cannot be started (the message
  // includes the executable and the reason, e.g. "Permission denied").
  explicit WorkerProcess(const SpawnSpec& spec);
  // Kills the process group with SIGKILL if the process still runs, reaps it, closes pipes.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Non-blocking read ends of the pipes; -1 once closed.
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdout();
  void close_stderr();
  // Non-blocking read end of the heartbeat socket; -1 without one or once closed.
  int heartbeat_fd() const { return hb_fd_; }
  void close_heartbeat();

  bool running() const { return running_; }
  // Non-blocking waitpid; returns true once the process has exited (then exit_info() is set).
  bool try_reap();
  const ExitInfo& exit_info() const { return exit_; }
  // kill(-pgid, sig): the worker and every process it started in its group. Returns false
  // when the group no longer exists.
  bool signal_group(int sig) const;

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int hb_fd_ = -1;
  bool running_ = false;
  ExitInfo exit_;
};

}  // namespace ulysses::launch
