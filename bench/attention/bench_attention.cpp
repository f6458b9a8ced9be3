// Attention benchmark (prints figures; not a test): SDPA (libtorch 1.13's math kernel on
// CPU, N x N scores) against the block-causal online-softmax kernel (Blocked), forward +
// backward, one intra-op thread, H = 4, dh = 64, B = 1, fp32. Each measurement runs in a
// fresh child process of this program so that its peak memory is its own:
//   peak = VmHWM - VmRSS, both read after the inputs exist and a warm-up pass ran, with
//   the high-water mark reset (echo 5 > /proc/self/clear_refs), i.e. the memory the
//   timed forward + backward needed on top of its inputs.
// Time = median of --reps timed passes after one warm-up pass (no warm-up with --reps 1).
// Then a block-size sweep of Blocked at one N (--blocks "" skips it).
//
//   bench_attention [--n 1024,2048,4096,8192] [--blocked-only 16384] [--block 256]
//                   [--sweep-n 4096] [--blocks 64,128,256,512] [--reps 3]
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "local_attention.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

namespace {

constexpr int64_t kH = 4, kDh = 64;

int64_t status_kb(const char* key) {  // VmRSS / VmHWM of this process, KiB
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::atoll(line.c_str() + k.size());
  return -1;
}

// Child: one kernel at one N; prints "<median ms> <peak bytes>".
int run_one(const std::string& kind, int64_t N, int64_t block, int reps) {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);  // big buffers come from mmap and go back on free
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  at::set_num_threads(1);
  torch::manual_seed(0);
  AttentionKernel kern{kind == "sdpa" ? AttentionKernel::Kind::Sdpa : AttentionKernel::Kind::Blocked, block};
  auto q = torch::randn({1, kH, N, kDh}).requires_grad_(true);  // (B, H, N, dh)
  auto k = torch::randn({1, kH, N, kDh}).requires_grad_(true);
  auto v = torch::randn({1, kH, N, kDh}).requires_grad_(true);
  auto g = torch::randn({1, kH, N, kDh});
  auto pass = [&] {
    auto out = causal_attention(q, k, v, kern);
    out.backward(g);
    q.mutable_grad() = at::Tensor();
    k.mutable_grad() = at::Tensor();
    v.mutable_grad() = at::Tensor();
  };
  if (reps > 1) pass();  // warm-up (with --reps 1 the single pass is cold: allocations fault in)
  malloc_trim(0);
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const int64_t base_kb = status_kb("VmRSS");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const int64_t peak_kb = status_kb("VmHWM") - base_kb;
  std::sort(ms.begin(), ms.end());
  std::printf("%.3f %lld\n", ms[ms.size() / 2], static_cast<long long>(peak_kb) * 1024);
  return 0;
}

struct Figure {
  double ms = -1;
  double bytes = -1;
};

Figure measure(const std::string& self, const std::string& kind, int64_t N, int64_t block, int reps) {
  const std::string cmd = "'" + self + "' --one " + kind + " " + std::to_string(N) + " " + std::to_string(block) + " " +
                          std::to_string(reps);
  Figure f;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    if (std::fscanf(p, "%lf %lf", &f.ms, &f.bytes) != 2) f = Figure{};
    ::pclose(p);
  }
  return f;
}

std::vector<int64_t> list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) v.push_back(std::atoll(x.c_str()));
  return v;
}

double mib(double b) { return b / (1024.0 * 1024.0); }

}  // namespace

static int bench_main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--one")
    return run_one(argv[2], std::atoll(argv[3]), std::atoll(argv[4]), std::atoi(argv[5]));
  std::string ns = "1024,2048,4096,8192", blocked_only = "16384", blocks = "64,128,256,512";
  int64_t block = 256, sweep_n = 4096;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--n")
      ns = v;
    else if (a == "--blocked-only")
      blocked_only = v;
    else if (a == "--block")
      block = std::atoll(v.c_str());
    else if (a == "--sweep-n")
      sweep_n = std::atoll(v.c_str());
    else if (a == "--blocks")
      blocks = v;
    else if (a == "--reps")
      reps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  char buf[4096];
  const ssize_t len = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (len <= 0) return 1;
  const std::string self(buf, static_cast<size_t>(len));

  std::printf("causal attention forward + backward, B=1, H=%lld, dh=%lld, fp32, 1 thread, median of %d\n",
              (long long)kH, (long long)kDh, reps);
  std::printf("peak = memory on top of the inputs during forward + backward (VmHWM - VmRSS, fresh process each)\n\n");
  std::printf("%7s | %10s %10s %7s | %12s %12s %7s | %14s\n", "N", "sdpa ms", "blocked ms", "ratio", "sdpa MiB",
              "blocked MiB", "ratio", "N*N*H*4 MiB");
  auto row = [&](int64_t N, bool with_sdpa) {
    const Figure b = measure(self, "blocked", N, block, reps);
    const Figure s = with_sdpa ? measure(self, "sdpa", N, block, reps) : Figure{};
    const double scores = mib(double(N) * N * kH * 4);
    if (with_sdpa)
      std::printf("%7lld | %10.1f %10.1f %6.2fx | %12.1f %12.1f %6.1fx | %14.0f\n", (long long)N, s.ms, b.ms,
                  s.ms / b.ms, mib(s.bytes), mib(b.bytes), s.bytes / b.bytes, scores);
    else
      std::printf("%7lld | %10s %10.1f %7s | %12s %12.1f %7s | %14.0f  (sdpa skipped: several N*N buffers)\n",
                  (long long)N, "-", b.ms, "-", "-", mib(b.bytes), "-", scores);
    std::fflush(stdout);
  };
  for (int64_t N : list(ns)) row(N, true);
  for (int64_t N : list(blocked_only)) row(N, false);

  if (!list(blocks).empty())
    std::printf("\nblocked, block-size sweep at N=%lld\n%7s | %10s %12s\n", (long long)sweep_n, "block", "ms",
                "peak MiB");
  for (int64_t bl : list(blocks)) {
    const Figure b = measure(self, "blocked", sweep_n, bl, reps);
    std::printf("%7lld | %10.1f %12.1f\n", (long long)bl, b.ms, mib(b.bytes));
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_attention [--n 1024,2048,4096,8192] [--blocked-only 16384] [--block 256] [--sweep-n 4096] "
      "[--blocks 64,128,256,512] [--reps 3]\n  SDPA against the blocked kernel, forward + backward, one thread (see "
      "the README, Attention on CPU)",
      argc, argv, [&] { return bench_main(argc, argv); });
}
