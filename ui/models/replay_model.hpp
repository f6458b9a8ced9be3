// Replay of a recorded run (docs/STUDIO.md): plays RUN/metrics.jsonl back at 1×, 10× (any speed)
// or step by step, with no training running. Widget-free: the monitor asks it which points
// are due as wall time passes and charts them; the replay cursor (run time and step) is
// what a timeline marks. Point i is due when the replay clock reaches its elapsed_s (the
// run time at the end of step i).
#pragma once

#include <cstdint>
#include <vector>

#include "run_data.hpp"

namespace ulysses::ui {

// One step of the trace on the trace's clock (the timeline's steps: from the earliest rank's
// start to the latest rank's end), for the replay cursor.
struct TraceStepSpan {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
};

class ReplayModel {
 public:
  ReplayModel() = default;
  explicit ReplayModel(std::vector<MetricPoint> points);

  // Timed replay: advances the clock by wall_s × speed of run time; returns the points that
  // became due, in order.
  std::vector<MetricPoint> advance(double wall_s, double speed);
  // Step by step: the next point (the clock jumps to its time); false at the end.
  bool step(MetricPoint* next);
  void restart();

  double clockS() const { return clock_s_; }  // replay position, run seconds since start
  int shown() const { return static_cast<int>(next_); }
  int total() const { return static_cast<int>(points_.size()); }
  bool finished() const { return next_ >= points_.size(); }
  double durationS() const;  // run time of the last point
  int cursorStep() const;    // step of the last shown point, -1 before any
  // The replay cursor on the trace clock, the line that sweeps the timeline: at the end of
  // the last shown step while the clock stands at its time (step by step, and at the end of
  // the replay); inside the step in progress, at the fraction of the step's span that the
  // clock has covered of its run time (from the previous point's time, or from this point's
  // time less its step_ms when that is later); at the first step's start before any time
  // has passed. -1 when `spans` has no span for that step.
  int64_t cursorNs(const std::vector<TraceStepSpan>& spans) const;

 private:
  std::vector<MetricPoint> points_;
  size_t next_ = 0;
  double clock_s_ = 0;
};

}  // namespace ulysses::ui
