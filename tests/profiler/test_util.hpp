// Helpers shared by the profiler tests: temp dirs, a synthetic Ulysses recording with the
// engine's phase structure, and a builder for hand-made TraceModels.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ut {

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ulysses-prof-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

inline void spin_ns(int64_t ns) {
  int64_t end = prof::Tracer::now_ns() + ns;
  while (prof::Tracer::now_ns() < end) {
  }
}

// Geometry of the synthetic run: P ranks, L layers, S steps, H heads (rank r owns
// heads [r*H/P, (r+1)*H/P) after the seq->head all-to-all).
struct Synth {
  int ranks = 2, layers = 2, steps = 2, heads = 8;
  static int64_t bytes_sent(int rank, int layer) { return 1000 * (layer + 1) + rank; }
  static int64_t bytes_recv(int rank, int layer) { return 2000 * (layer + 1) + rank; }
  // Ranges per rank per step: 1 step range + 2 directions x layers x 5 phases.
  int ranges_per_step() const { return 1 + 2 * layers * 5; }
};

inline prof::TracerOptions options_for(const std::string& path, int rank, int world) {
  prof::TracerOptions o;
  o.path = path;
  o.rank = rank;
  o.world_size = world;
  o.sp_rank = rank;
  o.sp_size = world;
  o.hostname = "test";
  o.run_id = "synthetic";
  o.run_config_json = R"({"model":{"num_attention_heads":8,"num_hidden_layers":2}})";
  return o;
}

// One step of the engine's structure on the calling thread; the all-to-alls are reported
// from a helper thread on the comm lane (as async completion callbacks would).
inline void record_step(prof::Tracer* t, int rank, int step, const Synth& s) {
  using prof::Direction;
  using prof::Phase;
  t->begin_step(step);
  {
    prof::ScopedRange st(t, {Phase::Step});
    const int h0 = rank * s.heads / s.ranks, h1 = (rank + 1) * s.heads / s.ranks;
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int layer = 0; layer < s.layers; ++layer) {
        {
          ULYSSES_RANGE(t, Phase::QkvProj, dir, layer);
          spin_ns(20000);
        }
        prof::RangeInfo a2a{Phase::A2ASeqToHead,           dir, layer, h0, h1, -1, Synth::bytes_sent(rank, layer),
                            Synth::bytes_recv(rank, layer)};
        int64_t a0 = prof::Tracer::now_ns();
        spin_ns(20000);
        int64_t a1 = prof::Tracer::now_ns();
        std::thread([&] { t->record_range(a2a, a0, a1, prof::Tracer::kCommLane); }).join();
        {
          ULYSSES_RANGE(t, Phase::Attention, dir, layer, h0, h1);
          spin_ns(20000);
        }
        a2a.phase = Phase::A2AHeadToSeq;
        a0 = prof::Tracer::now_ns();
        spin_ns(20000);
        a1 = prof::Tracer::now_ns();
        std::thread([&] { t->record_range(a2a, a0, a1, prof::Tracer::kCommLane); }).join();
        {
          ULYSSES_RANGE(t, Phase::OutProj, dir, layer);
          spin_ns(20000);
        }
      }
    }
    t->sample_memory("after_step", prof::Tracer::process_memory());
  }
  prof::StepRecord rec;
  rec.step = step;
  rec.loss = 10.0 - step;
  rec.tokens = 4096;
  t->end_step(rec);
}

// Writes RUN/trace/rank{r}.sqlite for every rank (two Tracer instances, one per rank).
inline void record_run(const std::string& run_dir, const Synth& s = {}) {
  fs::create_directories(fs::path(run_dir) / "trace");
  std::vector<std::unique_ptr<prof::Tracer>> tracers;
  for (int r = 0; r < s.ranks; ++r) {
    tracers.push_back(prof::Tracer::open(
        options_for((fs::path(run_dir) / "trace" / ("rank" + std::to_string(r) + ".sqlite")).string(), r, s.ranks)));
  }
  for (int step = 0; step < s.steps; ++step) {
    for (int r = 0; r < s.ranks; ++r) record_step(tracers[static_cast<size_t>(r)].get(), r, step, s);
  }
  for (auto& t : tracers) t->close();
}

// Hand-built model: lanes given with ranges sorted by start (end desc on ties); parent and
// depth are computed here with a stack.
struct LaneSpec {
  int32_t rank = 0;
  prof::LaneKind kind = prof::LaneKind::HostThread;
  std::string name = "main";
  std::vector<prof::TraceRange> ranges;
};

inline prof::TraceRange R(int64_t s, int64_t e, prof::Phase p, int32_t step = 0, int32_t layer = -1) {
  prof::TraceRange r;
  r.start_ns = s;
  r.end_ns = e;
  r.phase = p;
  r.step = step;
  r.layer = layer;
  return r;
}

inline prof::TraceModel make_model(const std::vector<LaneSpec>& lanes) {
  prof::TraceModel m;
  for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p)
    m.strings.push_back(prof::phase_name(static_cast<prof::Phase>(p)));
  for (const auto& ls : lanes) {
    prof::Lane l;
    l.rank = ls.rank;
    l.kind = ls.kind;
    l.name = ls.name;
    l.first = static_cast<int64_t>(m.ranges.size());
    std::vector<int32_t> stack;
    for (auto r : ls.ranges) {
      while (!stack.empty() && m.ranges[static_cast<size_t>(stack.back())].end_ns <= r.start_ns) stack.pop_back();
      r.rank = ls.rank;
      r.lane = static_cast<int32_t>(m.lanes.size());
      r.parent = stack.empty() ? -1 : stack.back();
      r.depth = static_cast<uint8_t>(stack.size());
      if (!r.is_kernel) r.name_id = static_cast<int32_t>(r.phase);
      stack.push_back(static_cast<int32_t>(m.ranges.size()));
      m.ranges.push_back(r);
    }
    l.count = static_cast<int64_t>(m.ranges.size()) - l.first;
    m.lanes.push_back(l);
  }
  return m;
}

inline void add_step(prof::TraceModel& m, int32_t rank, int64_t step, int64_t s, int64_t e) {
  prof::StepInfo si;
  si.rank = rank;
  si.step = step;
  si.start_ns = s;
  si.end_ns = e;
  m.steps.push_back(si);
}

}  // namespace ut
