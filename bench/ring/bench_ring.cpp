// Ulysses x ring benchmark (prints figures; not a test; issue 36 item 5): one job on 4 CPU
// ranks, the tiny demo model with 8 q heads and 4 kv heads, split as (sp, ring) = (4, 1),
// (2, 2) and (1, 4), the ring runs once with each transport (parallel.ring_transport p2p: send
// + recv; alltoall: one all-to-all of the ring group per exchange, NCCL's): step time, bytes each rank sends per step
// (all-to-all, ring, gradient all-reduce) and exposed communication, from the trace (analysis core, summary's
// comm_phases), medians / means over the steps after warm-up, side by side in one run.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/run_helper.hpp"
#include "cost_model.hpp"
#include "run_config.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

// A projection, not a measurement (no GPU has run the ring): bench-1b at 128K and 1M tokens on
// 8 GPUs split as sp x ring = 8x1 .. 1x8, from the cost model (engine/cost): FLOPs and bytes per
// rank per step, at an assumed 400 TFLOP/s sustained per GPU and 150 GB/s per rank for the
// all-to-alls and the ring (NVLink-class). The cost model has no overlap model, so the step is
// given as a range: every byte hidden behind compute (max) to none hidden (sum).
static void print_projection_at(const RunConfig& base, int64_t seq) {
  const double tflops = 400, gbps = 150;
  DeviceFacts facts;  // a GPU host: the device rule sees CUDA
  facts.build_has_cuda = true;
  facts.visible_gpus = 8;
  std::printf(
      "\nPROJECTION, not measured (no GPU has run the ring): bench-1b at %lld tokens on 8 GPUs, cost model "
      "at %.0f TFLOP/s per GPU and %.0f GB/s per rank; per rank and step\n",
      static_cast<long long>(seq), tflops, gbps);
  std::printf("%-10s %10s %10s %10s %10s %18s %16s\n", "sp x ring", "a2a GB", "ring GB", "allred GB", "compute s",
              "step s (hid..none)", "tokens/s");
  for (int ring : {1, 2, 4, 8}) {
    RunConfig c = base;
    c.train.seq_length = seq;
    c.parallel.sp_size = 8 / ring;
    c.parallel.ring_size = ring;
    cost::CostOptions o;
    o.tflops_per_rank = tflops;
    o.link_gbytes_per_s = gbps;
    o.facts = &facts;
    const cost::CostEstimate e = cost::estimate(c, o);
    const double lo = std::max(e.compute_s, e.comm_s), hi = e.compute_s + e.comm_s;
    std::printf("%-10s %10.2f %10.2f %10.2f %10.2f %8.2f..%-8.2f %7.0f..%-7.0f\n",
                (std::to_string(8 / ring) + " x " + std::to_string(ring)).c_str(), double(e.a2a_bytes_per_step) / 1e9,
                double(e.ring_bytes_per_step) / 1e9, double(e.allreduce_bytes_per_step) / 1e9, e.compute_s, lo, hi,
                double(e.tokens_per_step) / hi, double(e.tokens_per_step) / lo);
  }
}

static void print_gpu_projection() {
  RunConfig base = load_run_config(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/bench-1b.json");
  base.train.device = "cuda";
  for (int64_t seq : {int64_t{131072}, int64_t{1048576}}) print_projection_at(base, seq);
}

static int bench_main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--projection") {
    print_gpu_projection();
    return 0;
  }
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
  print_gpu_projection();
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_ring [steps] [seq_length]   (default 6 2048)\n       bench_ring --projection   (the GPU projection "
      "only)\n  one job on 4 CPU ranks as Ulysses 4 x 1, 2 x 2 "
      "and 1 x 4 (the ring with each transport, p2p and alltoall): step time, bytes per rank, exposed "
      "communication",
      argc, argv, [&] { return bench_main(argc, argv); });
}
