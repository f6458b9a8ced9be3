// Local causal attention: SDPA, or block-causal online softmax (see local_attention.hpp).
#include "local_attention.hpp"

#include "flash_shapes.hpp"
#include "torch_compat.hpp"

namespace ulysses {

namespace {
at::Tensor expand_kv(const at::Tensor& kv, int64_t hq) {  // (B, Hkv, N, dh) -> (B, hq, N, dh)
  const int64_t rep = hq / kv.size(1);
  return rep == 1 ? kv : kv.repeat_interleave(rep, 1);
}
}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionKernel& kernel) {
  if (kernel.kind == AttentionKernel::Kind::FlashShapes || q.is_meta()) return shape_attention(q, k, v, static_cast<int>(kernel.kind), kernel.block);
  // TODO(blocked): the block-causal kernel; until then every kind runs SDPA.
  (void)kernel;
  return compat::sdpa_causal(q, expand_kv(k, q.size(1)), expand_kv(v, q.size(1)));
}

AttentionKernel attention_kernel_for(const std::string& setting, int64_t block, bool on_cuda) {
  AttentionKernel k;
  k.block = block;
  if (setting == "blocked") k.kind = AttentionKernel::Kind::Blocked;
  else if (setting == "sdpa") k.kind = AttentionKernel::Kind::Sdpa;
  else k.kind = on_cuda ? AttentionKernel::Kind::Sdpa : AttentionKernel::Kind::Blocked;
  return k;
}

}  // namespace ulysses
