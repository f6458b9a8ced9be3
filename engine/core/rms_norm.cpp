// RMSNorm with a hand-written backward (rms_norm.hpp).
#include "rms_norm.hpp"

namespace ulysses {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// RMSNorm as Hugging Face's LlamaRMSNorm computes it (fp32 statistics, the normalized input cast
// back, then the weight), saving only its input, the weight and the (..., 1) fp32 rstd: autograd
// over the same ops kept the fp32 copy of the input and the normalized input for backward
// (6 bytes per element in bf16, 4 in fp32). The backward is the one autograd ran, op for op
// (the same kernels in the same order: equal gradients), from the input and rstd.
class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, double eps) {
    const auto x32 = x.to(torch::kFloat32);
    const auto rstd = torch::rsqrt(x32.pow(2).mean(-1, true) + eps);  // (..., 1)
    ctx->save_for_backward({x, w, rstd});
    return w * (x32 * rstd).to(x.scalar_type());
  }
  // Autograd's values, op for op: ToCopy, w * xc (MulBackward), x32 * rstd (MulBackward, rstd's
  // grad summed over the row), RsqrtBackward (-0.5 g r^3), MeanBackward (g / d), PowBackward
  // (g * 2 x32), the two grads of x32 added; products in place where autograd made a new tensor
  // of the same values, so at most three fp32 (..., d) temporaries live at once.
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &x = sv[0], &w = sv[1], &rstd = sv[2];
    const at::Tensor& gy = grads[0];
    at::Tensor x32 = x.to(torch::kFloat32);
    at::Tensor gw;
    if (ctx->needs_input_grad(1)) gw = (gy * (x32 * rstd).to(x.scalar_type())).sum_to_size(w.sizes());
    at::Tensor gxh = (gy * w).to(torch::kFloat32);                                       // of x32 * rstd
    const at::Tensor gvar = -0.5 * (gxh * x32).sum_to_size(rstd.sizes()) * rstd.pow(3);  // of rstd, then rsqrt's
    at::Tensor gpow = x32.mul(2);                                                        // pow's 2 * x32 ...
    x32 = at::Tensor();
    gpow.mul_(gvar / x.size(-1));  // ... times mean's g / d
    gxh.mul_(rstd);                // mul's grad of x32
    gxh.add_(gpow);
    gpow = at::Tensor();
    return {gxh.to(x.scalar_type()), gw, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) { return RmsNormFn::apply(x, w, eps); }

}  // namespace ulysses
