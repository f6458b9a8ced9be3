// Numerics benchmark (prints figures; not a test), issue 41: for each long reduction the
// engine does, the relative error against fp64 of the plain fp32 form (what the engine did
// before) and of the accurate form (reductions.hpp, what it does now) at 1e5, 1e7 and 1e9
// elements (synthetic data), and the time of each, side by side in one run. Then the RoPE
// angle error of Hugging Face's fp32 tables (model.rope_precision hf) and of the fp64 ones at
// 128K, 512K and 1M positions. Table and command in docs/NUMERICS.md.
//
//   bench_numerics [--max N] [--threads T] [--reps R]
//     --max N      largest size (default 1e9: ~4 GB of fp32 plus 0.1 GB; 1e7 skips the 1e9 row)
//     --threads T  intra-op threads (default 1; the machine is shared)
//     --reps R     timed repetitions per cell, the median is printed (default 5; 3 at 1e9)
//     --rope-steps S  training steps of the tiny demo before the RoPE shift check (default 300)
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/bench_main.hpp"
#include "model.hpp"
#include "reductions.hpp"
#include "trainer.hpp"

using namespace ulysses;

namespace {

constexpr int64_t kPiece = int64_t{1} << 24;

struct Timed {
  double value = 0, ms = 0;
};

// median time of `reps` calls (the value of the last call)
Timed timed(int reps, const std::function<double()>& f) {
  std::vector<double> ms;
  Timed t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    t.value = f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  t.ms = ms[ms.size() / 2];
  return t;
}

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

// Gradient-like data: normal, with a scale that changes every 1M elements (layers differ)
// over four decades, in pieces (no second full-size temporary).
at::Tensor make_gradients(int64_t n, uint64_t seed) {
  auto x = torch::empty({n});
  auto gen = at::detail::createCPUGenerator(seed);
  for (int64_t s = 0; s < n; s += kPiece) {
    auto p = x.narrow(0, s, std::min(kPiece, n - s));
    p.normal_(0.0, 1.0, gen);
    const int64_t blocks = (p.numel() + (1 << 20) - 1) >> 20;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t len = std::min<int64_t>(1 << 20, p.numel() - (b << 20));
      const double scale = std::pow(10.0, -5.0 + 4.0 * static_cast<double>(((s >> 20) + b) * 7919 % 101) / 100.0);
      p.narrow(0, b << 20, len).mul_(scale);
    }
  }
  return x;
}

// Per-token cross-entropy-like losses: uniform in [0, 12).
at::Tensor make_token_losses(int64_t n, uint64_t seed) {
  auto x = torch::empty({n});
  auto gen = at::detail::createCPUGenerator(seed);
  for (int64_t s = 0; s < n; s += kPiece) x.narrow(0, s, std::min(kPiece, n - s)).uniform_(0.0, 12.0, gen);
  return x;
}

double ref_sum_sq(const at::Tensor& x) {  // fp64 squares (exact) summed in fp64
  double acc = 0;
  for (int64_t s = 0; s < x.numel(); s += kPiece)
    acc += x.narrow(0, s, std::min(kPiece, x.numel() - s)).to(torch::kFloat64).square().sum().item<double>();
  return acc;
}

double ref_sum(const at::Tensor& x) {
  double acc = 0;
  for (int64_t s = 0; s < x.numel(); s += kPiece)
    acc += x.narrow(0, s, std::min(kPiece, x.numel() - s)).to(torch::kFloat64).sum().item<double>();
  return acc;
}

