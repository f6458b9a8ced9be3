// TiledMLP and tiled logits + loss as autograd functions (see tiled.hpp).
#include "tiled.hpp"

#include "rms_norm.hpp"

namespace ulysses {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// silu(g) * u saving only g and u (autograd kept silu(g) too: one more (T, f) tensor per MLP);
// the backward is autograd's, kernel for kernel (equal gradients).
class SiluMulFn : public torch::autograd::Function<SiluMulFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor g, at::Tensor u) {
    ctx->save_for_backward({g, u});
    return torch::silu(g) * u;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &g = sv[0], &u = sv[1], &gp = grads[0];
    at::Tensor du, dg;
    if (ctx->needs_input_grad(1)) du = torch::silu(g).mul_(gp);  // MulBackward's grad * silu(g)
    if (ctx->needs_input_grad(0)) {
      dg = gp * u;                       // MulBackward's grad * u ...
      at::silu_backward_out(dg, dg, g);  // ... through SiluBackward, in place: two (T, f) made, not three
    }
    return {dg, du};
  }
};

at::Tensor swiglu(const at::Tensor& h, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return torch::linear(SiluMulFn::apply(torch::linear(h, gate), torch::linear(h, up)), down);
}

// Accumulates a weight gradient over tiles in fp32 (bf16 compute sums many tiles).
void acc(at::Tensor& total, const at::Tensor& g) {
  if (!g.defined()) return;
  if (!total.defined())
    total = g.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  else
    total.add_(g);
}

class TiledMlpFn : public torch::autograd::Function<TiledMlpFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor h, at::Tensor gate, at::Tensor up, at::Tensor down,
                            int64_t tile) {
    const auto d = h.size(-1);
    auto h2 = h.reshape({-1, d});                                   // (B*n, d)
    auto out = at::empty({h2.size(0), down.size(0)}, h.options());  // (B*n, d)
    for (int64_t s = 0; s < h2.size(0); s += tile) {
      const auto len = std::min(tile, h2.size(0) - s);
      out.narrow(0, s, len).copy_(swiglu(h2.narrow(0, s, len), gate, up, down));  // one (T, f) working set
    }
    ctx->save_for_backward({h, gate, up, down});
    ctx->saved_data["tile"] = tile;
    return out.view(h.sizes());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const auto tile = ctx->saved_data["tile"].toInt();
    const at::Tensor& h = sv[0];
    const auto d = h.size(-1);
    auto h2 = h.reshape({-1, d});
    auto g2 = grads[0].reshape({-1, d});
    auto dh = at::empty_like(h2);  // (B*n, d)
    at::Tensor dgate, dup, ddown;
    auto gw = sv[1].detach().requires_grad_(true), uw = sv[2].detach().requires_grad_(true),
         dw = sv[3].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    for (int64_t s = 0; s < h2.size(0); s += tile) {
      const auto len = std::min(tile, h2.size(0) - s);
      auto hc = h2.narrow(0, s, len).detach().requires_grad_(true);
      auto y = swiglu(hc, gw, uw, dw);  // recompute this tile only
      auto g = torch::autograd::grad({y}, {hc, gw, uw, dw}, {g2.narrow(0, s, len)});
      dh.narrow(0, s, len).copy_(g[0]);
      acc(dgate, g[1]);
      acc(dup, g[2]);
      acc(ddown, g[3]);
    }
    return {dh.view(h.sizes()), dgate.to(sv[1].scalar_type()), dup.to(sv[2].scalar_type()),
            ddown.to(sv[3].scalar_type()), at::Tensor()};
  }
};

