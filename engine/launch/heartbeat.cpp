// Worker side of the heartbeat pipe and its line format (see heartbeat.hpp).
#include "heartbeat.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace ulysses::launch {

namespace {
constexpr const char* kNames[] = {"launched", "init", "rendezvous", "build", "step", "save", "finish"};
constexpr int kPhases = sizeof kNames / sizeof kNames[0];

bool parse_int64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  bool neg = false;
  size_t i = 0;
  if (s[0] == '-') {
    neg = true;
    i = 1;
    if (s.size() == 1) return false;
  }
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');  // at most 18 digits after a sign: no overflow
  }
  *out = neg ? -v : v;
  return true;
}
}  // namespace

std::string phase_name(Phase p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < kPhases ? kNames[i] : "unknown";
}

std::optional<Phase> phase_from_name(std::string_view s) {
  for (int i = 0; i < kPhases; ++i)
    if (s == kNames[i]) return static_cast<Phase>(i);
  return std::nullopt;
}

std::string describe_phase(Phase p, int64_t step) {
  switch (p) {
    case Phase::Launched:
      return "start-up (loading the worker, no heartbeat yet)";
    case Phase::Init:
      return "start-up (reading the config)";
    case Phase::Rendezvous:
      return "rendezvous";
    case Phase::Build:
      return "model build";
    case Phase::Step:
      return "step " + std::to_string(step);
    case Phase::Save:
      return step >= 0 ? "checkpoint save after step " + std::to_string(step) : "checkpoint save";
    case Phase::Finish:
      return "the final barrier";
  }
  return "an unknown phase";
}

std::string format_beat(const Beat& b) {
  const bool has_step = b.phase == Phase::Step || b.phase == Phase::Save;
  return "HB " + phase_name(b.phase) + " " + std::to_string(has_step ? b.step : -1);
}

std::optional<Beat> parse_beat(std::string_view line) {
  if (line.size() > 64 || line.substr(0, 3) != "HB ") return std::nullopt;
  line.remove_prefix(3);
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  const auto phase = phase_from_name(line.substr(0, sp));
  if (!phase || *phase == Phase::Launched) return std::nullopt;
  int64_t step = 0;
  if (!parse_int64(line.substr(sp + 1), &step)) return std::nullopt;
  if (*phase == Phase::Step ? step < 0 : *phase == Phase::Save ? step < -1 : step != -1) return std::nullopt;
  return Beat{*phase, step};
}

bool less_advanced(const Beat& a, const Beat& b) {
  // Training: step s, then the checkpoint saved after step s, then step s + 1. A save whose
  // step is unknown (-1) comes after every step.
  auto training = [](const Beat& x) { return x.phase == Phase::Step || x.phase == Phase::Save; };
  if (training(a) && training(b)) {
    auto key = [](const Beat& x) {
      const int64_t s = x.phase == Phase::Save && x.step < 0 ? INT64_MAX : x.step;
      return std::pair<int64_t, int>{s, x.phase == Phase::Save ? 1 : 0};
    };
    return key(a) < key(b);
  }
  return static_cast<int>(a.phase) < static_cast<int>(b.phase);
}

bool fault_matches(const std::string& spec, int rank, const Beat& b, std::string* action) {
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    const size_t c1 = item.find(':'), c2 = item.rfind(':');
    if (c1 == std::string::npos || c2 == c1) continue;
    int64_t r = 0;
    if (!parse_int64(item.substr(0, c1), &r) || r != rank) continue;
    std::string phase = item.substr(c1 + 1, c2 - c1 - 1);
    int64_t step = -1;
    if (const size_t at = phase.find('@'); at != std::string::npos) {
      if (!parse_int64(phase.substr(at + 1), &step)) continue;
      phase.resize(at);
    }
    const auto p = phase_from_name(phase);
    if (!p || *p != b.phase) continue;
    if ((*p == Phase::Step || *p == Phase::Save) && step >= 0 && step != b.step) continue;
    *action = item.substr(c2 + 1);
    return true;
  }
  return false;
}

int Heartbeat::fd_from_environment() {
  const char* v = std::getenv("ULYSSES_HEARTBEAT_FD");
  int64_t fd = -1;
  if (!v || !parse_int64(v, &fd) || fd < 0 || fd > 1 << 20) return -1;
  struct stat st {};
  if (::fstat(static_cast<int>(fd), &st) != 0) return -1;  // not open: started by hand
  if (!S_ISSOCK(st.st_mode) && !S_ISFIFO(st.st_mode)) return -1;
  return static_cast<int>(fd);
}

Heartbeat::Heartbeat(int fd, double interval_s) : fd_(fd), interval_s_(interval_s > 0 ? interval_s : 0.5) {
  if (fd_ < 0) return;
  ::fcntl(fd_, F_SETFD, FD_CLOEXEC);  // not inherited by anything the worker starts
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  beat();
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  if (fd_ >= 0) ::close(fd_);
}

void Heartbeat::beat() {
  if (fd_ < 0) return;
  const std::string line = format_beat(Beat{static_cast<Phase>(phase_.load()), step_.load()}) + "\n";
  // The launcher hands a socket (socketpair): MSG_NOSIGNAL, so a launcher that is gone
  // raises no SIGPIPE; EAGAIN (nobody reads) drops the beat. A pipe also works.
  ssize_t n;
  do n = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ENOTSOCK) {
    // A pipe: block SIGPIPE for this thread around the write.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    do n = ::write(fd_, line.data(), line.size());
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EPIPE) {
      siginfo_t info;
      const timespec zero{0, 0};
      (void)sigtimedwait(&block, &info, &zero);  // consume the pending SIGPIPE
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto every = std::chrono::duration<double>(interval_s_);
  while (!quit_) {
    if (cv_.wait_for(lock, every, [this] { return quit_; })) break;
    beat();  // under mu_: never interleaved with a beat from set()
  }
}

void Heartbeat::set(Phase p, int64_t step) {
  // A save keeps its step too (the checkpoint after step s): stored as -1, the launcher read
  // "checkpoint save" without its step and ULYSSES_FAULT=R:save@S:... never fired.
  const int64_t kept = p == Phase::Step || p == Phase::Save ? step : -1;
  phase_.store(static_cast<int>(p));
  step_.store(kept);
  {
    // beat() from this thread too, at once: the launcher sees each phase change.
    std::lock_guard<std::mutex> lock(mu_);
    beat();
  }
  const char* spec = std::getenv("ULYSSES_FAULT");
  const char* rank_s = std::getenv("RANK");
  int64_t rank = 0;
  if (!spec || !*spec || !rank_s || !parse_int64(rank_s, &rank)) return;
  std::string action;
  if (!fault_matches(spec, static_cast<int>(rank), Beat{p, kept}, &action)) return;
  std::cerr << "ulysses fault hook (ULYSSES_FAULT): rank " << rank << " " << action << " in " << describe_phase(p, step)
            << std::endl;
  if (action == "stop") {
    ::raise(SIGSTOP);
  } else if (action == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  } else if (action == "exit") {
    std::_Exit(1);
  }
}

}  // namespace ulysses::launch
