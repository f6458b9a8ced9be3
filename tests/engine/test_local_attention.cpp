// Block-causal attention (AttentionKernel::Blocked) against SDPA and against a naive
// causal softmax in double: outputs and q/k/v gradients for MHA and GQA (no repeated kv),
// N not a multiple of the block, block larger than N, B > 1, non-contiguous inputs.
// Tolerances, as max|a - b| / max|b|: fp32 vs SDPA <= 1e-5; double vs naive double
// <= 1e-12; bf16 (fp32 accumulation, bf16 result) vs fp32 SDPA of the same bf16 inputs
// <= 1e-2 for the output (bf16 rounds at 2^-8 = 3.9e-3 relative) and <= 2e-2 for the
// gradients (bf16 dO/O feed D = rowsum(dO o O), as in FlashAttention).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "local_attention.hpp"

using namespace ulysses;

namespace {

struct Grads {
  at::Tensor out, dq, dk, dv;
};

// Runs attention on leaf copies of q, k, v and backpropagates a fixed upstream gradient.
template <class F>
Grads run(F attention, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& gout) {
  auto ql = q.detach().clone().requires_grad_(true);
  auto kl = k.detach().clone().requires_grad_(true);
  auto vl = v.detach().clone().requires_grad_(true);
  auto out = attention(ql, kl, vl);
  (out * gout.to(out.scalar_type())).sum().backward();
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

// Naive causal attention, explicit: softmax(q k^T / sqrt(dh) + mask) v with kv head h / G.
at::Tensor naive(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto H = q.size(1), N = q.size(2), dh = q.size(3), G = H / k.size(1);
  auto kk = k.repeat_interleave(G, 1), vv = v.repeat_interleave(G, 1);   // (B, H, N, dh)
  auto s = at::matmul(q, kk.transpose(-1, -2)) / std::sqrt(double(dh));  // (B, H, N, N)
  auto future = at::ones({N, N}, at::kBool).triu(1);
  return at::softmax(s.masked_fill(future, -INFINITY), -1).matmul(vv);
}

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return causal_attention(q, k, v, AttentionKernel{AttentionKernel::Kind::Sdpa, 0});
}

double rel(const at::Tensor& a, const at::Tensor& ref) {
  return (a.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>() /
         ref.to(at::kDouble).abs().max().item<double>();
}

struct Case {
  int64_t B, H, Hkv, N, dh, block;
};
std::string name(const Case& c) {
  return "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " Hkv=" + std::to_string(c.Hkv) +
         " N=" + std::to_string(c.N) + " dh=" + std::to_string(c.dh) + " block=" + std::to_string(c.block);
}

void expect_close(const Grads& got, const Grads& ref, double out_tol, double grad_tol, const std::string& what) {
  EXPECT_EQ(got.out.sizes(), ref.out.sizes()) << what;
  EXPECT_LE(rel(got.out, ref.out), out_tol) << what << ": output";
  EXPECT_LE(rel(got.dq, ref.dq), grad_tol) << what << ": dq";
  EXPECT_LE(rel(got.dk, ref.dk), grad_tol) << what << ": dk";
  EXPECT_LE(rel(got.dv, ref.dv), grad_tol) << what << ": dv";
}

const std::vector<Case> kCases = {
    {1, 4, 4, 64, 16, 16},  // MHA, N a multiple of the block
    {2, 4, 4, 37, 16, 16},  // MHA, B > 1, N not a multiple of the block
    {2, 8, 2, 50, 8, 16},   // GQA, 4 q heads per kv head
    {1, 6, 3, 41, 8, 7},    // GQA, odd block
    {2, 4, 1, 33, 16, 8},   // one kv head for all q heads (multi-query)
    {1, 4, 2, 20, 16, 64},  // block larger than N: one block, masked diagonal only
    {1, 2, 1, 9, 4, 1},     // block of one token
};

}  // namespace

TEST(BlockedAttention, Float32MatchesSdpaOutputsAndGradients) {
  for (const auto& c : kCases) {
    torch::manual_seed(1000 + c.N);
    auto q = torch::randn({c.B, c.H, c.N, c.dh});
    auto k = torch::randn({c.B, c.Hkv, c.N, c.dh});
    auto v = torch::randn({c.B, c.Hkv, c.N, c.dh});
    auto g = torch::randn({c.B, c.H, c.N, c.dh});
    AttentionKernel blocked{AttentionKernel::Kind::Blocked, c.block};
    auto got = run([&](auto& a, auto& b, auto& d) { return causal_attention(a, b, d, blocked); }, q, k, v, g);
    auto ref = run(sdpa, q, k, v, g);
    EXPECT_EQ(got.out.scalar_type(), at::kFloat);
    EXPECT_EQ(got.dk.sizes(), k.sizes()) << "dk must have the kv heads' shape, not the repeated one";
    expect_close(got, ref, 1e-5, 1e-5, name(c));
  }
}

TEST(BlockedAttention, DoubleMatchesNaiveSoftmax) {
  // An independent reference (explicit mask + softmax) in double: only summation order differs.
  for (const auto& c : kCases) {
    torch::manual_seed(2000 + c.N);
    auto q = torch::randn({c.B, c.H, c.N, c.dh}, at::kDouble);
    auto k = torch::randn({c.B, c.Hkv, c.N, c.dh}, at::kDouble);
    auto v = torch::randn({c.B, c.Hkv, c.N, c.dh}, at::kDouble);
    auto g = torch::randn({c.B, c.H, c.N, c.dh}, at::kDouble);
    AttentionKernel blocked{AttentionKernel::Kind::Blocked, c.block};
    auto got = run([&](auto& a, auto& b, auto& d) { return causal_attention(a, b, d, blocked); }, q, k, v, g);
    auto ref = run(naive, q, k, v, g);
    expect_close(got, ref, 1e-12, 1e-12, name(c) + " (double)");
  }
}

TEST(BlockedAttention, FirstTokenAttendsOnlyToItself) {
  // Hand-computed: token 0 sees only key 0, so out[0] = v[0]; token 1 averages v[0], v[1]
  // with weights softmax(q1.k0, q1.k1) / sqrt(dh).
  auto q = torch::tensor({1.0, 0.0, 0.0, 2.0, 5.0, 5.0}, at::kFloat).view({1, 1, 3, 2});
  auto k = torch::tensor({1.0, 0.0, 0.0, 1.0, 1.0, 1.0}, at::kFloat).view({1, 1, 3, 2});
  auto v = torch::tensor({1.0, 2.0, 3.0, 4.0, 100.0, 100.0}, at::kFloat).view({1, 1, 3, 2});
  auto out = causal_attention(q, k, v, AttentionKernel{AttentionKernel::Kind::Blocked, 2});
  EXPECT_NEAR(out[0][0][0][0].item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(out[0][0][0][1].item<double>(), 2.0, 1e-6);
  // token 1: scores (0, 2)/sqrt(2); weights w0 = 1/(1+e^sqrt2), w1 = 1 - w0; key 2 is masked
  const double w0 = 1.0 / (1.0 + std::exp(std::sqrt(2.0)));
  EXPECT_NEAR(out[0][0][1][0].item<double>(), w0 * 1 + (1 - w0) * 3, 1e-6);
  EXPECT_NEAR(out[0][0][1][1].item<double>(), w0 * 2 + (1 - w0) * 4, 1e-6);
}

TEST(BlockedAttention, NonContiguousInputsAsTheModelPassesThem) {
  // The model hands (B, n, H, dh) tensors transposed to (B, H, n, dh).
  torch::manual_seed(7);
  auto q = torch::randn({2, 45, 8, 16}).transpose(1, 2);
  auto k = torch::randn({2, 45, 2, 16}).transpose(1, 2);
  auto v = torch::randn({2, 45, 2, 16}).transpose(1, 2);
  auto g = torch::randn({2, 8, 45, 16});
  AttentionKernel blocked{AttentionKernel::Kind::Blocked, 16};
  auto got =
      run([&](auto& a, auto& b,
              auto& d) { return causal_attention(a.transpose(1, 2).contiguous().transpose(1, 2), b, d, blocked); },
          q, k, v, g);
  auto ref = run(sdpa, q, k, v, g);
  expect_close(got, ref, 1e-5, 1e-5, "transposed inputs");
}

TEST(BlockedAttention, Bfloat16AccumulatesInFloat32) {
  for (const auto& c : {Case{2, 4, 4, 70, 32, 32}, Case{1, 8, 2, 100, 16, 24}}) {
    torch::manual_seed(3000 + c.N);
    auto q = torch::randn({c.B, c.H, c.N, c.dh}).to(at::kBFloat16);
    auto k = torch::randn({c.B, c.Hkv, c.N, c.dh}).to(at::kBFloat16);
    auto v = torch::randn({c.B, c.Hkv, c.N, c.dh}).to(at::kBFloat16);
    auto g = torch::randn({c.B, c.H, c.N, c.dh}).to(at::kBFloat16);
    AttentionKernel blocked{AttentionKernel::Kind::Blocked, c.block};
    auto got = run([&](auto& a, auto& b, auto& d) { return causal_attention(a, b, d, blocked); }, q, k, v, g);
    EXPECT_EQ(got.out.scalar_type(), at::kBFloat16);
    EXPECT_EQ(got.dq.scalar_type(), at::kBFloat16);
    EXPECT_EQ(got.dk.scalar_type(), at::kBFloat16);
    // Reference: fp32 SDPA of the same (bf16-valued) inputs.
    auto ref = run(sdpa, q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), g.to(at::kFloat));
    expect_close(got, ref, 1e-2, 2e-2, name(c) + " (bf16)");
    // and at least as close as the bf16 SDPA (math kernel in bf16) is
    auto bf = run(sdpa, q, k, v, g);
    EXPECT_LE(rel(got.out, ref.out), rel(bf.out, ref.out) + 1e-3) << name(c);
  }
}

TEST(BlockedAttention, KernelSelection) {
  EXPECT_EQ(attention_kernel_for("auto", 128, /*on_cuda=*/false).kind, AttentionKernel::Kind::Blocked);
  EXPECT_EQ(attention_kernel_for("auto", 128, /*on_cuda=*/false).block, 128);
  EXPECT_EQ(attention_kernel_for("auto", 128, /*on_cuda=*/true).kind, AttentionKernel::Kind::Sdpa);
  EXPECT_EQ(attention_kernel_for("sdpa", 128, false).kind, AttentionKernel::Kind::Sdpa);
  EXPECT_EQ(attention_kernel_for("blocked", 64, true).kind, AttentionKernel::Kind::Blocked);
}

TEST(BlockedAttention, RefusesMismatchedShapes) {
  AttentionKernel blocked{AttentionKernel::Kind::Blocked, 16};
  EXPECT_THROW(
      causal_attention(torch::randn({1, 6, 8, 4}), torch::randn({1, 4, 8, 4}), torch::randn({1, 4, 8, 4}), blocked),
      c10::Error);
  EXPECT_THROW(
      causal_attention(torch::randn({1, 4, 8, 4}), torch::randn({1, 4, 9, 4}), torch::randn({1, 4, 9, 4}), blocked),
      c10::Error);
}
