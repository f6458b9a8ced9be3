// Local causal attention: SDPA, or block-causal online softmax (see local_attention.hpp).
//
// Blocked kernel (FlashAttention-2 on CPU, with at:: matmuls on tiles):
//   forward, per kv head and query block i: running max m, running sum l and accumulator
//   acc over key blocks j <= i (blocks j > i are fully masked and skipped; only j == i
//   needs the triangular mask); out = acc / l, lse = m + log l. Saves q, k, v, out, lse.
//   backward, per kv head and key block j, over query blocks i >= j: S = q k^T * scale,
//   P = exp(S - lse), dV += P^T dO, dP = dO V^T, dS = P o (dP - D) with D = rowsum(dO o O),
//   dQ += dS K * scale, dK += dS^T Q * scale.
// GQA without repeating k/v: the G = H/Hkv q heads of one kv head are laid out as
// (N, G, dh), so a query block of that group is one (bq*G, dh) tile whose rows are
// (token, head) pairs; row r belongs to token i0 + r / G. Head h uses kv head h / G.
// Everything accumulates in fp32 (fp64 for double inputs) and returns the input dtype.
// Packed documents (DocumentMask): the forward runs each query block's key blocks from the
// diagonal down (its first tile gives every row a finite max: a query sees itself) and stops
// at the first block before the block's documents start; the backward stops each key
// block's query blocks at the first that starts in a later document. Tiles crossing a
// document border get the document mask, whole ones none.
#include "local_attention.hpp"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include "flash_shapes.hpp"
#include "torch_compat.hpp"

