// Test data library (ulysses::testdata): recordings through the real Tracer with the engine's
// phase structure (per step: a step range, then per direction and layer qkv, the seq->head
// all-to-all on the comm lane from a helper thread, attention, head->seq, out_proj), so the
// tests exercise the same path as a training run. P ranks, L layers, S steps, H heads (rank r
// owns heads [r*H/P, (r+1)*H/P) after the seq->head all-to-all).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/tracer.hpp"

namespace ulysses::testdata {

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

inline void spin_ns(int64_t ns) {
  int64_t end = prof::Tracer::now_ns() + ns;
  while (prof::Tracer::now_ns() < end) {
  }
}

// Geometry of the synthetic run.
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

}  // namespace ulysses::testdata
