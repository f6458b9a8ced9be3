// ulysses-run's progress and end of run (run_progress.hpp).
#include "run_progress.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "run_output.hpp"
#include "stop_signals.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::launch {
namespace {

// Each rank's phase as last said (-1 none yet, -2 said silent) and, with --json, the step it is in.
struct RankLines {
  struct StepMark {
    int64_t step = -1;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<int> shown_phase;
  std::vector<StepMark> marks;
};

// With --json (the studio), each rank's step time as its heartbeat shows it: "rank R: step K
// took X ms" when the rank leaves step K (the launcher's clock; the Monitor's rank table).
void say_step_time(RankLines& s, int rank, const Beat& b) {
  RankLines::StepMark& mk = s.marks[static_cast<size_t>(rank)];
  const auto now = std::chrono::steady_clock::now();
  const bool in_step = b.phase == Phase::Step;
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

// One line per rank and phase (not per step), and when a rank goes quiet or comes back. The
// studio's rank table reads these lines ("ulysses-run: rank R: PHASE", docs/CONTRACTS.md).
void say_liveness(RankLines& s, bool json_mode, int rank, const Beat& b, bool responsive, double silent_s) {
  if (rank < 0 || static_cast<size_t>(rank) >= s.shown_phase.size()) return;
  if (responsive && json_mode) say_step_time(s, rank, b);
  int& shown = s.shown_phase[static_cast<size_t>(rank)];
  if (!responsive) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", silent_s);
    say("rank " + std::to_string(rank) + ": no heartbeat for " + buf + " s (in " + describe_phase(b.phase, b.step) +
        ")");
    shown = -2;  // say the phase again once it beats
    return;
  }
  if (static_cast<int>(b.phase) == shown) return;
  shown = static_cast<int>(b.phase);
  if (b.phase == Phase::Init || b.phase == Phase::Finish) return;  // brief; not worth a line
  say("rank " + std::to_string(rank) + ": " +
      (b.phase == Phase::Step ? "training (step " + std::to_string(b.step) + ")" : describe_phase(b.phase, b.step)));
}

}  // namespace

LaunchCallbacks make_run_callbacks(bool json_mode, const RunConfig& cfg, const std::string& out_dir) {
  LaunchCallbacks cb;
  cb.on_line = [](int rank, Stream, const std::string& line) {
    err_line("[rank " + std::to_string(rank) + "] " + line);
  };
  cb.on_metric = [json_mode](const MetricLine& m) {
    if (json_mode) {
      std::fwrite(m.raw.data(), 1, m.raw.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      err_line(format_progress(m.value));
    }
  };
  cb.stop_requested = [] { return stop_signal() != 0; };
  cb.on_warning = [](const std::string& m) { say("warning: " + m); };
  auto lines = std::make_shared<RankLines>();
  const size_t ranks = static_cast<size_t>(std::max<int64_t>(1, cfg.parallel.world_size()));
  lines->shown_phase.assign(ranks, -1);
  lines->marks.resize(ranks);
  cb.on_liveness = [lines, json_mode](int rank, const Beat& b, bool responsive, double silent_s) {
    say_liveness(*lines, json_mode, rank, b, responsive, silent_s);
  };
  const int64_t sp = cfg.parallel.sp_size, dp = cfg.parallel.dp_size;
  cb.on_started = [sp, dp, out_dir](const std::vector<int>& pids) {
    say("started " + std::to_string(pids.size()) + " worker(s) (sp_size " + std::to_string(sp) + " x dp_size " +
        std::to_string(dp) + "), run directory " + out_dir);
  };
  return cb;
}

int report_run(const LaunchResult& res, const std::string& out_dir, bool json_mode,
               const std::function<void()>& after_finished) {
  const auto& rec = res.record;
  switch (rec.status) {
    case RunStatus::Finished:
      say(rec.message + (rec.final_loss ? ", final loss " + std::to_string(*rec.final_loss) : std::string()) +
          "; run directory " + out_dir);
      if (after_finished) after_finished();
      break;
    case RunStatus::Stopped:
      say(std::string("stopped by ") + stop_signal_name() + " after " + std::to_string(rec.steps_done) +
          " steps; every worker was terminated; run directory " + out_dir);
      break;
    default:
      say(rec.message + (res.ended_short ? "" : "; the other workers were stopped"));
      if (!res.failed_tail.empty()) {
        say("last " + std::to_string(res.failed_tail.size()) + " lines of rank " + std::to_string(*rec.failed_rank) +
            " (" + run_layout::rank_log(out_dir, *rec.failed_rank).string() + "):");
        for (const auto& l : res.failed_tail) err_line("  " + l);
      }
      break;
  }
  // --json's lines go to stdout alone: lines that could not be written there (a full disk
  // under "> steps.jsonl", /dev/full) make a finished run exit 1, not 0 with a short file.
  if (json_mode && (std::fflush(stdout) != 0 || std::ferror(stdout))) {
    say("--json: the METRIC lines could not all be written to stdout; every step is in " +
        run_layout::metrics(out_dir).string());
    if (res.exit_code == 0) return 1;
  }
  return res.exit_code;
}

}  // namespace ulysses::launch