namespace ulysses {

namespace {
at::Tensor expand_kv(const at::Tensor& kv, int64_t hq) {  // (B, Hkv, N, dh) -> (B, hq, N, dh)
  const int64_t rep = hq / kv.size(1);
  return rep == 1 ? kv : kv.repeat_interleave(rep, 1);
}

at::ScalarType acc_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// q (B, H, N, dh) -> (B, Hkv, N, G, dh) contiguous in the accumulation dtype.
at::Tensor group_q(const at::Tensor& q, int64_t Hkv, at::ScalarType acc) {
  const auto B = q.size(0), H = q.size(1), N = q.size(2), dh = q.size(3);
  return q.to(acc).reshape({B, Hkv, H / Hkv, N, dh}).permute({0, 1, 3, 2, 4}).contiguous();
}
// (B, Hkv, N, G, dh) -> (B, H, N, dh) contiguous
at::Tensor ungroup_q(const at::Tensor& x) {
  const auto B = x.size(0), Hkv = x.size(1), N = x.size(2), G = x.size(3), dh = x.size(4);
  return x.permute({0, 1, 3, 2, 4}).reshape({B, Hkv * G, N, dh}).contiguous();
}

// Additive (block, 1, block) causal bias with `like`'s dtype and device (the scores'): 0 where the key (last index) is
// at or before the query, -inf after it. Added to a diagonal score tile viewed as (bq, G, bk): a broadcast add_ with a
// contiguous inner dimension is vectorised, where masked_fill_ with a broadcast bool mask ran element by element (8% of
// the tiny demo's step).
at::Tensor causal_block_bias(int64_t block, const at::TensorOptions& like) {
  return at::full({block, block}, -std::numeric_limits<double>::infinity(), like).triu(1).unsqueeze(1);
}

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Additive (bq, 1, bk) bias of row b's document mask for the tile of queries [i0, i0+bq) and
// keys [j0, j0+bk); undefined when no entry is masked. A diagonal tile inside one document
// takes the precomputed causal bias (block, 1, block).
at::Tensor document_tile_bias(const DocumentMask& d, int64_t b, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                              const at::TensorOptions& like, const at::Tensor& causal) {
  if (d.full(b, i0, i0 + bq, j0, j0 + bk)) return {};
  if (i0 == j0 && bq == bk && j0 >= d.at(b, i0 + bq - 1)) return causal.narrow(0, 0, bq).narrow(2, 0, bk);
  return at::zeros({bq, bk}, like)
      .masked_fill_(d.masked(b, i0, bq, j0, bk, like.device()), -std::numeric_limits<double>::infinity())
      .unsqueeze(1);
}

class BlockedAttentionFn : public torch::autograd::Function<BlockedAttentionFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor q, at::Tensor k, at::Tensor v, int64_t block,
                            const DocumentMask* docs) {
    const auto B = q.size(0), H = q.size(1), N = q.size(2), dh = q.size(3), Hkv = k.size(1), G = H / Hkv;
    const auto acc = acc_type(q);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    const int64_t nb = (N + block - 1) / block;
    auto qg = group_q(q, Hkv, acc);                            // (B, Hkv, N, G, dh)
    auto kc = k.to(acc).contiguous();                          // (B, Hkv, N, dh)
    auto vc = v.to(acc).contiguous();                          // (B, Hkv, N, dh)
    auto out = at::empty_like(qg);                             // (B, Hkv, N, G, dh)
    auto lse = at::empty({B, Hkv, N, G}, qg.options());        // (B, Hkv, N, G)
    const auto bias = causal_block_bias(block, qg.options());  // (block, 1, block)
    at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t end) {
      at::NoGradGuard no_grad;
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / Hkv, j = bh % Hkv;
        auto qh = qg[b][j], kh = kc[b][j], vh = vc[b][j], oh = out[b][j],
             lh = lse[b][j];  // (N, G, dh), (N, dh), (N, G)
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t i0 = i * block, bq = std::min(block, N - i0);
          auto qt = qh.narrow(0, i0, bq).reshape({bq * G, dh}).mul(scale);  // (bq*G, dh), scale folded into q
          auto m = at::full({bq * G, 1}, -std::numeric_limits<double>::infinity(), qt.options());
          auto l = at::zeros({bq * G, 1}, qt.options());
          auto o = at::zeros({bq * G, dh}, qt.options());
          for (int64_t step = 0; step <= i; ++step) {   // key blocks after the query block are fully masked
            const int64_t kb = docs ? i - step : step;  // documents: from the diagonal down
            const int64_t j0 = kb * block, bk = std::min(block, N - j0);
            if (docs && !docs->live(b, i0, i0 + bq, j0, j0 + bk)) break;  // before the block's documents
            auto s = at::mm(qt, kh.narrow(0, j0, bk).t());                // (bq*G, bk)
            if (docs) {
              const auto db = document_tile_bias(*docs, b, i0, bq, j0, bk, qt.options(), bias);
              if (db.defined()) s.view({bq, G, bk}).add_(db);
            } else if (kb == i) {
              s.view({bq, G, bk}).add_(bias.narrow(0, 0, bq).narrow(2, 0, bk));  // diagonal tile: bk == bq
            }
            auto m_new =
                at::maximum(m, s.amax(1, /*keepdim=*/true));  // finite: each row sees its own token (amax: no indices)
            s.sub_(m_new).exp_();                             // P~ = exp(S - m_new)
            auto alpha = (m - m_new).exp_();
            l.mul_(alpha).add_(s.sum(1, /*keepdim=*/true));
            o.mul_(alpha).addmm_(s, vh.narrow(0, j0, bk));
            m = m_new;
          }
          oh.narrow(0, i0, bq).view({bq * G, dh}).copy_(o.div_(l));
          lh.narrow(0, i0, bq).view({bq * G, 1}).copy_(m.add_(l.log_()));
        }
      }
    });
    auto result = ungroup_q(out).to(q.scalar_type());  // (B, H, N, dh)
    ctx->save_for_backward({q, k, v, result, lse});
    ctx->saved_data["block"] = block;
    ctx->saved_data["docs"] = reinterpret_cast<int64_t>(docs);
    return result;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &q = sv[0], &k = sv[1], &v = sv[2], &o = sv[3], &lse = sv[4];
    const int64_t block = ctx->saved_data["block"].toInt();
    const auto* docs = reinterpret_cast<const DocumentMask*>(ctx->saved_data["docs"].toInt());
    const auto B = q.size(0), N = q.size(2), dh = q.size(3), Hkv = k.size(1), G = q.size(1) / Hkv;
    const auto acc = acc_type(q);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    const int64_t nb = (N + block - 1) / block;
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    at::Tensor qg, qs, dog, Dg, kc, vc;
    {
      at::NoGradGuard no_grad;
      qg = group_q(q, Hkv, acc);                  // (B, Hkv, N, G, dh)
      qs = qg.mul(scale);                         // (B, Hkv, N, G, dh): q * scale, as the forward's tiles
      dog = group_q(grads[0], Hkv, acc);          // (B, Hkv, N, G, dh)
      Dg = (dog * group_q(o, Hkv, acc)).sum(-1);  // (B, Hkv, N, G): rowsum(dO o O)
      kc = k.to(acc).contiguous();                // (B, Hkv, N, dh)
      vc = v.to(acc).contiguous();
    }
    auto dq = at::zeros_like(qg);  // (B, Hkv, N, G, dh)
    auto dk = at::zeros_like(kc);  // (B, Hkv, N, dh)
    auto dv = at::zeros_like(vc);
    const auto bias = causal_block_bias(block, qg.options());  // (block, 1, block)
    at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t end) {
      at::NoGradGuard no_grad;
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / Hkv, j = bh % Hkv;
        auto qh = qg[b][j], qsh = qs[b][j], doh = dog[b][j], Dh = Dg[b][j], lh = lse[b][j], kh = kc[b][j],
             vh = vc[b][j];
        auto dqh = dq[b][j], dkh = dk[b][j], dvh = dv[b][j];
        for (int64_t kb = 0; kb < nb; ++kb) {
          const int64_t j0 = kb * block, bk = std::min(block, N - j0);
          auto kt = kh.narrow(0, j0, bk), vt = vh.narrow(0, j0, bk);  // (bk, dh)
          auto dkt = dkh.narrow(0, j0, bk), dvt = dvh.narrow(0, j0, bk);
          for (int64_t i = kb; i < nb; ++i) {  // query blocks before the key block see none of it
            const int64_t i0 = i * block, bq = std::min(block, N - i0);
            if (docs && !docs->live(b, i0, i0 + bq, j0, j0 + bk)) break;        // later blocks: later documents
            auto qt = qh.narrow(0, i0, bq).view({bq * G, dh});                  // (bq*G, dh)
            auto dot = doh.narrow(0, i0, bq).view({bq * G, dh});                // (bq*G, dh)
            auto p = at::mm(qsh.narrow(0, i0, bq).view({bq * G, dh}), kt.t());  // (bq*G, bk) = S, the forward's scores
            if (docs) {
              const auto db = document_tile_bias(*docs, b, i0, bq, j0, bk, qt.options(), bias);
              if (db.defined()) p.view({bq, G, bk}).add_(db);
            } else if (kb == i) {
              p.view({bq, G, bk}).add_(bias.narrow(0, 0, bq).narrow(2, 0, bk));
            }
            p.sub_(lh.narrow(0, i0, bq).reshape({bq * G, 1})).exp_();    // P = exp(S - lse)
            dvt.addmm_(p.t(), dot);                                      // dV += P^T dO
            auto ds = at::mm(dot, vt.t());                               // dP (bq*G, bk)
            ds.sub_(Dh.narrow(0, i0, bq).reshape({bq * G, 1})).mul_(p);  // dS = P o (dP - D)
            dqh.narrow(0, i0, bq).view({bq * G, dh}).addmm_(ds, kt, /*beta=*/1, /*alpha=*/scale);
            dkt.addmm_(ds.t(), qt, /*beta=*/1, /*alpha=*/scale);
          }
        }
      }
    });
    return {ungroup_q(dq).to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "causal_attention: q, k, v must be (B, H, N, dh)");
  TORCH_CHECK(k.sizes() == v.sizes(), "causal_attention: k and v shapes differ");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "causal_attention: q ",
              q.sizes(), " and k ", k.sizes(), " disagree on batch, sequence or head dim");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "causal_attention: q heads (", q.size(1),
              ") must be a multiple of kv heads (", k.size(1), ")");
}

