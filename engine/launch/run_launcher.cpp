// The local multi-process run: spawn, multiplex, monitor, stop (see run_launcher.hpp).
#include "run_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "folder_claim.hpp"
#include "free_port.hpp"
#include "heartbeat.hpp"
#include "launch_error.hpp"
#include "line_splitter.hpp"
#include "run_identity.hpp"
#include "store_probe.hpp"
#include "watchdog.hpp"
#include "worker_process.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::launch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool run_dir_in_use(const std::string& run_dir) {
  std::error_code ec;
  return fs::exists(run_layout::run_record(run_dir), ec);
}

namespace {

// The write probe of probe_writable_dir: kProbePrefix + its pid, removed at once.
constexpr const char* kProbePrefix = ".ulysses-write-probe-";
std::string own_probe_name() { return kProbePrefix + std::to_string(::getpid()); }

bool pid_alive(int64_t pid) {
  return pid > 0 && pid <= INT32_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// Another process's live claim on `dir` (folder_claim.hpp): a launcher setting it up or
// running there. Its pid is 0 while its owner record is not written yet.
std::optional<OwnerRecord> launcher_setting_up(const fs::path& dir) { return live_owner(dir.string()); }

std::string claimed_by(const OwnerRecord& o) {
  return o.pid > 0 ? " (pid " + std::to_string(o.pid) + ")" : " (its owner record is not written yet)";
}

}  // namespace

bool run_record_launcher_alive(const RunRecord& r) { return r.status == RunStatus::Running && pid_alive(r.pid); }

std::string live_run_within(const std::string& dir) {
  std::error_code ec;
  size_t seen = 0;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && seen < 100000; it.increment(ec), ++seen) {
    if (it.depth() >= 4) it.disable_recursion_pending();  // run folders sit near the top (runs/NAME)
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    const fs::path d = it->path();
    if (const auto o = launcher_setting_up(d))
      return d.string() + " is being set up or run by another ulysses-run" + claimed_by(*o);
    if (!fs::exists(run_layout::run_record(d), ec)) continue;
    try {
      const RunRecord r = read_run_record(run_layout::run_record(d).string());
      if (run_record_launcher_alive(r))
        return d.string() + " holds a run that is still going (ulysses-run pid " + std::to_string(r.pid) + ")";
    } catch (const std::exception&) {
    }
  }
  return "";
}

RunDirInfo inspect_run_dir(const std::string& run_dir) {
  RunDirInfo info;
  std::error_code ec;
  const fs::path dir(run_dir);
  const auto st = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(st)) return info;  // Absent
  if (!fs::is_directory(fs::status(dir, ec))) {
    info.state = RunDirState::NotADirectory;
    info.detail = run_dir + " exists and is not a directory";
    return info;
  }
  if (const auto o = launcher_setting_up(dir)) {  // another launcher's claim: it sets up or runs there
    info.state = RunDirState::LiveRun;
    info.detail = run_dir + " is being set up or run by another ulysses-run" + claimed_by(*o);
    return info;
  }
  size_t entries = 0;
  std::string first;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_claim_file(it->path().filename().string())) continue;
    if (entries++ == 0) first = it->path().filename().string();
  }
  if (ec) {
    info.state = RunDirState::Foreign;
    info.detail = "cannot list " + run_dir + ": " + ec.message();
    return info;
  }
  if (entries == 0) {
    info.state = RunDirState::Empty;
    return info;
  }
  if (fs::exists(run_layout::run_record(dir), ec)) {
    try {
      const RunRecord r = read_run_record(run_layout::run_record(dir).string());
      if (run_record_launcher_alive(r)) {
        info.state = RunDirState::LiveRun;
        info.detail = run_dir + " holds a run that is still going (ulysses-run pid " + std::to_string(r.pid) + ")";
        return info;
      }
      info.state = RunDirState::OldRun;
      info.detail =
          run_dir + "/run.json exists: that directory already holds a run (status " + to_string(r.status) + ")";
      return info;
    } catch (const std::exception&) {
      // not one of our records: fall through, the folder is someone else's
    }
  }
  info.state = RunDirState::Foreign;
  info.detail = run_dir + " is not empty (" + std::to_string(entries) + " entries, e.g. " + first +
                ") and is not a run directory of ulysses-run";
  return info;
}