// The loss as the engine reduces it: per-token losses of `ranks` ranks (contiguous slices),
// each in tiles of `tile` tokens whose fp32 cross-entropy sums (one ATen sum per tile) are
// added up per rank, then over ranks, divided by the token count.
//   before: tiles added in fp32, the rank's sum and count put in the fp32 flat buffer and
//           all-reduced with the gradients (fp32 sums over ranks, fp32 count);
//   now:    tiles added in fp64 (TiledLossFn), the rank's sum returned as fp32, micro-steps
//           and ranks added in fp64 with an exact count (global_token_mean).
double engine_loss(const at::Tensor& tok, int ranks, int64_t tile, bool accurate) {
  const int64_t n = tok.numel(), per = n / ranks;
  float sum32 = 0, count32 = 0;
  double sum64 = 0;
  int64_t count = 0;
  for (int r = 0; r < ranks; ++r) {
    const int64_t b = r * per, len = r + 1 == ranks ? n - b : per;
    float rank32 = 0;
    double rank64 = 0;
    for (int64_t s = 0; s < len; s += tile) {
      const float t = tok.narrow(0, b + s, std::min(tile, len - s)).sum().item<float>();
      if (accurate)
        rank64 += t;
      else
        rank32 += t;
    }
    if (accurate) {
      sum64 += static_cast<double>(static_cast<float>(rank64));
      count += len;
    } else {
      sum32 += rank32;
      count32 += static_cast<float>(len);
    }
  }
  return accurate ? sum64 / static_cast<double>(count) : static_cast<double>(sum32) / static_cast<double>(count32);
}

