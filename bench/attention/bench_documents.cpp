// Packed-documents attention benchmark (prints figures; not a test): the blocked CPU kernel,
// forward + backward, over N tokens packed from documents of D tokens (document mask: fully
// masked blocks skipped) against the same N tokens as one causal document, side by side in one
// run, with the ratio. fp32, B = 1, --threads intra-op threads (default 1), median of --reps;
// wall time and the process's CPU time (the CPU figure holds on a machine others load too).
// Also prints the pairs the mask keeps (DocumentMask::unmasked_pairs / causal pairs): the
// ratio the cost model counts.
//
//   bench_documents [--n 65536] [--doc 4096] [--heads 2] [--kv-heads 2] [--dh 64]
//                   [--block 256] [--reps 1] [--threads 1]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/bench_main.hpp"
#include "document_mask.hpp"
#include "local_attention.hpp"

using namespace ulysses;

namespace {

constexpr const char* kUsage =
    "bench_documents [--n 65536] [--doc 4096] [--heads 2] [--kv-heads 2] [--dh 64] [--block 256] [--reps 1] "
    "[--threads 1]\n"
    "  blocked attention forward+backward over N tokens packed from documents of --doc tokens\n"
    "  against the same N tokens as one document; prints both times and the ratio";

double cpu_ms() {  // CPU time of the process (all its threads): robust to a shared machine's load
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

struct Timing {
  double wall_ms = 0, cpu_ms = 0;  // medians
};

Timing median(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
              const AttentionKernel& kern, const DocumentMask* docs, int reps) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    auto qq = q.detach().requires_grad_(true), kk = k.detach().requires_grad_(true),
         vv = v.detach().requires_grad_(true);
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_ms();
    causal_attention(qq, kk, vv, kern, docs).backward(g);
    cpu.push_back(cpu_ms() - c0);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main(kUsage, argc, argv, [&] {
    int64_t N = 65536, D = 4096, H = 2, Hkv = 2, dh = 64, block = 256;
    int reps = 1, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i];
      const int64_t x = std::atoll(argv[i + 1]);
      if (a == "--n")
        N = x;
      else if (a == "--doc")
        D = x;
      else if (a == "--heads")
        H = x;
      else if (a == "--kv-heads")
        Hkv = x;
      else if (a == "--dh")
        dh = x;
      else if (a == "--block")
        block = x;
      else if (a == "--reps")
        reps = static_cast<int>(x);
      else if (a == "--threads")
        threads = static_cast<int>(x);
      else
        throw std::invalid_argument("unknown option " + a + " (--help)");
    }
    if (N < 1 || D < 1 || H < 1 || Hkv < 1 || H % Hkv != 0 || dh < 1 || block < 1 || reps < 1 || threads < 1)
      throw std::invalid_argument("sizes must be positive and --heads a multiple of --kv-heads");
    at::set_num_threads(threads);
    torch::manual_seed(0);
    auto q = torch::randn({1, H, N, dh}), k = torch::randn({1, Hkv, N, dh}), v = torch::randn({1, Hkv, N, dh});
    auto g = torch::randn({1, H, N, dh});
    auto start = torch::arange(N, torch::kLong).div(D, "floor").mul(D).view({1, N});  // documents of D tokens
    const DocumentMask docs(start);
    const AttentionKernel kern{AttentionKernel::Kind::Blocked, block};
    const double kept = static_cast<double>(docs.unmasked_pairs()) / (0.5 * double(N) * double(N + 1));
    std::printf(
        "blocked attention fwd+bwd, N %lld, H %lld, kv heads %lld, dh %lld, block %lld, %d thread(s), "
        "median of %d\n",
        static_cast<long long>(N), static_cast<long long>(H), static_cast<long long>(Hkv), static_cast<long long>(dh),
        static_cast<long long>(block), threads, reps);
    const Timing packed = median(q, k, v, g, kern, &docs, reps);
    std::printf("  packed, documents of %lld tokens: %10.1f ms wall, %10.1f ms CPU\n", static_cast<long long>(D),
                packed.wall_ms, packed.cpu_ms);
    std::fflush(stdout);
    const Timing one = median(q, k, v, g, kern, nullptr, reps);
    std::printf("  one document of %lld tokens:    %10.1f ms wall, %10.1f ms CPU\n", static_cast<long long>(N),
                one.wall_ms, one.cpu_ms);
    std::printf("  ratio one / packed: %.2fx wall, %.2fx CPU (the mask keeps %.4f of the causal pairs: %.2fx fewer)\n",
                one.wall_ms / packed.wall_ms, one.cpu_ms / packed.cpu_ms, kept, 1.0 / kept);
    return 0;
  });
}
