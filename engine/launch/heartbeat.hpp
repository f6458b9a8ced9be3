// Worker liveness for the launcher's watchdog (docs/CONTRACTS.md, "Heartbeat"). The
// launcher gives each worker the write end of a pipe and names it in ULYSSES_HEARTBEAT_FD;
// the worker's Heartbeat writes one line "HB <phase> <step>" there when its phase changes
// and every interval from a background thread, so the launcher can tell a rank that is
// alive but blocked (beats, no progress) from one that is frozen (no beats: SIGSTOP, swap,
// a debugger) and name the phase where either happened. Torch-free; a worker started
// without the variable gets an inert Heartbeat.
//
// Test hook (fault injection in the real worker): ULYSSES_FAULT=RANK:PHASE[@STEP]:ACTION
// makes rank RANK, on entering PHASE (at step STEP for "step"), do ACTION: "stop" raises
// SIGSTOP, "hang" blocks the calling thread forever while the heartbeat thread keeps beating,
// "exit" exits with code 1. Several hooks are separated by commas.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace ulysses::launch {

// In the order a rank goes through them; Launched is the launcher's own state for a worker
// that has not beaten yet (loading its libraries).
enum class Phase { Launched, Init, Rendezvous, Build, Step, Save, Finish };

std::string phase_name(Phase p);  // "launched", "init", "rendezvous", "build", "step", "save", "finish"
std::optional<Phase> phase_from_name(std::string_view s);
// For people: "rendezvous", "model build", "step 12", "checkpoint save", ...
std::string describe_phase(Phase p, int64_t step);

struct Beat {
  Phase phase = Phase::Launched;
  int64_t step =
      -1;  // the step being run in Phase::Step; in Phase::Save the step the checkpoint follows (-1: unknown); else -1
};

// "HB step 12" (no newline); parse_beat accepts exactly that shape and nothing else.
std::string format_beat(const Beat& b);
std::optional<Beat> parse_beat(std::string_view line);

// (phase, step) order: Launched < Init < ... < Step 0 < Save 0 < Step 1 < ... < Save -1 < Finish
// (Save s: the checkpoint written after step s; Save -1: a save after an unknown step).
bool less_advanced(const Beat& a, const Beat& b);

class Heartbeat {
 public:
  // fd < 0: inert. The fd is made non-blocking: a launcher that does not read never blocks
  // the worker (beats are dropped instead).
  explicit Heartbeat(int fd, double interval_s = 0.5);
  // Reads ULYSSES_HEARTBEAT_FD (and ULYSSES_FAULT, RANK for the test hook).
  static int fd_from_environment();
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Records the phase, beats at once, then runs the fault hook for it if one matches.
  void set(Phase p, int64_t step = -1);
  bool active() const { return fd_ >= 0; }

 private:
  void beat();
  void loop();
  int fd_ = -1;
  double interval_s_;
  std::atomic<int> phase_{static_cast<int>(Phase::Init)};
  std::atomic<int64_t> step_{-1};
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

// The fault hook alone (tests): true when spec ("0:rendezvous:stop,1:step@3:hang") names
// this rank and phase; *action receives the action.
bool fault_matches(const std::string& spec, int rank, const Beat& b, std::string* action);

}  // namespace ulysses::launch
