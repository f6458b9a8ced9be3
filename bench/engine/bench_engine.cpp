// Engine benchmark (prints figures; not a test): tokens/s of the tiny demo at sp 1, 2, 4
// on this CPU, the bytes each all-to-all moved per layer against the formula, and the
// tracing overhead (traced vs untraced, interleaved in one run).
#include <cstdio>

#include "common/run_helper.hpp"
#include "run_config.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

static int bench_main(int argc, char** argv) {
  const std::string cfg_path = std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json";
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  RunConfig cfg = load_run_config(cfg_path);
  const auto& m = cfg.model;
  const int64_t N = cfg.train.seq_length, B = cfg.train.micro_batch_size, d = m.hidden_size, dh = m.head_dim();
  std::printf(
      "tiny demo: hidden %ld, %ld layers, %ld heads (%ld kv), seq %ld, %d steps per run (median of steps 2..)\n\n",
      (long)d, (long)m.num_hidden_layers, (long)m.num_attention_heads, (long)m.num_key_value_heads, (long)N, steps);

  std::printf("%4s %12s %10s %8s | %14s %14s %14s\n", "sp", "tokens/s", "step ms", "vs sp1", "a2a B/layer",
              "formula GQA", "4Nd(P-1)/P^2");
  double base = 0;
  for (int sp : {1, 2, 4}) {
    auto r = bench::run(cfg_path, {"parallel.sp_size=" + std::to_string(sp), "train.steps=" + std::to_string(steps)},
                        bench::scratch("sp" + std::to_string(sp)));
    const double tps = r.median("tokens_per_s");
    if (sp == 1) base = tps;
    double measured = 0;
    if (sp > 1) {
      auto t = prof::load_trace(r.dir);
      for (const auto& row : prof::layer_table(t))
        if (row.dir == prof::Direction::Forward && row.layer == 0)
          measured = double(row.a2a_bytes_sent) / double(row.samples);
    }
    // Per layer forward, per rank: q and o carry B*N*H*dh, k and v B*N*Hkv'*dh each
    // (Hkv' = max(Hkv, P) when kv heads are replicated), each (P-1)/P^2 of it leaves the rank.
    const int64_t hkv = std::max<int64_t>(m.num_key_value_heads, sp);
    const double gqa = double(B * N * dh * (2 * m.num_attention_heads + 2 * hkv)) * (sp - 1) / (double(sp) * sp) * 4;
    const double mha = 4.0 * B * N * d * (sp - 1) / (double(sp) * sp) * 4;
    std::printf("%4d %12.0f %10.1f %7.2fx | %14.0f %14.0f %14.0f\n", sp, tps, r.median("step_ms"), tps / base, measured,
                gqa, mha);
  }

  std::printf(
      "\ntracing overhead at sp 2 (alternating traced / untraced runs: median step time, and CPU\n"
      "seconds of all processes per run, which the shared machine's load disturbs less)\n");
  std::vector<double> on, off, cpu_on, cpu_off;
  for (int rep = 0; rep < 3; ++rep) {
    for (bool traced : {true, false}) {
      auto r = bench::run(
          cfg_path,
          {"train.steps=" + std::to_string(steps), std::string("profile.enabled=") + (traced ? "true" : "false")},
          bench::scratch("trace"));
      (traced ? on : off).push_back(r.median("step_ms"));
      (traced ? cpu_on : cpu_off).push_back(r.cpu_s);
    }
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double a = med(on), b = med(off), ca = med(cpu_on), cb = med(cpu_off);
  std::printf("  step time: traced %.1f ms, untraced %.1f ms, overhead %+.1f%%\n", a, b, 100.0 * (a - b) / b);
  std::printf("  CPU time:  traced %.2f s, untraced %.2f s, overhead %+.1f%%\n", ca, cb, 100.0 * (ca - cb) / cb);
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_engine [steps]   (default 8)\n  tokens/s of the tiny demo at sp 1, 2, 4, all-to-all bytes per "
      "layer, tracing overhead",
      argc, argv, [&] { return bench_main(argc, argv); });
}
