// Flash-attention allocations without the math (see flash_shapes.hpp).
#include "flash_shapes.hpp"

#include <cmath>
#include <limits>

namespace ulysses {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class FlashShapesFn : public torch::autograd::Function<FlashShapesFn> {
 public:
  // q, k, v (B, H, N, dh), k and v already expanded to H heads.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    auto out = at::empty_like(q, at::MemoryFormat::Contiguous);                              // (B, H, N, dh)
    auto lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));  // (B, H, N) fp32
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto s = ctx->get_saved_variables();
    const auto& q = s[0];
    auto dout = grads[0].contiguous();                                    // (B, H, N, dh)
    auto dq_accum = at::empty(q.sizes(), q.options().dtype(at::kFloat));  // (B, H, N, dh) fp32 scratch
    auto softmax_d =
        at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));  // (B, H, N) fp32 scratch
    auto dq = at::empty_like(q, at::MemoryFormat::Contiguous);
    auto dk = at::empty_like(s[1], at::MemoryFormat::Contiguous);
    auto dv = at::empty_like(s[2], at::MemoryFormat::Contiguous);
    (void)dq_accum;
    (void)softmax_d;
    return {dq, dk, dv};
  }
};

class EmbeddingShapesFn : public torch::autograd::Function<EmbeddingShapesFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids) {
    ctx->saved_data["V"] = weight.size(0);
    auto shape = ids.sizes().vec();
    shape.push_back(weight.size(1));
    return at::empty(shape, weight.options());  // (B, n, d)
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const int64_t V = ctx->saved_data["V"].toInt();
    return {at::zeros({V, grads[0].size(-1)}, grads[0].options()), at::Tensor()};  // (V, d)
  }
};

}  // namespace

at::Tensor embedding_shapes(const at::Tensor& weight, const at::Tensor& ids) {
  return EmbeddingShapesFn::apply(weight, ids);
}

namespace {
// (B, Hkv, N, dh) -> (B, H, N, dh), each kv head serving H/Hkv consecutive q heads.
at::Tensor expand_heads(const at::Tensor& t, int64_t H) {
  const int64_t Hkv = t.size(1);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "shape attention: q heads (", H, ") must be a multiple of kv heads (", Hkv, ")");
  if (Hkv == H) return t;
  const auto B = t.size(0), N = t.size(2), dh = t.size(3);
  return t.unsqueeze(2).expand({B, Hkv, H / Hkv, N, dh}).reshape({B, H, N, dh});
}
}  // namespace

at::Tensor flash_shapes_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flash_shapes_attention: q, k, v must be (B, H, N, dh)");
  return FlashShapesFn::apply(q, expand_heads(k, q.size(1)), expand_heads(v, q.size(1)));
}

at::Tensor shape_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, ShapeKernel kind,
                           int64_t block) {
  if (kind == ShapeKernel::FlashShapes) return flash_shapes_attention(q, k, v);
  if (kind == ShapeKernel::Blocked) {
    const int64_t b = std::min<int64_t>(std::max<int64_t>(1, block), q.size(2));
    auto tile =
        at::empty({q.size(0), q.size(1), b, b}, q.options().dtype(at::kFloat));  // one score tile, freed at once
    tile = at::Tensor();
    return flash_shapes_attention(q, k, v);
  }
  // The math SDPA (libtorch 1.13's composite _scaled_dot_product_attention_math) on meta-capable
  // ops, allocation for allocation: the causal mask made additive in q's dtype and added in place
  // to the scores, so nothing but the scaled q, k, v and the probabilities is saved (a
  // masked_fill here saved its (N, N) bool mask per layer: 16 MiB at 4096 tokens the real run
  // never holds; the measured activations were 10% under the plan).
  const int64_t N = q.size(2);
  auto ke = expand_heads(k, q.size(1)), ve = expand_heads(v, q.size(1));
  at::Tensor mask;  // (N, N) additive: 0 where attended, -inf above the diagonal
  {
    auto upper = at::ones({N, N}, q.options().dtype(at::kBool)).triu(1);  // (N, N) masked positions
    mask = at::zeros({N, N}, q.options()).masked_fill_(upper, -std::numeric_limits<double>::infinity());
  }
  auto scores = at::matmul(q * (1.0 / std::sqrt(double(q.size(3)))), ke.transpose(-2, -1));  // (B, H, N, N)
  scores.add_(mask);
  mask = at::Tensor();
  auto probs = at::softmax(scores, -1);
  return at::matmul(probs, ve);  // (B, H, N, dh)
}

}  // namespace ulysses
