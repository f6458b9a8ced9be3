// GEMM benchmark (prints figures; not a test): the fp32 GEMM rate that the engine's shapes
// reach through libtorch + whatever libblas.so.3 resolves to, against this machine's
// measured one-core peak. Peak = best rate of repeated square at::mm (256^3, 512^3, 1024^3)
// on one thread (intra-op and BLAS threads both 1). Shapes: the tiny demo's linears at sp 1 (512 tokens,
// hidden 64) forward and both backward GEMMs, its attention scores, and a vocab-32000
// lm_head at 4096 tokens. Each timing is the best of repeats over >= 0.25 s (the machine is
// shared: the best is the least disturbed). Usage: bench_gemm [--small] [threads...]
// (default: 1 and all cores; --small: 512^3 peak and no vocab-32000 shapes, for the slow
// reference BLAS in bench/cpu/compare_blas.py).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "blas_info.hpp"
#include "common/bench_main.hpp"

namespace {

double best_seconds(const std::function<void()>& f, double budget_s = 0.25, int min_reps = 3) {
  f();  // warm-up (packing buffers, thread pools)
  double best = 1e30, total = 0;
  for (int r = 0; r < min_reps || total < budget_s; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    if (r > 200) break;
  }
  return best;
}

void set_threads(int t) {
  at::set_num_threads(t);
  ulysses::bench::set_blas_threads(t);
}

struct Shape {
  std::string name;
  std::function<void()> run;
  double flops;
};

// y = x W^T with x (n, in), W (out, in): forward, grad of x, grad of W.
void add_linear(std::vector<Shape>& v, const std::string& name, int64_t n, int64_t in, int64_t out) {
  auto x = at::randn({n, in}), w = at::randn({out, in}), gy = at::randn({n, out});
  const double f = 2.0 * n * in * out;
  v.push_back({name + " fwd  (" + std::to_string(n) + "x" + std::to_string(in) + ")·(" + std::to_string(in) + "x" +
                   std::to_string(out) + ")",
               [=] { (void)at::matmul(x, w.t()); }, f});
  v.push_back({name + " dX", [=] { (void)at::matmul(gy, w); }, f});
  v.push_back({name + " dW", [=] { (void)at::matmul(gy.t(), x); }, f});
}

}  // namespace

static int bench_main(int argc, char** argv) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> threads;
  bool small = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--small")
      small = true;
    else
      threads.push_back(std::max(1, std::atoi(argv[i])));
  }
  if (threads.empty()) threads = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
  at::manual_seed(0);
  const auto blas = ulysses::bench::blas_info();
  std::printf("BLAS: %s\n", blas.describe().c_str());
  if (blas.reference())
    std::printf("WARNING: this is the reference BLAS; install libopenblas0-pthread (./ulysses setup)\n");
  std::printf("libtorch: %s\n\n", at::get_parallel_info().substr(0, at::get_parallel_info().find("\n", 60)).c_str());

  // One-core peak: square GEMMs, 1 intra-op thread, 1 BLAS thread; the best rate over 256^3,
  // 512^3 and 1024^3 (512^3 with --small). On a loaded machine a 1024^3 product (~0.1 s) never
  // runs a whole scheduler slice undisturbed, so its best understates the peak (once 19 GFLOP/s
  // against 85); the ~0.4 ms 256^3 products do, and OpenBLAS runs them at its full rate.
  set_threads(1);
  double peak = 0, peak_s = 0;
  int64_t peak_n = 0;
  for (int64_t S : small ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{256, 512, 1024}) {
    auto a = at::randn({S, S}), b = at::randn({S, S});
    const double s = best_seconds([&] { (void)at::mm(a, b); }, 1.0, 2);
    const double g = 2.0 * S * S * S / s / 1e9;
    if (g > peak) peak = g, peak_s = s, peak_n = S;
  }
  std::printf(
      "one-core peak: %.1f GFLOP/s (best of at::mm NxNxN fp32 for N in 256, 512%s, 1 thread; best at N=%ld, %.2f "
      "ms)\n\n",
      peak, small ? "" : ", 1024", (long)peak_n, peak_s * 1e3);

  std::vector<Shape> shapes;
  const int64_t n = 512, d = 64, ff = 176, dh = 16, H = 4;
  add_linear(shapes, "tiny q/o_proj  ", n, d, d);
  add_linear(shapes, "tiny k/v_proj  ", n, d, 32);
  add_linear(shapes, "tiny gate/up   ", n, d, ff);
  add_linear(shapes, "tiny down_proj ", n, ff, d);
  add_linear(shapes, "tiny lm_head   ", n, d, 256);
  {
    auto q = at::randn({H, n, dh}), k = at::randn({H, n, dh});
    shapes.push_back({"tiny attn q·kT (4 heads, 512x16·16x512)", [=] { (void)at::matmul(q, k.transpose(1, 2)); },
                      2.0 * H * n * n * dh});
  }
  if (!small) add_linear(shapes, "v32000 lm_head ", 4096, d, 32000);

  std::printf("%-52s", "shape (M x K)·(K x N)");
  for (int t : threads) std::printf(" | %3d thr: %9s %8s %7s", t, "ms", "GFLOP/s", "%peak1");
  std::printf("\n");
  double tiny_flops = 0;
  std::vector<double> tiny_s(threads.size(), 0.0);
  for (const auto& sh : shapes) {
    std::printf("%-52s", sh.name.c_str());
    for (size_t i = 0; i < threads.size(); ++i) {
      set_threads(threads[i]);
      const double s = best_seconds(sh.run, sh.flops > 1e10 ? 1.0 : 0.25, sh.flops > 1e10 ? 2 : 3);
      const double g = sh.flops / s / 1e9;
      std::printf(" | %3d thr: %9.3f %8.1f %6.0f%%", threads[i], s * 1e3, g, 100.0 * g / peak);
      if (sh.name.rfind("tiny", 0) == 0) tiny_s[i] += s;
    }
    if (sh.name.rfind("tiny", 0) == 0) tiny_flops += sh.flops;
    std::printf("\n");
  }
  std::printf("%-52s", "tiny demo GEMMs together (the tiny rows summed)");
  for (size_t i = 0; i < threads.size(); ++i)
    std::printf(" | %3d thr: %9.3f %8.1f %6.0f%%", threads[i], tiny_s[i] * 1e3, tiny_flops / tiny_s[i] / 1e9,
                100.0 * tiny_flops / tiny_s[i] / 1e9 / peak);
  std::printf("\n");
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_gemm [--small] [threads...]\n  fp32 GEMM rate of the engine's shapes against one core's peak "
      "(default threads: 1 and all cores)",
      argc, argv, [&] { return bench_main(argc, argv); });
}