class TiledLossFn : public torch::autograd::Function<TiledLossFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor norm_w, at::Tensor head_w, at::Tensor labels,
                            double eps, int64_t tile, prof::Tracer* tracer, bool grads) {
    const auto d = x.size(-1);
    auto x2 = x.reshape({-1, d});  // (B*n, d)
    auto l2 = labels.reshape({-1});
    auto dx = at::empty_like(x2);
    at::Tensor dnorm, dhead;
    // tiles' fp32 loss sums added in fp64 (docs/NUMERICS.md: no fp32 rounding growing with the tile count)
    at::Tensor total = at::zeros({}, x.options().dtype(torch::kFloat64));
    auto nw = norm_w.detach().requires_grad_(true), hw = head_w.detach().requires_grad_(true);
    const bool need_w = norm_w.requires_grad() || head_w.requires_grad();
    torch::AutoGradMode on(grads);
    for (int64_t s = 0; s < x2.size(0); s += tile) {
      const auto len = std::min(tile, x2.size(0) - s);
      prof::RangeInfo ri;
      ri.phase = prof::Phase::LmHead;
      ri.dir = prof::Direction::Forward;
      ri.chunk = static_cast<int32_t>(s / tile);
      auto xc = x2.narrow(0, s, len).detach().requires_grad_(true);
      at::Tensor loss;
      {
        prof::ScopedRange range(tracer, ri);
        auto logits = torch::linear(rms_norm(xc, nw, eps), hw);  // (T, V): the only logits alive
        loss = torch::nn::functional::cross_entropy(
            logits.to(torch::kFloat32), l2.narrow(0, s, len),
            torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
      }
      total.add_(loss.detach());
      if (!grads) continue;                // no autograd around this call: the loss is all that is needed
      ri.dir = prof::Direction::Backward;  // this tile's lm_head + loss backward, run inside the forward
      prof::ScopedRange range(tracer, ri);
      auto g = torch::autograd::grad({loss}, {xc, nw, hw});
      dx.narrow(0, s, len).copy_(g[0]);
      if (need_w) {
        acc(dnorm, g[1]);
        acc(dhead, g[2]);
      }
    }
    ctx->save_for_backward(
        {dx.view(x.sizes()), dnorm.defined() ? dnorm : at::Tensor(), dhead.defined() ? dhead : at::Tensor()});
    ctx->saved_data["norm_dtype"] = static_cast<int64_t>(norm_w.scalar_type());
    ctx->saved_data["head_dtype"] = static_cast<int64_t>(head_w.scalar_type());
    return total.to(torch::kFloat32);  // the loss sum in fp32, as the untiled cross-entropy's
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const auto g = grads[0];  // scalar
    auto scale = [&](const at::Tensor& t, c10::ScalarType dt) { return t.defined() ? (t * g).to(dt) : at::Tensor(); };
    return {scale(sv[0], sv[0].scalar_type()),
            scale(sv[1], static_cast<c10::ScalarType>(ctx->saved_data["norm_dtype"].toInt())),
            scale(sv[2], static_cast<c10::ScalarType>(ctx->saved_data["head_dtype"].toInt())),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// tiled_tokens' autograd function: the tiled inputs, then the weights, as inputs of their own.
class TiledTokensFn : public torch::autograd::Function<TiledTokensFn> {
 public:
  static tensor_list forward(AutogradContext* ctx, at::TensorList tiled, at::TensorList weights, const TileFn* fn,
                             int64_t tile) {
    const int64_t n = tiled[0].size(1);
    const std::vector<at::Tensor> ws(weights.begin(), weights.end());
    int64_t needs = 0;  // bit i: input i (the tiled ones, then the weights) takes a gradient
    for (size_t i = 0; i < tiled.size() + weights.size(); ++i)
      if ((i < tiled.size() ? tiled[i] : weights[i - tiled.size()]).requires_grad()) needs |= int64_t{1} << i;
    std::vector<at::Tensor> outs;  // (B, n, ...) each, written tile by tile
    for (int64_t s = 0; s < n; s += tile) {
      const int64_t len = std::min(tile, n - s);
      std::vector<at::Tensor> tiles;
      for (const auto& t : tiled) tiles.push_back(t.narrow(1, s, len));
      const auto o = (*fn)(tiles, ws);  // one tile's working set
      if (outs.empty())
        for (const auto& t : o) {
          auto shape = t.sizes().vec();
          shape[1] = n;
          outs.push_back(at::empty(shape, t.options()));
        }
      for (size_t j = 0; j < o.size(); ++j) outs[j].narrow(1, s, len).copy_(o[j]);
    }
    std::vector<at::Tensor> saved(tiled.begin(), tiled.end());
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["fn"] = reinterpret_cast<int64_t>(fn);
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["tiled"] = static_cast<int64_t>(tiled.size());
    ctx->saved_data["needs"] = needs;
    return outs;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const auto* fn = reinterpret_cast<const TileFn*>(ctx->saved_data["fn"].toInt());
    const int64_t tile = ctx->saved_data["tile"].toInt(), needs = ctx->saved_data["needs"].toInt();
    const auto nt = static_cast<size_t>(ctx->saved_data["tiled"].toInt());
    const size_t nw = sv.size() - nt;
    auto takes = [&](size_t i) { return ((needs >> i) & 1) != 0; };
    std::vector<at::Tensor> ws;
    for (size_t i = 0; i < nw; ++i) {
      auto w = sv[nt + i].detach();
      ws.push_back(takes(nt + i) ? w.requires_grad_(true) : w);
    }
    tensor_list out(nt + nw + 2);  // + fn and tile: no gradient
    std::vector<at::Tensor> wsum(nw);
    const int64_t n = sv[0].size(1);
    torch::AutoGradMode on(true);
    for (int64_t s = 0; s < n; s += tile) {
      const int64_t len = std::min(tile, n - s);
      std::vector<at::Tensor> tiles, wrt;
      std::vector<size_t> wrt_index;
      for (size_t i = 0; i < nt; ++i) {
        auto t = sv[i].narrow(1, s, len).detach();
        if (takes(i)) {
          t.requires_grad_(true);
          wrt.push_back(t);
          wrt_index.push_back(i);
        }
        tiles.push_back(t);
      }
      for (size_t i = 0; i < nw; ++i)
        if (takes(nt + i)) {
          wrt.push_back(ws[i]);
          wrt_index.push_back(nt + i);
        }
      const auto o = (*fn)(tiles, ws);  // recompute this tile only
      std::vector<at::Tensor> ys, gys;
      for (size_t j = 0; j < o.size(); ++j)
        if (grads[j].defined() && o[j].requires_grad()) {
          ys.push_back(o[j]);
          gys.push_back(grads[j].narrow(1, s, len));
        }
      if (ys.empty() || wrt.empty()) continue;
      const auto g = torch::autograd::grad(ys, wrt, gys, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) {
        if (!g[k].defined()) continue;
        const size_t i = wrt_index[k];
        if (i >= nt) {
          acc(wsum[i - nt], g[k]);
          continue;
        }
        if (!out[i].defined()) out[i] = at::zeros_like(sv[i]);
        out[i].narrow(1, s, len).copy_(g[k]);
      }
    }
    for (size_t i = 0; i < nw; ++i)
      if (wsum[i].defined()) out[nt + i] = wsum[i].to(sv[nt + i].scalar_type());
    return out;
  }
};

}  // namespace

std::vector<at::Tensor> tiled_tokens(const TileFn* fn, const std::vector<at::Tensor>& tiled,
                                     const std::vector<at::Tensor>& weights, int64_t tile) {
  if (tile <= 0) return (*fn)(tiled, weights);
  if (tiled.size() + weights.size() > 63) throw std::invalid_argument("tiled_tokens: more than 63 inputs");
  return TiledTokensFn::apply(at::TensorList(tiled), at::TensorList(weights), fn, tile);
}

at::Tensor tiled_mlp(const at::Tensor& h, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
                     int64_t tile) {
  if (tile <= 0) return swiglu(h, gate, up, down);
  return TiledMlpFn::apply(h, gate, up, down, tile);
}

at::Tensor tiled_logits_loss_sum(const at::Tensor& x, const at::Tensor& norm_w, double eps, const at::Tensor& head_w,
                                 const at::Tensor& labels, int64_t tile, prof::Tracer* tracer) {
  const bool grads =
      torch::GradMode::is_enabled() && (x.requires_grad() || norm_w.requires_grad() || head_w.requires_grad());
  return TiledLossFn::apply(x, norm_w, head_w, labels, eps, tile, tracer, grads);
}

}  // namespace ulysses
