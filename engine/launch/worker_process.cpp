// Child process spawning with pipes and process groups (see worker_process.hpp).
#include "worker_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch_error.hpp"

extern char** environ;

namespace ulysses::launch {

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(std::string("cannot create a pipe: ") + std::strerror(errno));
    r = fds[0];
    w = fds[1];
    // 256 KiB instead of 64 KiB: a launcher that stops reading for a while (stopped with
    // SIGSTOP, a slow terminal) blocks a rank's writes, and with them its training, only after
    // ~800 steps of output instead of ~200. Not more: an unprivileged user's pipes share 64 MiB
    // (pipe-user-pages-soft), past which every new pipe of that user gets one page. Best effort.
    (void)::fcntl(w, F_SETPIPE_SZ, 256 << 10);
  }
  ~Pipe() {
    close_fd(r);
    close_fd(w);
  }
};

std::vector<std::string> build_env(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool overridden = false;
    for (const auto& o : overrides) overridden |= (o.first == key);
    if (!overridden) env.push_back(kv);
  }
  for (const auto& o : overrides) env.push_back(o.first + "=" + o.second);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void child(const char* exe, char* const* argv, char* const* envp, int out_w, int err_w, int status_w,
                        pid_t parent, int hb_child) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died between fork and prctl
  // Ignored signals survive execve; give the worker default dispositions and no mask.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    ::dup2(devnull, 0);
    ::close(devnull);
  }
  if (hb_child >= 0) ::fcntl(hb_child, F_SETFD, 0);  // the one descriptor the worker inherits
  if (::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) {
    const int e = errno;
    (void)!::write(status_w, &e, sizeof e);
    ::_exit(127);
  }
  ::execve(exe, argv, envp);
  const int e = errno;
  (void)!::write(status_w, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

std::string ExitInfo::describe() const {
  if (exited) return "exited with code " + std::to_string(code);
  const char* name = ::strsignal(signal);
  return "was killed by signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : std::string());
}

WorkerProcess::WorkerProcess(const SpawnSpec& spec) {
  std::vector<std::string> argv_s;
  argv_s.push_back(spec.executable);
  argv_s.insert(argv_s.end(), spec.args.begin(), spec.args.end());
  // The heartbeat socket first: its child end's number goes into the environment.
  int hb[2] = {-1, -1};
  auto close_hb = [&] {
    close_fd(hb[0]);
    close_fd(hb[1]);
  };
  auto env_over = spec.env;
  if (spec.heartbeat) {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hb) != 0)
      throw LaunchError(std::string("cannot create a heartbeat socket: ") + std::strerror(errno));
    if (hb[1] < 3) {  // never 0-2, which the child replaces
      const int moved = ::fcntl(hb[1], F_DUPFD_CLOEXEC, 3);
      ::close(hb[1]);
      hb[1] = moved;
      if (moved < 0) {
        close_hb();
        throw LaunchError(std::string("cannot create a heartbeat socket: ") + std::strerror(errno));
      }
    }
    env_over.emplace_back("ULYSSES_HEARTBEAT_FD", std::to_string(hb[1]));
  } else {
    env_over.emplace_back("ULYSSES_HEARTBEAT_FD", "");  // none inherited from our own environment
  }
  std::vector<std::string> env_s = build_env(env_over);
  std::vector<char*> argv = c_strings(argv_s);
  std::vector<char*> envp = c_strings(env_s);

  struct HbGuard {
    std::function<void()> f;
    ~HbGuard() { f(); }
  } hb_guard{close_hb};
  Pipe out, err, status;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw LaunchError("cannot start " + spec.executable + ": fork failed: " + std::strerror(errno));
  if (pid == 0) child(spec.executable.c_str(), argv.data(), envp.data(), out.w, err.w, status.w, parent, hb[1]);

  ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
  pid_ = pid;
  running_ = true;
  close_fd(out.w);
  close_fd(err.w);
  close_fd(status.w);
  close_fd(hb[1]);
  // The status pipe is closed by a successful execve (O_CLOEXEC) or carries errno.
  int child_errno = 0;
  ssize_t n;
  do n = ::read(status.r, &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    running_ = false;
    pid_ = -1;
    throw LaunchError("cannot start " + spec.executable + ": " + std::strerror(child_errno));
  }
  for (int* fd : {&out.r, &err.r}) ::fcntl(*fd, F_SETFL, ::fcntl(*fd, F_GETFL) | O_NONBLOCK);
  if (hb[0] >= 0) ::fcntl(hb[0], F_SETFL, ::fcntl(hb[0], F_GETFL) | O_NONBLOCK);
  out_fd_ = out.r;
  err_fd_ = err.r;
  hb_fd_ = hb[0];
  out.r = err.r = hb[0] = -1;  // owned by this object now
}

WorkerProcess::~WorkerProcess() {
  if (running_ && pid_ > 0) {
    signal_group(SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  close_stdout();
  close_stderr();
  close_heartbeat();
}

void WorkerProcess::close_stdout() { close_fd(out_fd_); }
void WorkerProcess::close_heartbeat() { close_fd(hb_fd_); }
void WorkerProcess::close_stderr() { close_fd(err_fd_); }

bool WorkerProcess::try_reap() {
  if (!running_) return true;
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  running_ = false;
  if (r < 0) {  // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is unknown
    exit_.exited = false;
    exit_.signal = 0;
    return true;
  }
  if (WIFEXITED(st)) {
    exit_.exited = true;
    exit_.code = WEXITSTATUS(st);
  } else {
    exit_.exited = false;
    exit_.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  }
  return true;
}

bool WorkerProcess::signal_group(int sig) const {
  if (pid_ <= 0) return false;
  return ::kill(-pid_, sig) == 0;
}

}  // namespace ulysses::launch
