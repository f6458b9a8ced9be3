// Test data library (ulysses::testdata): one rank's SQLite trace file with the engine's range
// structure, written through TraceWriter at full speed (no Tracer, no clock), for the
// profiler and trace-loading benchmarks. The library's other generators: in-memory models
// (synthetic_trace.hpp) and recordings through the real Tracer (recording.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "ulysses/profiler/trace_writer.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace ulysses::testdata {

namespace prof = ulysses::prof;

// One rank's file with the engine's structure: per step a step range on the main thread, and
// per direction and layer qkv, attention and out_proj (main) and the two all-to-alls on the
// comm lane (collectives: pg 1, a sequence number per all-to-all), `total` ranges in all.
// format: TracerOptions::trace_format (0 = this build's; 3 = format 3's two-table layout).
inline int64_t generate_rank(const std::string& path, int rank, int world, int64_t total, int layers, int format = 0) {
  prof::TracerOptions o;
  o.path = path;
  o.trace_format = format;
  o.rank = rank;
  o.world_size = world;
  o.sp_rank = rank;
  o.sp_size = world;
  o.run_config_json = R"({"model":{"num_attention_heads":32,"num_hidden_layers":)" + std::to_string(layers) + "}}";
  prof::TraceWriter w(o, 1000 + rank);
  const int per_step = 1 + 2 * layers * 5;
  const int64_t steps = std::max<int64_t>(1, total / per_step);
  int64_t t = 1'000'000'000LL + rank * 1000, written = 0, seq = 0;
  const int hp = 32 / world;
  for (int64_t step = 0; step < steps; ++step) {
    w.begin();
    const int64_t step_start = t;
    prof::RangeRecord st;
    st.tid = 1;
    st.step = step;
    st.info.phase = prof::Phase::Step;
    st.start_ns = t;
    st.end_ns = t + static_cast<int64_t>(per_step) * 1000 + 1000;
    w.write_range(st);
    ++written;
    for (auto dir : {prof::Direction::Forward, prof::Direction::Backward}) {
      for (int l = 0; l < layers; ++l) {
        const prof::Phase phases[] = {prof::Phase::QkvProj, prof::Phase::A2ASeqToHead, prof::Phase::Attention,
                                      prof::Phase::A2AHeadToSeq, prof::Phase::OutProj};
        for (auto p : phases) {
          prof::RangeRecord r;
          r.step = step;
          r.info.phase = p;
          r.info.dir = dir;
          r.info.layer = l;
          const bool comm = prof::phase_is_comm(p);
          r.tid = comm ? prof::kCommTid : 1;
          r.push_pop = !comm;
          r.start_ns = t + 100;
          r.end_ns = t + 900 + (rank * 37 + l) % 50;
          if (comm || p == prof::Phase::Attention) {
            r.info.head_begin = rank * hp;
            r.info.head_end = rank * hp + hp;
          }
          if (comm) {
            r.info.bytes_sent = r.info.bytes_recv = 1 << 20;
            r.info.pg = 1;
            r.info.seq = seq++;
          }
          w.write_range(r);
          ++written;
          t += 1000;
        }
      }
    }
    t = st.end_ns;
    prof::StepRecord rec;
    rec.step = step;
    rec.loss = 2.0;
    w.write_step(rec, step_start, t);
    w.commit();
  }
  w.close();
  return written;
}

}  // namespace ulysses::testdata