std::string move_run_dir_aside(const std::string& run_dir) {
  fs::path dir = fs::absolute(fs::path(run_dir)).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "runs/x/" -> "runs/x"
  const std::string base = dir.string() + ".old-" + compact_local_timestamp(std::chrono::system_clock::now());
  std::error_code ec;
  for (int i = 0; i < 1000; ++i) {
    const std::string target = i == 0 ? base : base + "-" + std::to_string(i);
    if (fs::exists(fs::symlink_status(target, ec))) continue;
    if (::rename(dir.c_str(), target.c_str()) == 0) return target;
    throw LaunchError("cannot move " + dir.string() + " aside to " + target + ": " + std::strerror(errno));
  }
  throw LaunchError("cannot move " + dir.string() + " aside: too many " + base + "* directories");
}

namespace {
std::string probe_dir(const std::string& dir, bool keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create directory " + dir + ": " + ec.message();
  if (!fs::is_directory(dir, ec)) return dir + " is not a directory";
  const fs::path probe = fs::path(dir) / own_probe_name();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write in " + dir + ": " + std::strerror(errno);
  const char byte = 'x';
  const bool ok = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!keep || !ok) ::unlink(probe.c_str());
  if (!ok) return "cannot write in " + dir + ": " + std::strerror(err);
  return {};
}
}  // namespace

std::string probe_writable_dir(const std::string& dir) { return probe_dir(dir, false); }

RunConfig with_absolute_paths(RunConfig cfg) {
  for (std::string* p : {&cfg.data.path, &cfg.train.init_from, &cfg.train.save_to, &cfg.train.resume_from}) {
    if (p->empty()) continue;
    std::error_code ec;
    const fs::path a = fs::absolute(*p, ec);
    if (!ec) *p = a.lexically_normal().string();
  }
  return cfg;
}

namespace {

struct Rank {
  int rank = 0;
  std::unique_ptr<WorkerProcess> proc;
  LineSplitter out, err;
  std::ofstream log;
  std::deque<std::string> tail;
  bool log_failed = false;
  uint64_t first_eof = UINT64_MAX;               // order in which the ranks' output streams ended
  Clock::time_point last_output = Clock::now();  // when the rank last wrote a line
  // Liveness (heartbeat.hpp, watchdog.hpp).
  LineSplitter hb;
  Beat beat;  // last phase reported; Launched before the first beat
  bool beating = false;
  bool responsive = true;  // as last reported through on_liveness
  Clock::time_point spawned = Clock::now();
  Clock::time_point phase_since = Clock::now();
  Clock::time_point last_beat = Clock::now();
  uint64_t cpu_ticks = 0;                      // utime + stime of the worker, last read
  Clock::time_point cpu_since = Clock::now();  // when cpu_ticks last grew
  Clock::time_point stopped_since{};           // when its process was first seen stopped, or {}
};

struct ProcStat {
  char state = 0;          // 'R', 'S', 'T' stopped, 't' traced, 'Z', or 0 when unreadable
  uint64_t cpu_ticks = 0;  // utime + stime, every thread
};

// /proc/PID/stat: the state letter and the CPU time used so far.
ProcStat process_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  ProcStat ps;
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return ps;
  ps.state = stat[close_paren + 2];
  // Fields after the state: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
  // cmajflt utime stime (utime is the 11th after the state).
  std::istringstream rest(stat.substr(close_paren + 3));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 0; i < 12 && rest >> field; ++i) {
    if (i == 10) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 11) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  ps.cpu_ticks = utime + stime;
  return ps;
}

char process_state(pid_t pid) { return process_stat(pid).state; }

