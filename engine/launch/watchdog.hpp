// The launcher's start-up and progress watchdog, as a pure function of what the launcher
// knows about each rank (its heartbeats, its output, its CPU time, its process state), so
// the rules can be tested without processes. Deadlines come from parallel.timeout_s, the
// timeout every collective and the rendezvous already use:
//   - frozen: a rank that sent no heartbeat for timeout_s (SIGSTOP, swapped out, a
//     debugger: every thread stops, so the heartbeat thread does too), or whose process
//     has been stopped (state T/t) that long;
//   - stalled: a rank whose phase (start-up, rendezvous, model build, step k, save, final
//     barrier) has not changed and which used no CPU for timeout_s + slack_s (a rank that
//     computes is making progress, however long its step; one blocked on a peer is not);
//     a rank that never beat gets timeout_s + start_slack_s (loading its libraries).
// When a rank is frozen, it is named (the longest silent first). When ranks are stalled,
// the rank the others wait for is named: the least advanced running rank (phase, then
// step); among equals, one still using CPU (the others block on it), then in rendezvous
// the lowest rank (rank 0 hosts the store), else the one silent the longest in its log.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "heartbeat.hpp"

namespace ulysses::launch {

struct RankLiveness {
  int rank = 0;
  bool running = true;        // not exited yet
  bool beating = false;       // sent at least one heartbeat
  Beat beat;                  // last phase reported (Launched before the first beat)
  double since_phase_s = 0;   // since the phase or step last changed (since spawn at first)
  double since_beat_s = 0;    // since the last heartbeat (since spawn when none yet)
  double since_cpu_s = 0;     // since the process last used CPU
  double since_output_s = 0;  // since its last log line
  double stopped_s = 0;       // how long its process has been seen stopped (state T/t), else 0
};

struct WatchdogLimits {
  double timeout_s = 120;     // parallel.timeout_s
  double slack_s = 2;         // after timeout_s: the rank's own timeout errors come first
  double start_slack_s = 10;  // extra before the first heartbeat (loading libtorch)
};

struct WatchdogVerdict {
  int rank = 0;
  Beat beat;
  std::string what;  // "stopped making progress in step 3: ..." (without "rank N ")
};

std::optional<WatchdogVerdict> check_watchdog(const std::vector<RankLiveness>& ranks, const WatchdogLimits& limits);

// Among running ranks: the frozen one silent the longest, else the least advanced (ties as
// above). Used to blame when the other ranks already exited with a timeout. -1 when none run.
int least_progressing_rank(const std::vector<RankLiveness>& ranks);

}  // namespace ulysses::launch