void check_documents(const at::Tensor& q, const DocumentMask* docs) {
  TORCH_CHECK(!docs || (docs->batch() == q.size(0) && docs->tokens() == q.size(2)), "causal_attention: the document ",
              "mask covers (", docs ? docs->batch() : 0, ", ", docs ? docs->tokens() : 0, ") tokens, q ", q.sizes());
}

}  // namespace

at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t block,
                                    const DocumentMask* docs) {
  check_shapes(q, k, v);
  TORCH_CHECK(block > 0, "causal_attention: block must be positive, got ", block);
  check_documents(q, docs);
  return BlockedAttentionFn::apply(q, k, v, block, docs);
}

at::Tensor varlen_document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const DocumentMask& docs, const VarlenKernel& kernel) {
  check_shapes(q, k, v);
  check_documents(q, &docs);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), dh = q.size(3);
  const VarlenLayout& l = docs.varlen();
  const auto cu = torch::tensor(l.cu_seqlens, torch::kInt32).to(q.device());
  // (B, H, N, dh) -> (B, N, H, dh) -> (B*N, H, dh): the rows end to end, token-major.
  auto tokens = [&](const at::Tensor& x) { return x.transpose(1, 2).reshape({B * N, x.size(1), dh}); };
  // kv heads repeated as the SDPA path does (flash takes GQA itself; kept to one code path).
  const auto out = kernel(tokens(q), tokens(expand_kv(k, H)), tokens(expand_kv(v, H)), cu, l.max_seqlen);
  TORCH_CHECK(out.dim() == 3 && out.size(0) == B * N && out.size(1) == H && out.size(2) == dh,
              "varlen attention: the kernel returned ", out.sizes(), " for (", B * N, ", ", H, ", ", dh, ")");
  return out.view({B, N, H, dh}).transpose(1, 2);  // (B, H, N, dh)
}

