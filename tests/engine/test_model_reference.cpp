// The model against an independent, deliberately naive implementation of Hugging Face
// LlamaForCausalLM's math (per-head loops, explicit causal softmax, rotate_half RoPE),
// in fp32 on one process. Tolerance: 1e-5 absolute on logits of O(1).
#include <gtest/gtest.h>

#include <cmath>

#include "model.hpp"

using namespace ulysses;

namespace {

// y = x W^T, written out as a matmul of the transposed weight (no torch::linear).
at::Tensor lin(const at::Tensor& x, const at::Tensor& W) { return at::matmul(x, W.t()); }

at::Tensor ref_rmsnorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  auto ms = (x * x).sum(-1, true) / static_cast<double>(x.size(-1));
  return w * (x / (ms + eps).sqrt());
}

// Reference forward: ids (T) -> logits (T, V), single sequence.
at::Tensor reference_logits(LlamaModel& m, const at::Tensor& ids) {
  const auto& c = m.config();
  const int64_t T = ids.size(0), H = c.num_attention_heads, Hkv = c.num_key_value_heads, dh = c.head_dim();
  auto P = [&](const std::string& n) { return m.param(n).detach(); };
  auto x = P("model.embed_tokens.weight").index_select(0, ids);  // (T, d)
  // RoPE tables: angle(t, i) = t / theta^(2i/dh), i < dh/2, duplicated for both halves
  auto cos = torch::empty({T, dh}), sin = torch::empty({T, dh});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < dh / 2; ++i) {
      const double ang = static_cast<double>(t) / std::pow(c.rope_theta, 2.0 * i / dh);
      cos[t][i] = cos[t][i + dh / 2] = std::cos(ang);
      sin[t][i] = sin[t][i + dh / 2] = std::sin(ang);
    }
  auto rot = [&](const at::Tensor& v) {  // v (T, dh): v*cos + rotate_half(v)*sin
    auto r = torch::cat({-v.slice(1, dh / 2, dh), v.slice(1, 0, dh / 2)}, 1);
    return v * cos + r * sin;
  };
  auto mask = torch::full({T, T}, -INFINITY).triu(1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto h = ref_rmsnorm(x, P(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto q = lin(h, P(p + "self_attn.q_proj.weight")), k = lin(h, P(p + "self_attn.k_proj.weight")),
         v = lin(h, P(p + "self_attn.v_proj.weight"));
    std::vector<at::Tensor> heads;
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t kvh = hd / (H / Hkv);  // GQA: consecutive q heads share a kv head
      auto qh = rot(q.slice(1, hd * dh, (hd + 1) * dh));
      auto kh = rot(k.slice(1, kvh * dh, (kvh + 1) * dh));
      auto vh = v.slice(1, kvh * dh, (kvh + 1) * dh);
      auto s = at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(dh)) + mask;
      heads.push_back(at::matmul(torch::softmax(s, -1), vh));
    }
    x = x + lin(torch::cat(heads, 1), P(p + "self_attn.o_proj.weight"));
    auto h2 = ref_rmsnorm(x, P(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    auto g = lin(h2, P(p + "mlp.gate_proj.weight"));
    x = x + lin(g * torch::sigmoid(g) * lin(h2, P(p + "mlp.up_proj.weight")), P(p + "mlp.down_proj.weight"));
  }
  x = ref_rmsnorm(x, P("model.norm.weight"), c.rms_norm_eps);
  return lin(x, c.tie_word_embeddings ? P("model.embed_tokens.weight") : P("lm_head.weight"));
}

void check_against_reference(ModelConfig c) {
  torch::manual_seed(3);
  ParallelConfig par;
  LlamaModel m(c, par, torch::kFloat32, nullptr);
  m.init_parameters(11);
  {
    // Perturb norms away from 1 so their weights matter.
    torch::NoGradGuard ng;
    for (auto& [n, t] : m.named_parameters())
      if (t.dim() == 1) t.add_(torch::randn_like(t) * 0.1);
  }
  const int64_t T = 24;
  auto ids = torch::randint(c.vocab_size, {1, T}, torch::kInt64);
  torch::NoGradGuard ng;
  auto got = m.forward_logits(ids, 0)[0];
  auto want = reference_logits(m, ids[0]);
  const double err = (got - want).abs().max().item<double>();
  EXPECT_LT(err, 1e-5) << "first values got " << got.flatten().slice(0, 0, 4) << " want " << want.flatten().slice(0, 0, 4);
  // Loss = mean cross-entropy over shifted tokens, as LlamaForCausalLM computes it.
  auto labels = torch::cat({ids[0].slice(0, 1, T), torch::tensor({-100}, torch::kInt64)}).unsqueeze(0);
  const double loss = m.forward_loss_sum(ids, labels, 0).item<double>() / (T - 1);
  auto lp = torch::log_softmax(want, -1);
  double ref = 0;
  for (int64_t t = 0; t + 1 < T; ++t) ref -= lp[t][ids[0][t + 1].item<int64_t>()].item<double>();
  ref /= (T - 1);
  EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref));
}

}  // namespace

TEST(ModelReference, MhaUntied) {
  ModelConfig c;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  check_against_reference(c);
}

TEST(ModelReference, GqaTiedRopeTheta) {
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 48;
  c.intermediate_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.tie_word_embeddings = true;
  c.rope_theta = 500000.0;
  check_against_reference(c);
}

TEST(ModelReference, ParameterNamesAreHuggingFaces) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  LlamaModel m(c, ParallelConfig{}, torch::kFloat32, nullptr);
  std::vector<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.push_back(n);
  const std::vector<std::string> want = {
      "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
      "model.layers.0.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"};
  EXPECT_EQ(names, want);
  int64_t total = 0;
  for (auto& [n, t] : m.named_parameters()) total += t.numel();
  EXPECT_EQ(total, c.num_parameters());
}
