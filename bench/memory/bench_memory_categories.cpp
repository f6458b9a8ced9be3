// Cost of memory by category (issue 42; prints figures, not a test): the tiny demo on 2 CPU
// ranks, traced, with profile.memory on (the counting CPU allocator and a category sample at
// both edges of every range) and off, alternated over rounds so that both see the same load;
// the median step time of each (steps 2..) and their ratio, side by side in one run.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/run_helper.hpp"
#include "../common/bench_main.hpp"

using namespace ulysses;

static int bench_main(int argc, char** argv) {
  const std::string cfg = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json";
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::string seq = argc > 2 ? argv[2] : "2048";
  const int steps = 8;
  std::printf("tiny demo, seq %s, 2 ranks, %d steps, traced; %d rounds of memory on / off alternated\n\n", seq.c_str(),
              steps, rounds);
  std::printf("%-6s %16s %16s %8s\n", "round", "memory on ms", "memory off ms", "on/off");
  std::vector<double> on, off;
  for (int r = 0; r < rounds; ++r) {
    double ms[2] = {0, 0};
    for (int with : {1, 0}) {
      auto run = bench::run(cfg,
                            {"train.seq_length=" + seq, "train.steps=" + std::to_string(steps),
                             std::string("profile.memory=") + (with ? "true" : "false"), "profile.enabled=true"},
                            bench::scratch("memcat"));
      ms[with] = run.median("step_ms");
    }
    on.push_back(ms[1]);
    off.push_back(ms[0]);
    std::printf("%-6d %16.2f %16.2f %8.3f\n", r, ms[1], ms[0], ms[1] / ms[0]);
  }
  std::sort(on.begin(), on.end());
  std::sort(off.begin(), off.end());
  const double a = on[on.size() / 2], b = off[off.size() / 2];
  std::printf("%-6s %16.2f %16.2f %8.3f   (medians of the rounds)\n", "median", a, b, a / b);
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_memory_categories [rounds] [seq_length]   (default 3 2048)\n  step time with memory by category "
      "sampled (profile.memory on) and without, alternated, side by side",
      argc, argv, [&] { return bench_main(argc, argv); });
}