namespace {
// The allocations of `kind` without its math (flash_shapes.hpp).
ShapeKernel shapes_of(AttentionKernel::Kind kind) {
  switch (kind) {
    case AttentionKernel::Kind::FlashShapes:
      return ShapeKernel::FlashShapes;
    case AttentionKernel::Kind::Blocked:
      return ShapeKernel::Blocked;
    case AttentionKernel::Kind::Sdpa:
    default:
      return ShapeKernel::Sdpa;
  }
}
}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionKernel& kernel, const DocumentMask* docs) {
  if (kernel.kind == AttentionKernel::Kind::FlashShapes || q.is_meta())
    return shape_attention(q, k, v, shapes_of(kernel.kind), kernel.block);
  switch (kernel.kind) {
    case AttentionKernel::Kind::Blocked:
      return blocked_causal_attention(q, k, v, kernel.block, docs);
    case AttentionKernel::Kind::Sdpa:
    default:
      if (docs) {
        check_documents(q, docs);
        // CUDA libtorch 2.x, fp16/bf16: flash attention's varlen kernel, no N x N anywhere.
        if (compat::flash_varlen_supports(q))
          return varlen_document_attention(q, k, v, *docs, compat::flash_varlen_causal);
        // Elsewhere (CPU, float32, libtorch 1.13): the document mask as an additive bias (B, 1, N, N).
        const auto bias = at::zeros({q.size(0), 1, q.size(2), q.size(2)}, q.options())
                              .masked_fill_(docs->masked(0, q.size(2), 0, q.size(2), q.device()).unsqueeze(1),
                                            -std::numeric_limits<double>::infinity());
        return compat::sdpa_masked(q, expand_kv(k, q.size(1)), expand_kv(v, q.size(1)), bias);
      }
      return compat::sdpa_causal(q, expand_kv(k, q.size(1)), expand_kv(v, q.size(1)));
  }
}

AttentionKernel attention_kernel_for(const std::string& setting, int64_t block, bool on_cuda) {
  AttentionKernel k;
  k.block = block;
  if (setting == "blocked")
    k.kind = AttentionKernel::Kind::Blocked;
  else if (setting == "sdpa")
    k.kind = AttentionKernel::Kind::Sdpa;
  else
    k.kind = on_cuda ? AttentionKernel::Kind::Sdpa : AttentionKernel::Kind::Blocked;
  return k;
}

}  // namespace ulysses
