// The model against an independent, deliberately naive implementation of Hugging Face's
// LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM math
// (per-head loops, explicit causal softmax, rotate_half RoPE with the default, linear,
// llama3 and yarn frequencies written as scalar loops from modeling_rope_utils' formulas),
// in fp32 on one process. Tolerance: 1e-5 absolute on logits of O(1), loss 1e-5 relative.
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

// RoPE inverse frequencies (dh/2) from Hugging Face's published formulas
// (modeling_rope_utils: default, linear, llama3, yarn), scalar double loops. *scale: the
// factor cos and sin are multiplied by (yarn's attention factor).
std::vector<double> ref_inv_freq(const ModelConfig& c, int64_t dh, double* scale) {
  std::vector<double> f(dh / 2);
  for (int64_t i = 0; i < dh / 2; ++i) f[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / dh);
  *scale = 1.0;
  const double k = c.rope_factor;
  if (c.rope_type == "linear") {
    for (auto& x : f) x /= k;
  } else if (c.rope_type == "llama3") {
    // wavelength 2pi/f: short (< L/high) kept, long (> L/low) divided by k, between: blend
    const double L = static_cast<double>(c.rope_original_max_position_embeddings);
    const double lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    for (auto& x : f) {
      const double wl = 2 * M_PI / x;
      if (wl < L / hi) continue;
      if (wl > L / lo) {
        x /= k;
        continue;
      }
      const double s = (L / wl - lo) / (hi - lo);
      x = (1 - s) * x / k + s * x;
    }
  } else if (c.rope_type == "yarn") {
    const double L = c.rope_original_max_position_embeddings > 0
                         ? static_cast<double>(c.rope_original_max_position_embeddings)
                         : static_cast<double>(c.max_position_embeddings);
    // dimension index at which a wavelength completes r rotations within L
    auto dim_for = [&](double r) { return dh * std::log(L / (r * 2 * M_PI)) / (2 * std::log(c.rope_theta)); };
    double a = dim_for(c.rope_beta_fast), b = dim_for(c.rope_beta_slow);
    if (c.rope_truncate) a = std::floor(a), b = std::ceil(b);
    a = std::max(a, 0.0);
    b = std::min(b, static_cast<double>(dh - 1));
    if (a == b) b += 0.001;
    for (int64_t i = 0; i < dh / 2; ++i) {
      const double ramp =
          std::min(1.0, std::max(0.0, (i - a) / (b - a)));  // 0: extrapolate (keep), 1: interpolate (/k)
      f[i] = (f[i] / k) * ramp + f[i] * (1 - ramp);
    }
    *scale = c.rope_attention_factor > 0 ? c.rope_attention_factor : (k <= 1 ? 1.0 : 0.1 * std::log(k) + 1.0);
  }
  return f;
}