// Large worlds need more descriptors than the usual soft limit of 1024.
void raise_fd_limit(rlim_t need) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= need) return;
  lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? need : std::min(need, lim.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// State of one launch_run call: the ranks, their output, and the outcome so far.
class Session {
 public:
  Session(const LaunchOptions& opt, const LaunchCallbacks& cb, std::vector<Rank>& ranks, LaunchResult& res)
      : opt_(opt), cb_(cb), ranks_(ranks), res_(res) {}

  // Waits up to timeout for output, reads what is there and dispatches complete lines.
  // Returns false when no pipe is open any more.
  bool pump(double timeout_s) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, Stream>> who;
    for (auto& r : ranks_) {
      if (!r.proc) continue;
      if (r.proc->stdout_fd() >= 0) {
        fds.push_back({r.proc->stdout_fd(), POLLIN, 0});
        who.emplace_back(r.rank, Stream::Stdout);
      }
      if (r.proc->stderr_fd() >= 0) {
        fds.push_back({r.proc->stderr_fd(), POLLIN, 0});
        who.emplace_back(r.rank, Stream::Stderr);
      }
      if (r.proc->heartbeat_fd() >= 0) {
        fds.push_back({r.proc->heartbeat_fd(), POLLIN, 0});
        who.emplace_back(r.rank, kHeartbeat);
      }
    }
    const int ms = static_cast<int>(timeout_s * 1000);
    if (static_cast<std::ptrdiff_t>(fds.size()) ==
        std::count_if(who.begin(), who.end(), [](const auto& w) { return w.second == kHeartbeat; })) {
      // only heartbeats left (output closed): not a reason to keep pumping at the end
      if (!fds.empty()) {
        if (::poll(fds.data(), fds.size(), ms) > 0)
          for (size_t i = 0; i < fds.size(); ++i)
            if (fds[i].revents) drain_heartbeat(ranks_[who[i].first]);
        return false;
      }
      if (ms > 0) ::poll(nullptr, 0, ms);
      return false;
    }
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n <= 0) return true;  // timeout or EINTR (a signal: the caller checks for a stop)
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (who[i].second == kHeartbeat)
        drain_heartbeat(ranks_[who[i].first]);
      else
        drain_fd(ranks_[who[i].first], who[i].second);
    }
    return true;
  }

  static constexpr Stream kHeartbeat = static_cast<Stream>(2);

  // Reads heartbeat lines; anything that is not a beat is ignored (bounded per call).
  void drain_heartbeat(Rank& r) {
    const int fd = r.proc->heartbeat_fd();
    char buf[4096];
    for (int round = 0; round < 16; ++round) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        for (auto& line : r.hb.feed(std::string_view(buf, static_cast<size_t>(n))))
          if (auto b = parse_beat(line)) on_beat(r, *b);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      r.proc->close_heartbeat();  // end of stream: the worker closed it or exited
      return;
    }
  }

  void on_beat(Rank& r, const Beat& b) {
    const auto now = Clock::now();
    r.last_beat = now;
    const bool changed = !r.beating || b.phase != r.beat.phase || b.step != r.beat.step;
    r.beating = true;
    if (changed) {
      r.beat = b;
      r.phase_since = now;
    }
    if (changed || !r.responsive) {
      r.responsive = true;
      if (cb_.on_liveness) cb_.on_liveness(r.rank, r.beat, true, 0.0);
    }
  }

  // Reads one pipe until it would block (bounded, so one chatty rank cannot starve the
  // others); at end of stream flushes the partial line and closes the pipe.
  void drain_fd(Rank& r, Stream s) {
    const int fd = s == Stream::Stdout ? r.proc->stdout_fd() : r.proc->stderr_fd();
    LineSplitter& split = s == Stream::Stdout ? r.out : r.err;
    char buf[16384];
    for (int round = 0; round < 16; ++round) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        for (auto& line : split.feed(std::string_view(buf, static_cast<size_t>(n)))) dispatch(r, s, line);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EOF or a read error: the stream is over.
      if (r.first_eof == UINT64_MAX) r.first_eof = ++eof_counter_;
      if (auto rest = split.finish()) dispatch(r, s, *rest);
      if (s == Stream::Stdout)
        r.proc->close_stdout();
      else
        r.proc->close_stderr();
      return;
    }
  }

  void dispatch(Rank& r, Stream s, const std::string& line) {
    r.last_output = Clock::now();
    r.log << line << '\n';
    r.log.flush();
    if (!r.log && !r.log_failed) {
      r.log_failed = true;
      if (cb_.on_warning)
        cb_.on_warning("cannot write logs/rank" + std::to_string(r.rank) +
                       ".log (disk full or a file-size limit?); rank " + std::to_string(r.rank) +
                       "'s lines from here on are only shown, not kept");
    }
    r.tail.push_back(line);
    while (r.tail.size() > opt_.tail_lines) r.tail.pop_front();
    if (r.rank == 0 && s == Stream::Stdout) {
      if (auto m = parse_metric_line(line)) {
        res_.last_metric = *m;
        if (cb_.on_metric) cb_.on_metric(*m);
        return;
      }
    }
    if (cb_.on_line) cb_.on_line(r.rank, s, line);
  }

  // Reaps exited workers and, at the first failure, names the rank to blame: the one that
  // stopped making progress, which is not always the first to exit. In order:
  //   1. a rank killed by a signal (nobody here sent one yet): it died, the others noticed;
  //      (1 and 2 are decided at once, without waiting for the other ranks' timeouts)
  //   2. a rank still "running" but stopped (SIGSTOP, state T) or traced: the others timed
  //      out waiting for it and exited first;
  //   3. when the first rank to fail reports a timeout: the rank left running (after waiting
  //      for the others' timeouts), else the running rank silent the longest;
  //   4. the failed rank whose output ended first (several found dead in one pass: the
  //      others noticed the failure and quit at once).
  //   The decision waits kSettleS after the first failure is seen: a killed rank's sockets
  //   close before it becomes reapable, so its peers can be found dead before it.
  void reap() {
    for (auto& r : ranks_) {
      if (!r.proc || !r.proc->running()) continue;
      if (!r.proc->try_reap()) continue;
      if (!r.proc->exit_info().success()) failed_.push_back(&r);
    }
    if (failed_.empty() || stopping_ || failed_rank_) return;
    if (settle_start_ == Clock::time_point{}) settle_start_ = Clock::now();
    if (seconds_since(settle_start_) < kSettleS && any_running()) return;
    const std::vector<Rank*>& failed = failed_;
    auto earlier = [](const Rank* a, const Rank* b) { return a->first_eof < b->first_eof; };
    Rank* killed = nullptr;
    for (Rank* r : failed)
      if (!r->proc->exit_info().exited && r->proc->exit_info().signal != 0 && (!killed || earlier(r, killed)))
        killed = r;
    if (killed) {
      blame(*killed, killed->proc->exit_info().describe() + where(*killed));
      return;
    }
    Rank* first = *std::min_element(failed.begin(), failed.end(), earlier);
    for (auto& r : ranks_) {
      if (!r.proc || !r.proc->running()) continue;
      const char st = process_state(r.proc->pid());
      if (st == 'T' || st == 't') {
        const double quiet = seconds_since(r.last_output);
        blame(r, "stopped making progress" + where(r) + ": its process is " +
                     (st == 'T' ? "stopped (SIGSTOP)" : "held by a tracer") + " and wrote nothing for " +
                     std::to_string(static_cast<int64_t>(quiet)) + " s; rank " + std::to_string(first->rank) + " " +
                     first->proc->exit_info().describe() + " waiting for it");
        stop_stuck(r);
        return;
      }
    }
    // No rank died or stopped. The first rank to fail timed out in a collective: the healthy ones blocked in it time
    // out (or see their peers vanish) too, within about one timeout. Wait, at most
    // min(timeout_s, 10 s), until only the rank that kept them waiting is left running.
    auto earliest_eof = [](const Rank* a, const Rank* b) { return a->first_eof < b->first_eof; };
    const bool timed_out = mentions_timeout((*std::min_element(failed.begin(), failed.end(), earliest_eof))->tail);
    if (timed_out && running_count() > 1 &&
        seconds_since(settle_start_) < std::min(opt_.config.parallel.timeout_s, 10.0) + kSettleS)
      return;
    // Every failed rank reports a timeout (a collective waited for someone): the one that
    // kept them waiting is a rank still running, the one silent the longest.
    Rank* silent = nullptr;
    if (timed_out) {
      const int pick = least_progressing_rank(liveness());
      if (pick >= 0) silent = &ranks_[static_cast<size_t>(pick)];
    }
    if (silent) {
      blame(*silent, "stopped making progress" + where(*silent) + ": still running but silent for " +
                         std::to_string(static_cast<int64_t>(seconds_since(silent->last_output))) + " s while rank " +
                         std::to_string(first->rank) + " " + first->proc->exit_info().describe() + " after a timeout");
      stop_stuck(*silent);
      return;
    }
    blame(*first, first->proc->exit_info().describe() + where(*first));
  }

  // What the watchdog knows of each rank now.
  std::vector<RankLiveness> liveness() const {
    const auto now = Clock::now();
    auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
    std::vector<RankLiveness> out;
    for (const auto& r : ranks_) {
      RankLiveness l;
      l.rank = r.rank;
      l.running = r.proc && r.proc->running();
      l.beating = r.beating;
      l.beat = r.beat;
      l.since_phase_s = since(r.phase_since);
      l.since_beat_s = since(r.beating ? r.last_beat : r.spawned);
      l.since_cpu_s = since(r.cpu_since);
      l.since_output_s = since(r.last_output);
      l.stopped_s = r.stopped_since == Clock::time_point{} ? 0.0 : std::max(1e-3, since(r.stopped_since));
      out.push_back(l);
    }
    return out;
  }

  // Reads each running worker's state and CPU time (a few times a second), reports ranks
  // that went quiet, and when a deadline passed blames the rank that stopped progressing.
  void watchdog() {
    if (seconds_since(last_watch_) < 0.2) return;
    // Beats that came while this process was not scheduled (a loaded machine) are read before
    // any silence is judged: a late launcher is no silent rank.
    pump(0);
    last_watch_ = Clock::now();
    const double timeout_s = opt_.config.parallel.timeout_s;
    const double quiet_report_s = std::min(5.0, std::max(1.0, timeout_s / 2));
    for (auto& r : ranks_) {
      if (!r.proc || !r.proc->running()) continue;
      const ProcStat ps = process_stat(r.proc->pid());
      // More than ~2% of one core since the last change counts as computing.
      const double window = seconds_since(r.cpu_since);
      static const double ticks_per_s = std::max(1L, ::sysconf(_SC_CLK_TCK));
      if (ps.cpu_ticks > r.cpu_ticks + std::max<uint64_t>(1, static_cast<uint64_t>(window * ticks_per_s * 0.02))) {
        r.cpu_ticks = ps.cpu_ticks;
        r.cpu_since = last_watch_;
      } else if (ps.cpu_ticks < r.cpu_ticks) {
        r.cpu_ticks = ps.cpu_ticks;
      }
      const bool stopped = ps.state == 'T' || ps.state == 't';
      if (!stopped)
        r.stopped_since = {};
      else if (r.stopped_since == Clock::time_point{})
        r.stopped_since = last_watch_;
      const double silent = seconds_since(r.beating ? r.last_beat : r.spawned);
      if (r.responsive && (r.beating || stopped) &&
          (silent >= quiet_report_s || (stopped && seconds_since(r.stopped_since) >= quiet_report_s))) {
        r.responsive = false;
        if (cb_.on_liveness) cb_.on_liveness(r.rank, r.beat, false, silent);
      }
    }
    if (!opt_.watchdog || failed_rank_ || stopping_) return;
    WatchdogLimits lim;
    lim.timeout_s = timeout_s;
    const auto v = check_watchdog(liveness(), lim);
    if (!v) return;
    Rank& r = ranks_[static_cast<size_t>(v->rank)];
    blame(r, v->what);
    watchdog_fired_ = true;
    stop_stuck(r);
  }

  // The named rank is stuck: nothing to wait for, SIGKILL it now; the others get SIGTERM
  // twice (see terminate_step), as they are likely blocked waiting for it.
  void stop_stuck(Rank& r) {
    r.proc->signal_group(SIGKILL);
    stuck_culprit_ = true;
  }

  std::string where(const Rank& r) const {
    return r.beating ? " in " + describe_phase(r.beat.phase, r.beat.step) : std::string();
  }

  static bool mentions_timeout(const std::deque<std::string>& tail) {
    for (const auto& line : tail) {
      std::string l = line;
      std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (l.find("timed out") != std::string::npos || l.find("timeout") != std::string::npos) return true;
    }
    return false;
  }

  void blame(Rank& r, const std::string& what) {
    failed_rank_ = r.rank;
    failure_ = "rank " + std::to_string(r.rank) + " " + what;
  }

  int running_count() const {
    int n = 0;
    for (auto& r : ranks_) n += r.proc && r.proc->running();
    return n;
  }

  bool any_running() const {
    for (auto& r : ranks_)
      if (r.proc && r.proc->running()) return true;
    return false;
  }

  // SIGTERM to every running worker's group once, SIGKILL after the grace period.
  void terminate_step() {
    if (!term_sent_) {
      for (auto& r : ranks_)
        if (r.proc && r.proc->running()) {
          r.proc->signal_group(SIGTERM);
          r.proc->signal_group(SIGCONT);  // a stopped rank acts on SIGTERM only once continued
        }
      term_sent_ = true;
      term_time_ = Clock::now();
    } else if (stuck_culprit_ && !second_term_sent_ && seconds_since(term_time_) >= 0.5) {
      // After a watchdog verdict the others are blocked waiting for the stuck rank; the
      // worker takes a second SIGTERM as "leave now" (its finished steps are committed).
      for (auto& r : ranks_)
        if (r.proc && r.proc->running()) r.proc->signal_group(SIGTERM);
      second_term_sent_ = true;
    } else if (!kill_sent_ && seconds_since(term_time_) >= opt_.grace_s) {
      for (auto& r : ranks_)
        if (r.proc && r.proc->running()) r.proc->signal_group(SIGKILL);
      kill_sent_ = true;
    }
  }

  void run() {
    while (any_running()) {
      pump(std::min(opt_.poll_interval_s, 0.2));
      reap();
      watchdog();
      if (!stopping_ && !failed_rank_ && cb_.stop_requested && cb_.stop_requested()) stopping_ = true;
      if (stopping_ || failed_rank_) terminate_step();
    }
    // Nothing started by a worker in its process group outlives the run; with them gone,
    // the pipes reach end of stream once what is still buffered has been read.
    for (auto& r : ranks_)
      if (r.proc) r.proc->signal_group(SIGKILL);
    const auto t = Clock::now();
    while (seconds_since(t) < 2.0 && pump(0.05)) {
    }
    for (auto& r : ranks_)
      if (r.proc) {
        r.proc->close_stdout();
        r.proc->close_stderr();
        r.proc->close_heartbeat();
      }
  }

  void stop() { stopping_ = true; }

  void fail_to_start(int rank, const std::string& why) {
    failed_rank_ = rank;
    failure_ = "rank " + std::to_string(rank) + " could not start: " + why;
    spawn_failed_ = true;
  }

  static constexpr double kSettleS = 0.3;
  std::vector<Rank*> failed_;         // ranks that exited unsuccessfully, in the order seen
  Clock::time_point settle_start_{};  // when the first of them was seen
  bool stopping_ = false;
  bool spawn_failed_ = false;
  bool watchdog_fired_ = false;  // the failure is the watchdog's verdict
  bool stuck_culprit_ = false;   // the named rank was stuck (killed at once)
  std::optional<int> failed_rank_;
  std::string failure_;

 private:
  const LaunchOptions& opt_;
  const LaunchCallbacks& cb_;
  std::vector<Rank>& ranks_;
  LaunchResult& res_;
  uint64_t eof_counter_ = 0;
  bool term_sent_ = false, kill_sent_ = false, second_term_sent_ = false;
  Clock::time_point term_time_;
  Clock::time_point last_watch_{};
};

}  // namespace

