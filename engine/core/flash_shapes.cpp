// Flash-attention allocations without the math (see flash_shapes.hpp).
#include "flash_shapes.hpp"

namespace ulysses {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class FlashShapesFn : public torch::autograd::Function<FlashShapesFn> {
 public:
  // q, k, v (B, H, N, dh), k and v already expanded to H heads.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    auto out = at::empty_like(q, at::MemoryFormat::Contiguous);                          // (B, H, N, dh)
    auto lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));  // (B, H, N) fp32
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto s = ctx->get_saved_variables();
    const auto& q = s[0];
    auto dout = grads[0].contiguous();  // (B, H, N, dh)
    auto dq_accum = at::empty(q.sizes(), q.options().dtype(at::kFloat));                      // (B, H, N, dh) fp32 scratch
    auto softmax_d = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));  // (B, H, N) fp32 scratch
    auto dq = at::empty_like(q, at::MemoryFormat::Contiguous);
    auto dk = at::empty_like(s[1], at::MemoryFormat::Contiguous);
    auto dv = at::empty_like(s[2], at::MemoryFormat::Contiguous);
    (void)dq_accum;
    (void)softmax_d;
    return {dq, dk, dv};
  }
};

}  // namespace

at::Tensor flash_shapes_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flash_shapes_attention: q, k, v must be (B, H, N, dh)");
  const int64_t H = q.size(1), Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "flash_shapes_attention: q heads (", H, ") must be a multiple of kv heads (", Hkv, ")");
  auto expand = [&](const at::Tensor& t) {  // (B, Hkv, N, dh) -> (B, H, N, dh), each kv head serving H/Hkv q heads
    if (Hkv == H) return t;
    const auto B = t.size(0), N = t.size(2), dh = t.size(3);
    return t.unsqueeze(2).expand({B, Hkv, H / Hkv, N, dh}).reshape({B, H, N, dh});
  };
  return FlashShapesFn::apply(q, expand(k), expand(v));
}

}  // namespace ulysses
