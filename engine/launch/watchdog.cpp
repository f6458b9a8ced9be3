// The watchdog's rules (see watchdog.hpp).
#include "watchdog.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ulysses::launch {

namespace {

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// Silence that counts as frozen: no beat (or a stopped process) for this long.
bool frozen(const RankLiveness& r, const WatchdogLimits& l, double* silent) {
  if (!r.running) return false;
  if (r.stopped_s >= l.timeout_s) {
    *silent = r.stopped_s;
    return true;
  }
  // After the final barrier's beat the worker tears down and exits: its heartbeat thread ends
  // before the process does, and under load that takes over 2 s (enough to fail healthy runs
  // at timeout_s 1 and 2 "in the final barrier"). Only a stopped process is frozen there; a hang
  // in that barrier is a stall (no CPU use for T + 2 s).
  if (r.beating && r.beat.phase != Phase::Finish && r.since_beat_s >= l.timeout_s) {
    *silent = r.since_beat_s;
    return true;
  }
  return false;
}

double deadline_s(const RankLiveness& r, const WatchdogLimits& l) {
  return l.timeout_s + (r.beating ? l.slack_s : l.start_slack_s);
}

bool stalled(const RankLiveness& r, const WatchdogLimits& l) {
  return r.running && std::min(r.since_phase_s, r.since_cpu_s) >= deadline_s(r, l);
}

// a before b when a is the better culprit among equally advanced ranks
bool better_culprit(const RankLiveness& a, const RankLiveness& b) {
  if (less_advanced(a.beat, b.beat)) return true;
  if (less_advanced(b.beat, a.beat)) return false;
  const bool a_cpu = a.since_cpu_s < 1.0, b_cpu = b.since_cpu_s < 1.0;
  if (a_cpu != b_cpu) return a_cpu;
  // Everyone in rendezvous and nobody timed out: rank 0 hosts the store the others wait on.
  if (a.beat.phase == Phase::Rendezvous) return a.rank < b.rank;
  if (a.since_output_s != b.since_output_s) return a.since_output_s > b.since_output_s;
  return a.rank < b.rank;
}

const RankLiveness* most_frozen(const std::vector<RankLiveness>& ranks, const WatchdogLimits& l, double* silent_out) {
  const RankLiveness* pick = nullptr;
  double best = -1;
  for (const auto& r : ranks) {
    double s = 0;
    if (frozen(r, l, &s) && s > best) {
      best = s;
      pick = &r;
    }
  }
  if (pick) *silent_out = best;
  return pick;
}

}  // namespace

int least_progressing_rank(const std::vector<RankLiveness>& ranks) {
  // "frozen" here without waiting for the deadline: the others already gave up on it.
  const RankLiveness* pick = nullptr;
  for (const auto& r : ranks) {
    if (!r.running) continue;
    const bool f = r.stopped_s > 0 || (r.beating && r.since_beat_s >= 2.0);
    const bool pf = pick && (pick->stopped_s > 0 || (pick->beating && pick->since_beat_s >= 2.0));
    if (!pick || (f && !pf) || (f == pf && better_culprit(r, *pick))) pick = &r;
  }
  return pick ? pick->rank : -1;
}

std::optional<WatchdogVerdict> check_watchdog(const std::vector<RankLiveness>& ranks, const WatchdogLimits& l) {
  double silent = 0;
  if (const RankLiveness* f = most_frozen(ranks, l, &silent)) {
    WatchdogVerdict v;
    v.rank = f->rank;
    v.beat = f->beat;
    v.what = "stopped making progress in " + describe_phase(f->beat.phase, f->beat.step) + ": " +
             (f->stopped_s > 0 ? "its process is stopped (SIGSTOP or a debugger) and " : std::string()) +
             "it sent no heartbeat for " + secs(silent) + " (parallel.timeout_s is " + secs(l.timeout_s) + ")";
    return v;
  }
  const RankLiveness* first_stalled = nullptr;
  for (const auto& r : ranks)
    if (stalled(r, l) && (!first_stalled || std::min(r.since_phase_s, r.since_cpu_s) >
                                                std::min(first_stalled->since_phase_s, first_stalled->since_cpu_s)))
      first_stalled = &r;
  if (!first_stalled) return std::nullopt;
  const RankLiveness* culprit = nullptr;
  for (const auto& r : ranks)
    if (r.running && (!culprit || better_culprit(r, *culprit))) culprit = &r;
  WatchdogVerdict v;
  v.rank = culprit->rank;
  v.beat = culprit->beat;
  const double quiet = std::min(culprit->since_phase_s, culprit->since_cpu_s);
  std::string waiting;
  int n_waiting = 0;
  for (const auto& r : ranks)
    if (r.running && r.rank != culprit->rank && n_waiting++ < 8)
      waiting += (waiting.empty() ? "" : ", ") + std::to_string(r.rank) + " (" +
                 describe_phase(r.beat.phase, r.beat.step) + ")";
  v.what = "stopped making progress in " + describe_phase(culprit->beat.phase, culprit->beat.step) + ": " +
           (culprit->beating ? "no new phase and no CPU use for " + secs(quiet)
                             : "no heartbeat since it was started " + secs(culprit->since_beat_s) + " ago") +
           " (deadline: parallel.timeout_s " + secs(l.timeout_s) + " + " +
           secs(culprit->beating ? l.slack_s : l.start_slack_s) + ")" +
           (waiting.empty() ? std::string()
                            : "; waiting for it: rank" + std::string(n_waiting > 1 ? "s " : " ") + waiting +
                                  (n_waiting > 8 ? ", ..." : ""));
  return v;
}

}  // namespace ulysses::launch