namespace {

// The run folder, refused when it holds anything or another launcher holds it, and claimed
// (folder_claim.hpp): the caller's claim (ulysses-run takes it before its checks) or, for a
// caller that took none, this one's, held until the run ends.
FolderClaim claim_for_launch(const LaunchOptions& opt, const fs::path& abs_dir) {
  const fs::path dir(opt.run_dir);
  if (run_dir_in_use(opt.run_dir))
    throw RunDirRefused(run_layout::run_record(dir).string() + " exists: " + opt.run_dir +
                        " already holds a run; pick another --out or delete that directory");
  // Never write into someone's files or append to an old metrics.jsonl.
  const RunDirInfo before = inspect_run_dir(opt.run_dir);
  if (before.state != RunDirState::Absent && before.state != RunDirState::Empty)
    throw RunDirRefused(before.detail + "; pick another --out");
  FolderClaim claim;
  ClaimAttempt a = claim_folder(opt.run_dir, OwnerRecord{abs_dir.string(), ::getpid(), "ulysses-run"});
  if (a.claim.held())
    claim = std::move(a.claim);
  else if (a.holder && a.holder->pid != ::getpid())
    throw RunDirRefused(opt.run_dir + " is being set up or run by another ulysses-run" + claimed_by(*a.holder) +
                        "; pick another --out");
  else if (!a.error.empty())
    throw LaunchError(a.error);
  return claim;
}

// The run folder's sub-folders and the rendezvous folder, which only this user can enter: a
// local run opens no network port (c10d's TCPStore listened on every interface, open to
// anyone who reached the machine). Gloo's own connections bind 127.0.0.1. Returns the
// rendezvous folder.
fs::path make_run_folders(const fs::path& dir, const fs::path& abs_dir) {
  std::error_code ec;
  for (const fs::path& d : {dir, run_layout::logs_dir(dir), run_layout::trace_dir(dir)}) {
    fs::create_directories(d, ec);
    if (ec) throw LaunchError("cannot create " + d.string() + ": " + ec.message());
  }
  const fs::path rendezvous = abs_dir / kRendezvousFolder;
  if (::mkdir(rendezvous.c_str(), 0700) != 0 && errno != EEXIST)
    throw LaunchError("cannot create " + rendezvous.string() + ": " + std::strerror(errno));
  if (::chmod(rendezvous.c_str(), 0700) != 0)
    throw LaunchError("cannot make " + rendezvous.string() + " private (chmod 0700): " + std::strerror(errno));
  return rendezvous;
}

// Rank r's worker: its arguments and environment (c10d's variables, the rendezvous folder,
// thread counts).
SpawnSpec worker_spec(const LaunchOptions& opt, int r, int64_t world, const std::string& config_path,
                      const fs::path& abs_dir, const fs::path& rendezvous, int master_port, const std::string& run_id) {
  SpawnSpec spec;
  spec.executable = opt.worker;
  spec.args = {"--config", config_path, "--out", abs_dir.string()};
  spec.env = {{"RANK", std::to_string(r)},
              {"WORLD_SIZE", std::to_string(world)},
              {"LOCAL_RANK", std::to_string(r)},
              {"LOCAL_WORLD_SIZE", std::to_string(world)},
              {"MASTER_ADDR", opt.master_addr},
              {"MASTER_PORT", std::to_string(master_port)},
              {kRendezvousDirEnv, rendezvous.string()},
              {kSaveOwnerEnv, abs_dir.string()},
              {kRunIdEnv, run_id}};  // the run's identity (run_identity.hpp): in every checkpoint file
  // Threads per rank as the worker sets them (train.threads_per_rank, else cores / ranks):
  // OpenMP and OpenBLAS pools start at that size, so P ranks never oversubscribe the cores.
  // A value the user exported is left as it is.
  const int64_t thr = opt.config.train.threads_per_rank > 0
                          ? opt.config.train.threads_per_rank
                          : std::max<int64_t>(1, int64_t(std::max(1u, std::thread::hardware_concurrency())) / world);
  for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (!std::getenv(k)) spec.env.emplace_back(k, std::to_string(thr));
  // Idle OpenMP threads sleep instead of spinning: on a machine whose other processes take
  // cores, spinning threads hold the core a descheduled peer needs (3-13x slower steps at
  // 2 threads per rank measured on a loaded 2-core VM; docs/LONG_SEQUENCES.md "CPU speed").
  if (!std::getenv("OMP_WAIT_POLICY")) spec.env.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  // train.allocator: GPU ranks' caching allocator with expandable segments (unless the user set it).
  if (opt.config.train.allocator == "expandable" && !std::getenv("PYTORCH_CUDA_ALLOC_CONF"))
    spec.env.emplace_back("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
  if (!opt.tokens_checked.empty()) spec.env.emplace_back(kTokensCheckedEnv, opt.tokens_checked);
  spec.heartbeat = true;
  return spec;
}

// The run's outcome in its record: failed (with the failed rank's own last words), stopped,
// finished, or "finished" short of train.steps (a --worker that is no ulysses-worker).
void settle_outcome(const LaunchOptions& opt, const Session& session, const std::vector<Rank>& ranks, int64_t world,
                    LaunchResult& res) {
  RunRecord& rec = res.record;
  if (session.failed_rank_) {
    const int fr = *session.failed_rank_;
    rec.status = RunStatus::Failed;
    rec.failed_rank = fr;
    rec.message = session.failure_;
    // The cause, as the rank said it (its last line that is no METRIC): otherwise run.json and
    // the studio's banner read "rank 0 exited with code 1 in step 7" while only stderr and the
    // log say "database or disk is full".
    for (auto it = ranks[fr].tail.rbegin(); it != ranks[fr].tail.rend(); ++it) {
      std::string line = *it;
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (line.empty() || parse_metric_line(line)) continue;
      const std::string prefix = "ulysses-worker (rank " + std::to_string(fr) + "): ";
      if (line.rfind(prefix, 0) == 0) line.erase(0, prefix.size());
      if (line.size() > 400) line = line.substr(0, 400) + "...";
      rec.message += ": " + line;
      break;
    }
    const bool bad_input = !session.watchdog_fired_ && ranks[fr].proc && ranks[fr].proc->exit_info().exited &&
                           ranks[fr].proc->exit_info().code == 2;
    res.exit_code = bad_input ? 2 : 1;
    res.failed_tail.assign(ranks[fr].tail.begin(), ranks[fr].tail.end());
  } else if (session.stopping_) {
    rec.status = RunStatus::Stopped;
    rec.message = "stopped on request; every worker was terminated";
    res.exit_code = 1;
  } else {
    rec.status = RunStatus::Finished;
    res.exit_code = 0;
  }
  if (res.last_metric) {
    const auto& m = res.last_metric->value;
    if (m.contains("loss") && m["loss"].is_number()) rec.final_loss = m["loss"].get<double>();
    if (m.contains("step") && m["step"].is_number_integer()) rec.steps_done = m["step"].get<int64_t>() + 1;
  }
  // A run finishes when its last step is reported: ranks that all exit 0 before that (a
  // --worker that is not ulysses-worker: "finished 0 steps", exit 0) did not finish it.
  // (rec.steps_done is the last METRIC line's step + 1; it stays 0 without one.)
  if (rec.status == RunStatus::Finished && rec.steps_done != opt.config.train.steps) {
    rec.status = RunStatus::Failed;
    rec.failed_rank = 0;
    rec.message =
        "every rank exited 0, but rank 0 reported " +
        (rec.steps_done <= 0 ? std::string("no step") : "step " + std::to_string(rec.steps_done - 1) + " last") +
        " of train.steps " + std::to_string(opt.config.train.steps) + " (is --worker " + opt.worker +
        " a ulysses-worker of this build?)";
    res.exit_code = 1;
    res.ended_short = true;
    res.failed_tail.assign(ranks[0].tail.begin(), ranks[0].tail.end());
  }
  if (rec.status == RunStatus::Finished)
    rec.message = "finished " + std::to_string(rec.steps_done) + (rec.steps_done == 1 ? " step on " : " steps on ") +
                  std::to_string(world) + (world == 1 ? " rank" : " ranks");
}

}  // namespace

LaunchResult launch_run(const LaunchOptions& opt, const LaunchCallbacks& cb) {
  const fs::path dir(opt.run_dir);
  const fs::path abs_dir = fs::absolute(dir).lexically_normal();
  FolderClaim claim = claim_for_launch(opt, abs_dir);
  const int64_t world = opt.config.parallel.world_size();
  if (world < 1) throw LaunchError("world size sp_size x dp_size must be at least 1");

  raise_fd_limit(static_cast<rlim_t>(3 * world + 64));  // two pipes and a log per rank
  LaunchResult res;
  res.master_port = find_free_port(opt.master_addr);
  // The ranks meet through a FileStore in a folder only this user can enter.
  const fs::path rendezvous = make_run_folders(dir, abs_dir);
  const std::string config_path = run_layout::config(abs_dir).string();
  write_json_file_atomic(config_path, with_absolute_paths(opt.config).to_json());
  // Test hook: hold the set-up here, between the run folder's first files and run.json (where
  // another launcher's --force could move the folder away), for this many ms.
  if (const char* ms = std::getenv("ULYSSES_TEST_SETUP_PAUSE_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(std::atoll(ms), 0LL, 60000LL)));

  std::vector<Rank> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    ranks[r].rank = r;
    const fs::path log = run_layout::rank_log(abs_dir, r);
    ranks[r].log.open(log, std::ios::trunc);
    if (!ranks[r].log) throw LaunchError("cannot write " + log.string() + ": " + std::strerror(errno));
  }

  RunRecord& rec = res.record;
  const auto wall0 = std::chrono::system_clock::now();
  const auto t0 = Clock::now();
  rec.status = RunStatus::Running;
  rec.started_at = iso8601_utc(wall0);
  rec.world_size = world;
  rec.pid = ::getpid();
  const std::string run_json = run_layout::run_record(abs_dir).string();
  write_run_record(run_json, rec);

  Session session(opt, cb, ranks, res);
  const std::string run_id = new_run_id();
  for (int r = 0; r < world; ++r) {
    // A stop asked for while the ranks start (SIGTERM, Ctrl-C) is obeyed now: starting
    // hundreds of workers takes longer than the 2 s a stop may take.
    if (cb.stop_requested && cb.stop_requested()) {
      session.stop();
      break;
    }
    SpawnSpec spec = worker_spec(opt, r, world, config_path, abs_dir, rendezvous, res.master_port, run_id);
    try {
      ranks[r].spawned = ranks[r].phase_since = ranks[r].last_beat = ranks[r].cpu_since = Clock::now();
      ranks[r].proc = std::make_unique<WorkerProcess>(spec);
      res.pids.push_back(ranks[r].proc->pid());
    } catch (const LaunchError& e) {
      session.fail_to_start(r, e.what());
      break;
    }
  }
  if (!session.spawn_failed_ && cb.on_started) cb.on_started(res.pids);
  session.run();

  settle_outcome(opt, session, ranks, world, res);
  rec.exit_code = res.exit_code;
  rec.ended_at = iso8601_utc(std::chrono::system_clock::now());
  rec.duration_s = seconds_since(t0);
  write_run_record(run_json, rec);
  return res;
}

}  // namespace ulysses::launch
