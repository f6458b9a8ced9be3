// Ulysses x ring benchmark (prints figures; not a test; issue 36 item 5): one job on 4 CPU
// ranks, the tiny demo model with 8 q heads and 4 kv heads, split as (sp, ring) = (4, 1),
// (2, 2) and (1, 4), the ring runs once with each transport (parallel.ring_transport p2p: send
// + recv; alltoall: one all-to-all of the ring group per exchange, NCCL's): step time, bytes each rank sends per step
// (all-to-all, ring, gradient all-reduce) and exposed communication, from the trace (analysis core, summary's
// comm_phases), medians / means over the steps after warm-up, side by side in one run.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../common/run_helper.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "../common/bench_main.hpp"

using namespace ulysses;

static int bench_main(int argc, char** argv) {
  const std::string cfg = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json";
  const int steps = argc > 1 ? std::atoi(argv[1]) : 6;
  const std::string seq = argc > 2 ? argv[2] : "2048";
  std::printf("tiny demo with 8 heads (4 kv), seq %s, 4 ranks, %d steps; figures per rank and step, steps 2..\n\n",
              seq.c_str(), steps);
  std::printf("%-16s %9s %11s %11s %11s %11s %12s %10s\n", "sp x ring", "step ms", "a2a KiB", "ring KiB", "allred KiB",
              "exposed ms", "ring exp ms", "ring ovl");
  const std::vector<std::pair<int, std::string>> runs = {
      {1, "auto"}, {2, "p2p"}, {2, "alltoall"}, {4, "p2p"}, {4, "alltoall"}};
  for (const auto& [ring, transport] : runs) {
    const int sp = 4 / ring;
    auto r = bench::run(
        cfg,
        {"model.num_attention_heads=8", "model.num_key_value_heads=4", "train.seq_length=" + seq,
         "train.steps=" + std::to_string(steps), "parallel.sp_size=" + std::to_string(sp),
         "parallel.ring_size=" + std::to_string(ring), "parallel.ring_transport=" + transport, "train.device=cpu"},
        bench::scratch("ring"));
    auto t = prof::load_trace(r.dir);
    prof::AnalysisOptions o;
    o.step_begin = 2;
    auto s = prof::analyze(t, o);
    const double per = double(s.ranks.size()) * double(std::max(1, steps - 2));
    double a2a = 0, ring_b = 0, ar = 0, ring_exposed = 0, ring_ratio = 0;
    for (const auto& c : s.comm_phases) {
      if (c.phase == prof::Phase::A2ASeqToHead || c.phase == prof::Phase::A2AHeadToSeq) a2a += double(c.bytes_sent);
      if (c.phase == prof::Phase::GradAllReduce) ar += double(c.bytes_sent);
      if (c.phase == prof::Phase::RingStep) {
        ring_b += double(c.bytes_sent);
        ring_exposed = double(c.comm_ns - c.overlap_ns);
        ring_ratio = c.ratio;
      }
    }
    char ratio[16] = "-";
    if (ring > 1) std::snprintf(ratio, sizeof ratio, "%.1f%%", 100.0 * ring_ratio);
    const std::string label =
        std::to_string(sp) + " x " + std::to_string(ring) + (ring > 1 ? " " + transport : std::string());
    std::printf("%-16s %9.1f %11.1f %11.1f %11.1f %11.2f %12.2f %10s\n", label.c_str(), r.median("step_ms"),
                a2a / per / 1024, ring_b / per / 1024, ar / per / 1024,
                double(s.overall.comm_ns - s.overall.overlap_ns) / per / 1e6, ring_exposed / per / 1e6, ratio);
  }
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_ring [steps] [seq_length]   (default 6 2048)\n  one job on 4 CPU ranks as Ulysses 4 x 1, 2 x 2 "
      "and 1 x 4 (the ring with each transport, p2p and alltoall): step time, bytes per rank, exposed "
      "communication",
      argc, argv, [&] { return bench_main(argc, argv); });
}