// Reference forward: ids (T) -> logits (T, V), single sequence at positions pos0..pos0+T-1.
// Families as Hugging Face's modeling files define them: Llama (attention_bias: q/k/v/o
// biases), Mistral (no biases), Qwen2 (q/k/v biases, no o bias), Qwen3 (attention_bias
// like Llama, RMSNorm over each head of q and k before RoPE).
at::Tensor reference_logits(LlamaModel& m, const at::Tensor& ids, int64_t pos0 = 0) {
  const auto& c = m.config();
  const int64_t T = ids.size(0), H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t dh = c.explicit_head_dim > 0 ? c.explicit_head_dim : c.hidden_size / H;
  const std::string fam = c.model_type;
  const bool qkv_b = fam == "qwen2" || ((fam == "llama" || fam == "qwen3") && c.attention_bias);
  const bool o_b = (fam == "llama" || fam == "qwen3") && c.attention_bias;
  auto P = [&](const std::string& n) { return m.param(n).detach(); };
  auto x = P("model.embed_tokens.weight").index_select(0, ids);  // (T, d)
  // RoPE tables: angle(t, i) = t * inv_freq_i, i < dh/2, duplicated for both halves. HF
  // holds inv_freq and the angles in fp32, so they are rounded to float here as well.
  double scale = 1;
  const auto inv = ref_inv_freq(c, dh, &scale);
  auto cos = torch::empty({T, dh}), sin = torch::empty({T, dh});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < dh / 2; ++i) {
      const float ang = static_cast<float>(pos0 + t) * static_cast<float>(inv[i]);
      cos[t][i] = cos[t][i + dh / 2] = std::cos(static_cast<double>(ang)) * scale;
      sin[t][i] = sin[t][i + dh / 2] = std::sin(static_cast<double>(ang)) * scale;
    }
  auto rot = [&](const at::Tensor& v) {  // v (T, dh): v*cos + rotate_half(v)*sin
    auto r = torch::cat({-v.slice(1, dh / 2, dh), v.slice(1, 0, dh / 2)}, 1);
    return v * cos + r * sin;
  };
  auto mask = torch::full({T, T}, -INFINITY).triu(1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto proj = [&](const std::string& name, const at::Tensor& in, bool bias) {
      auto y = lin(in, P(p + "self_attn." + name + ".weight"));
      return bias ? y + P(p + "self_attn." + name + ".bias") : y;
    };
    auto h = ref_rmsnorm(x, P(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto q = proj("q_proj", h, qkv_b), k = proj("k_proj", h, qkv_b), v = proj("v_proj", h, qkv_b);
    std::vector<at::Tensor> heads;
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t kvh = hd / (H / Hkv);  // GQA: consecutive q heads share a kv head
      auto qh = q.slice(1, hd * dh, (hd + 1) * dh), kh = k.slice(1, kvh * dh, (kvh + 1) * dh);
      if (fam == "qwen3") {
        qh = ref_rmsnorm(qh, P(p + "self_attn.q_norm.weight"), c.rms_norm_eps);
        kh = ref_rmsnorm(kh, P(p + "self_attn.k_norm.weight"), c.rms_norm_eps);
      }
      qh = rot(qh);
      kh = rot(kh);
      auto vh = v.slice(1, kvh * dh, (kvh + 1) * dh);
      auto s = at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(dh)) + mask;
      heads.push_back(at::matmul(torch::softmax(s, -1), vh));
    }
    x = x + proj("o_proj", torch::cat(heads, 1), o_b);
    auto h2 = ref_rmsnorm(x, P(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    auto g = lin(h2, P(p + "mlp.gate_proj.weight"));
    x = x + lin(g * torch::sigmoid(g) * lin(h2, P(p + "mlp.up_proj.weight")), P(p + "mlp.down_proj.weight"));
  }
  x = ref_rmsnorm(x, P("model.norm.weight"), c.rms_norm_eps);
  return lin(x, c.tie_word_embeddings ? P("model.embed_tokens.weight") : P("lm_head.weight"));
}

void check_against_reference(ModelConfig c, int64_t pos0 = 0) {
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
  auto got = m.forward_logits(ids, pos0)[0];
  auto want = reference_logits(m, ids[0], pos0);
  const double err = (got - want).abs().max().item<double>();
  EXPECT_LT(err, 1e-5) << "first values got " << got.flatten().slice(0, 0, 4) << " want "
                       << want.flatten().slice(0, 0, 4);
  // Loss = mean cross-entropy over shifted tokens, as LlamaForCausalLM computes it.
  auto labels = torch::cat({ids[0].slice(0, 1, T), torch::tensor({-100}, torch::kInt64)}).unsqueeze(0);
  const double loss = m.forward_loss_sum(ids, labels, pos0).item<double>() / (T - 1);
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
  const std::vector<std::string> want = {"model.embed_tokens.weight",
                                         "model.layers.0.self_attn.q_proj.weight",
                                         "model.layers.0.self_attn.k_proj.weight",
                                         "model.layers.0.self_attn.v_proj.weight",
                                         "model.layers.0.self_attn.o_proj.weight",
                                         "model.layers.0.mlp.gate_proj.weight",
                                         "model.layers.0.mlp.up_proj.weight",
                                         "model.layers.0.mlp.down_proj.weight",
                                         "model.layers.0.input_layernorm.weight",
                                         "model.layers.0.post_attention_layernorm.weight",
                                         "model.norm.weight",
                                         "lm_head.weight"};
  EXPECT_EQ(names, want);
  int64_t total = 0;
  for (auto& [n, t] : m.named_parameters()) total += t.numel();
  EXPECT_EQ(total, c.num_parameters());
}

// ---- families x RoPE types (docs/CONTRACTS.md) ---------------------------------------

namespace {

// Each RoPE type on a config whose dh = 16 frequencies fall in every region of the type:
// llama3 (L = 1024, low 1, high 8): wavelengths 6.3..63 kept, 199 and 628 blended,
// 1987.. divided; yarn (L = 256, factor 4): ramp 0, .25, .5, .75, 1, 1, 1, 1.
void set_rope(ModelConfig& c, const std::string& type) {
  c.rope_type = type;
  c.rope_theta = 10000.0;
  if (type == "linear") c.rope_factor = 2.0;
  if (type == "llama3") {
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 8.0;
    c.rope_original_max_position_embeddings = 1024;
  }
  if (type == "yarn") {
    c.rope_factor = 4.0;
    c.rope_original_max_position_embeddings = 256;
    c.max_position_embeddings = 1024;
  }
}

ModelConfig family(const std::string& fam) {
  ModelConfig c;
  c.model_type = fam;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.rms_norm_eps = 1e-6;
  if (fam == "llama") c.attention_bias = true;
  if (fam == "qwen3") {
    c.hidden_size = 24;  // explicit head_dim 16 != 24 / 2
    c.explicit_head_dim = 16;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.attention_bias = false;
  }
  return c;
}

void every_rope_type(const std::string& fam) {
  for (const char* type : {"default", "linear", "llama3", "yarn"}) {
    SCOPED_TRACE(fam + " rope " + type);
    ModelConfig c = family(fam);
    set_rope(c, type);
    check_against_reference(c, 37);  // positions 37..60: the scaled types differ from default there
  }
}

}  // namespace

TEST(ModelReference, LlamaWithAttentionBiasEveryRopeType) { every_rope_type("llama"); }
TEST(ModelReference, MistralEveryRopeType) { every_rope_type("mistral"); }
TEST(ModelReference, Qwen2QkvBiasEveryRopeType) { every_rope_type("qwen2"); }
TEST(ModelReference, Qwen3HeadDimQkNormEveryRopeType) { every_rope_type("qwen3"); }

TEST(ModelReference, Qwen3WithAttentionBiasAndYarnAttentionFactor) {
  ModelConfig c = family("qwen3");
  c.attention_bias = true;
  set_rope(c, "yarn");
  c.rope_attention_factor = 1.3;
  c.rope_truncate = false;
  c.rope_beta_fast = 16;
  check_against_reference(c, 5);
}

TEST(ModelReference, RopeTypesChangeTheFrequencies) {
  // The reference check would pass trivially if both sides ignored rope_type: the engine's
  // frequencies must differ from the default ones for each scaled type, as HF's do.
  ModelConfig c = family("llama");
  const int64_t dh = c.head_dim();
  auto base = rope_inv_freq(c).first;
  for (const char* type : {"linear", "llama3", "yarn"}) {
    ModelConfig s = c;
    set_rope(s, type);
    auto [f, scale] = rope_inv_freq(s);
    double ref_scale = 0;
    const auto want = ref_inv_freq(s, dh, &ref_scale);
    ASSERT_EQ(f.numel(), dh / 2);
    EXPECT_GT((f - base).abs().max().item<double>(), 1e-3) << type;
    for (int64_t i = 0; i < dh / 2; ++i)
      EXPECT_NEAR(f[i].item<double>(), want[i], 1e-6 * want[i]) << type << " i=" << i;
    EXPECT_NEAR(scale, ref_scale, 1e-12) << type;
  }
}

TEST(ModelReference, FamilyParameterNamesAreHuggingFaces) {
  auto names = [](const ModelConfig& c) {
    LlamaModel m(c, ParallelConfig{}, torch::kFloat32, nullptr);
    std::vector<std::string> v;
    int64_t total = 0;
    for (auto& [n, t] : m.named_parameters())
      if (n.rfind("model.layers.0.self_attn.", 0) == 0) v.push_back(n.substr(25));
    for (auto& [n, t] : m.named_parameters()) total += t.numel();
    EXPECT_EQ(total, c.num_parameters()) << c.model_type;
    return v;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(family("qwen2")), (V{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight",
                                       "v_proj.bias", "o_proj.weight"}));
  EXPECT_EQ(names(family("qwen3")),
            (V{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_norm.weight", "k_norm.weight"}));
  EXPECT_EQ(names(family("mistral")), (V{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}));
  EXPECT_EQ(names(family("llama")), (V{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight",
                                       "v_proj.bias", "o_proj.weight", "o_proj.bias"}));
  LlamaModel q3(family("qwen3"), ParallelConfig{}, torch::kFloat32, nullptr);
  EXPECT_EQ(q3.param("model.layers.0.self_attn.q_proj.weight").sizes(),
            (std::vector<int64_t>{64, 24}));  // H*head_dim x d
  EXPECT_EQ(q3.param("model.layers.0.self_attn.o_proj.weight").sizes(), (std::vector<int64_t>{24, 64}));
  EXPECT_EQ(q3.param("model.layers.0.self_attn.k_norm.weight").sizes(), (std::vector<int64_t>{16}));
}
