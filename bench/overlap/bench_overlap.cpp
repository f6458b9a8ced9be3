// Overlap benchmark (prints figures; not a test): the CPU demo model at sp 2 with 8 heads,
// for head_chunks 1, 2, 4 (and fused q/k/v): step time, summed all-to-all time and the
// overlap ratio from the analysis core (HTA definition, host ranges).
#include <cstdio>

#include "common/run_helper.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

static int bench_main(int argc, char** argv) {
  const std::string cfg = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json";
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  const std::string seq = argc > 2 ? argv[2] : "1024";
  std::printf("tiny demo with 8 heads (8 kv), seq %s, sp 2, %d steps; medians over steps 2..\n\n", seq.c_str(), steps);
  std::printf("%-14s %10s %14s %14s %10s\n", "head_chunks", "step ms", "a2a ms/step", "exposed ms", "overlap");
  struct Case {
    int chunks;
    bool fused;
  };
  for (Case c : {Case{1, false}, Case{2, false}, Case{4, false}, Case{4, true}}) {
    auto r = bench::run(cfg,
                        {"model.num_attention_heads=8", "model.num_key_value_heads=8", "train.seq_length=" + seq,
                         "train.steps=" + std::to_string(steps), "parallel.head_chunks=" + std::to_string(c.chunks),
                         std::string("parallel.fused_qkv=") + (c.fused ? "true" : "false")},
                        bench::scratch("overlap"));
    auto t = prof::load_trace(r.dir);
    prof::AnalysisOptions o;
    o.step_begin = 2;
    auto s = prof::analyze(t, o);
    const double per = double(s.ranks.size()) * double(std::max<int64_t>(1, steps - 2));
    // a2a only (the gradient all-reduce is communication too, but not what chunking moves)
    double a2a = 0;
    for (const auto& l : s.layers) a2a += double(l.a2a_seq_to_head_ns + l.a2a_head_to_seq_ns);
    std::printf("%-14s %10.1f %14.2f %14.2f %9.1f%%\n", (std::to_string(c.chunks) + (c.fused ? " fused" : "")).c_str(),
                r.median("step_ms"), a2a / per / 1e6, double(s.overall.comm_ns - s.overall.overlap_ns) / per / 1e6,
                100.0 * s.overall.ratio);
  }
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_overlap [steps] [seq_length]   (default 8 1024)\n  head_chunks 1, 2, 4 (and fused q/k/v) at sp 2 "
      "with 8 heads: step time, all-to-all time, overlap",
      argc, argv, [&] { return bench_main(argc, argv); });
}
