// The step program: one rank's training step as the simulator replays it, recorded from the
// engine itself. A RecordingTracer is handed to a real Trainer running Trainer::step on the meta
// device over Comm::shape_only (ulysses-worker --simulate): every range the trainer and the model
// push, every collective the engine issues (ScopedCorrelation, at the point of issue) and records
// (record_range, at the point where the rank waited for it), with the host clock of the dry run
// giving their order. build() turns that stream into ops and ordered points:
//   Begin / End  of a range on the rank's compute stream (main thread; backward marks too)
//   Issue        a collective handed to its communication stream (a2a, ring, ZeRO lanes)
//   Wait         the compute stream waits for a collective to finish
// Torch-free: the recorder sees only prof::RangeInfo values.
#pragma once

#include <cstdint>
#include <vector>

#include "ulysses/profiler/tracer.hpp"

namespace ulysses::sim {

struct Op {
  prof::RangeInfo info;
  int32_t lane = 0;     // 0: the compute stream; else the Tracer lane of an asynchronous collective
  bool comm = false;    // a collective (asynchronous on `lane`, or blocking on the compute stream)
  int32_t parent = -1;  // compute-stream ranges: the enclosing range (index into ops)
  int32_t depth = 0;
};

struct Point {
  enum Kind : uint8_t { Begin, End, Issue, Wait };
  Kind kind = Begin;
  int32_t op = 0;
};

struct StepProgram {
  std::vector<Op> ops;
  std::vector<Point> points;  // in program order
  int64_t count(Point::Kind k) const {
    int64_t n = 0;
    for (const auto& p : points) n += p.kind == k;
    return n;
  }
};

// Records while `on` is true (set it around the step to keep; the first step creates AdamW
// state and is usually left out).
class RecordingTracer final : public prof::Tracer {
 public:
  bool on = false;
  void begin_step(int64_t) override {}
  void end_step(const prof::StepRecord&) override {}
  bool active() const override { return on; }
  void push(const prof::RangeInfo& info) override;
  void pop() override;
  void record_range(const prof::RangeInfo& info, int64_t start_ns, int64_t end_ns, int32_t lane) override;
  void sample_memory(const char*, const prof::MemorySample&) override {}
  void set_metric(const std::string&, double) override {}
  void close() override {}
  void push_correlation(const prof::RangeInfo& info) override;
  void clear() { raw_.clear(); }

  // The recorded step as a program (throws std::runtime_error when pushes and pops do not pair).
  StepProgram build() const;

  // What was recorded, in call order (for tests and build()).
  struct Raw {
    enum Kind : uint8_t { Push, Pop, Record, Corr };
    Kind kind = Push;
    int64_t t = 0;         // host clock at the call
    int64_t s = 0, e = 0;  // Record: the range's own times
    int32_t lane = 0;      // Record
    prof::RangeInfo info;  // Push, Record, Corr
  };
  const std::vector<Raw>& raw() const { return raw_; }

 private:
  std::vector<Raw> raw_;
};

}  // namespace ulysses::sim