void reductions_table(int64_t max_n, int reps) {
  std::printf("Long reductions: relative error against fp64, plain fp32 (the engine before) vs accurate\n");
  std::printf("(reductions.hpp: fp32 partials over %ld-element chunks combined in fp64), and time (median)\n\n",
              static_cast<long>(kReductionChunk));
  std::printf("%-34s %8s | %12s %12s | %10s %10s %7s\n", "reduction", "elements", "plain err", "accurate err",
              "plain ms", "accur. ms", "ratio");
  for (int64_t n : {int64_t{100000}, int64_t{10000000}, int64_t{1000000000}}) {
    if (n > max_n) continue;
    const int R = n >= 1000000000 ? std::min(reps, 3) : reps;
    {
      auto g = make_gradients(n, 41);
      const double want = std::sqrt(ref_sum_sq(g));
      auto plain = timed(R, [&] { return g.norm().item<double>(); });
      auto acc = timed(R, [&] { return l2_norm(g); });
      std::printf("%-34s %8.0e | %12.1e %12.1e | %10.2f %10.2f %6.2fx\n", "grad norm (clip_grad_norm_)",
                  static_cast<double>(n), rel(plain.value, want), rel(acc.value, want), plain.ms, acc.ms,
                  acc.ms / plain.ms);
      if (n <= 10000000) {  // 16 bytes per element of temporaries: 16 GB at 1e9
        auto copy = timed(R, [&] { return std::sqrt(g.to(torch::kFloat64).square().sum().item<double>()); });
        std::printf("%-34s %8s | %12s %12.1e | %10s %10.2f %6.2fx\n", "  (fp64 copy of the buffer: cost)", "", "",
                    rel(copy.value, want), "", copy.ms, copy.ms / plain.ms);
      }
      std::fflush(stdout);
    }
    {
      auto tok = make_token_losses(n, 42);
      const double want_sum = ref_sum(tok);
      const double want = want_sum / static_cast<double>(n);
      auto plain = timed(R, [&] { return engine_loss(tok, 8, 16384, false); });
      auto acc = timed(R, [&] { return engine_loss(tok, 8, 16384, true); });
      std::printf("%-34s %8.0e | %12.1e %12.1e | %10.2f %10.2f %6.2fx\n", "loss: 8 ranks x 16K-token tiles",
                  static_cast<double>(n), rel(plain.value, want), rel(acc.value, want), plain.ms, acc.ms,
                  acc.ms / plain.ms);
      auto splain = timed(R, [&] { return tok.sum().item<double>(); });
      auto sacc = timed(R, [&] { return sum_fp64(tok).item<double>(); });
      std::printf("%-34s %8.0e | %12.1e %12.1e | %10.2f %10.2f %6.2fx\n", "sum of one buffer (sum_fp64)",
                  static_cast<double>(n), rel(splain.value, want_sum), rel(sacc.value, want_sum), splain.ms, sacc.ms,
                  sacc.ms / splain.ms);
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

void rope_table() {
  std::printf("RoPE angles at long positions (dh 128): max over the 64 frequencies and 64 positions ending\n");
  std::printf("at each position of |angle - exact| (rad; exact = double p / theta^(2i/dh) with std::pow), and\n");
  std::printf("of the cos/sin table entries (fp32 tables) against exact cos/sin\n\n");
  std::printf("%-10s %9s | %12s %12s | %12s %12s\n", "theta", "position", "hf angle", "fp64 angle", "hf cos/sin",
              "fp64 cos/sin");
  const int64_t dh = 128, w = 64;
  for (double theta : {10000.0, 500000.0}) {
    ModelConfig c;
    c.hidden_size = 1024;
    c.num_attention_heads = 8;
    c.rope_theta = theta;
    auto inv32 = rope_inv_freq(c, torch::kFloat32).first;  // (dh/2) as Transformers
    auto inv64 = rope_inv_freq(c, torch::kFloat64).first;
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    for (int64_t P : {int64_t{131072}, int64_t{524288}, int64_t{1048576}}) {
      const int64_t pos0 = P - w;
      // Transformers' angles: fp32 position x fp32 inverse frequency; fp64: both in fp64
      auto a32 = torch::arange(pos0, P, torch::kInt64).to(torch::kFloat32).unsqueeze(1) * inv32.unsqueeze(0);
      auto a64 = torch::arange(pos0, P, torch::kInt64).to(torch::kFloat64).unsqueeze(1) * inv64.unsqueeze(0);
      auto [c32, s32] = rope_tables(pos0, w, inv32, 1.0, f32);
      auto [c64, s64] = rope_tables(pos0, w, inv64, 1.0, f32);
      auto A32 = a32.accessor<float, 2>();
      auto A64 = a64.accessor<double, 2>();
      auto C32 = c32.accessor<float, 2>(), S32 = s32.accessor<float, 2>();
      auto C64 = c64.accessor<float, 2>(), S64 = s64.accessor<float, 2>();
      double e32 = 0, e64 = 0, t32 = 0, t64 = 0;
      for (int64_t i = 0; i < dh / 2; ++i) {
        const double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dh));
        for (int64_t p = 0; p < w; ++p) {
          const double exact = static_cast<double>(pos0 + p) * f;
          e32 = std::max(e32, std::abs(static_cast<double>(A32[p][i]) - exact));
          e64 = std::max(e64, std::abs(A64[p][i] - exact));
          const double ec = std::cos(exact), es = std::sin(exact);
          t32 = std::max({t32, std::abs(C32[p][i] - ec), std::abs(S32[p][i] - es)});
          t64 = std::max({t64, std::abs(C64[p][i] - ec), std::abs(S64[p][i] - es)});
        }
      }
      std::printf("%-10.0f %9ld | %12.2e %12.2e | %12.2e %12.2e\n", theta, static_cast<long>(P), e32, e64, t32, t64);
    }
  }
  std::printf("\n");
}

// RoPE is relative: in exact arithmetic the loss of a sequence does not change when all its
// positions are shifted. The tiny demo, trained `steps` steps at positions 0..N-1, evaluated
// on the same tokens at positions 0.. and at P-N.. with hf (fp32) and fp64 angles: the
// change is what the angle error costs.
void rope_shift_table(int steps) {
  RunConfig cfg = load_run_config(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json");
  cfg.parallel.sp_size = 1;
  cfg.profile.enabled = false;
  cfg.data.path = std::string(ULYSSES_SOURCE_DIR) + "/" + cfg.data.path;
  cfg.train.steps = steps;
  Comm comm(DistEnv{}, 1, 1, "gloo", std::chrono::milliseconds(60000));
  Trainer tr(cfg, comm, nullptr);
  double last = 0;
  for (int s = 0; s < steps; ++s) last = tr.step(s).loss;
  const int64_t N = cfg.train.seq_length;
  std::printf("RoPE, loss of the same tokens shifted to long positions: the tiny demo (dh %ld, theta %.0f)\n",
              static_cast<long>(cfg.model.head_dim()), cfg.model.rope_theta);
  std::printf("trained %d steps (last loss %.4f), evaluated on 4 sequences of %ld tokens at positions 0.. and\n", steps,
              last, static_cast<long>(N));
  std::printf("P-%ld.. (loss from the fp32 logits in fp64); exact RoPE gives the same loss at every P\n\n",
              static_cast<long>(N));
  std::printf("%9s | %14s %14s | %14s %14s\n", "P", "hf loss", "hf change", "fp64 loss", "fp64 change");
  auto data = TokenSource::open(cfg.data, cfg.model, N, static_cast<uint64_t>(cfg.train.seed));
  Batch b = make_batch(*data, N, 1000, 0, 4, static_cast<uint64_t>(cfg.train.seed));
  const auto count = static_cast<double>((b.labels != -100).sum().item<int64_t>());
  std::vector<std::unique_ptr<LlamaModel>> models;
  for (const char* precision : {"hf", "fp64"}) {
    ModelConfig m = cfg.model;
    m.rope_precision = precision;
    models.push_back(std::make_unique<LlamaModel>(m, cfg.parallel, torch::kFloat32, nullptr));
    torch::NoGradGuard ng;
    auto& dst = models.back()->named_parameters();
    const auto& src = tr.model().named_parameters();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  torch::NoGradGuard ng;
  double base[2] = {0, 0};
  for (int64_t P : {N, int64_t{131072}, int64_t{524288}, int64_t{1048576}}) {
    double loss[2];
    for (int k = 0; k < 2; ++k) {
      auto logits = models[k]->forward_logits(b.ids, P - N).to(torch::kFloat64);  // (4, N, V) fp64 loss
      loss[k] = torch::nn::functional::cross_entropy(
                    logits.view({-1, logits.size(-1)}), b.labels.reshape({-1}),
                    torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum))
                    .item<double>() /
                count;
      if (P == N) base[k] = loss[k];
    }
    std::printf("%9ld | %14.7f %14.2e | %14.7f %14.2e\n", static_cast<long>(P), loss[0], loss[0] - base[0], loss[1],
                loss[1] - base[1]);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main(
      "usage: bench_numerics [--max N] [--threads T] [--reps R] [--rope-steps S]\n"
      "  relative error vs fp64 and time of the plain fp32 and the accurate reductions at 1e5, 1e7, 1e9\n"
      "  elements (--max 1e7 skips 1e9: it needs ~4.2 GB), then RoPE angle errors at 128K/512K/1M and the\n"
      "  loss change of the trained tiny demo when its positions are shifted there (hf vs fp64 angles)",
      argc, argv, [&] {
        double max_n = 1e9;
        int threads = 1, reps = 5, rope_steps = 300;
        for (int i = 1; i < argc; ++i) {
          const std::string a = argv[i];
          auto value = [&]() -> double {
            char* end = nullptr;
            const double v = i + 1 < argc ? std::strtod(argv[i + 1], &end) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || !(v >= 1) || v > 1e12) {
              std::fprintf(stderr, "bench_numerics: %s needs a number >= 1 (see --help)\n", a.c_str());
              std::exit(2);
            }
            ++i;
            return v;
          };
          if (a == "--max")
            max_n = value();
          else if (a == "--threads")
            threads = static_cast<int>(value());
          else if (a == "--reps")
            reps = static_cast<int>(value());
          else if (a == "--rope-steps")
            rope_steps = static_cast<int>(value());
          else {
            std::fprintf(stderr, "bench_numerics: unknown argument '%s' (see --help)\n", a.c_str());
            return 2;
          }
        }
        at::set_num_threads(threads);
        std::printf("bench_numerics: %d intra-op thread(s), %d reps (median)\n\n", threads, reps);
        reductions_table(static_cast<int64_t>(max_n), reps);
        rope_table();
        rope_shift_table(rope_steps);
        return 0;
      });
}
