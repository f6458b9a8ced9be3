// Document-causal masks: block tests and tile masks (document_mask.hpp).
#include "document_mask.hpp"

#include <algorithm>
#include <limits>

namespace ulysses {

DocumentMask::DocumentMask(const at::Tensor& start) : start_(start.to(torch::kCPU, torch::kInt64).contiguous()) {
  TORCH_CHECK(start_.dim() == 2, "DocumentMask: start must be (B, N), got ", start_.sizes());
  start_ptr_ = start_.data_ptr<int64_t>();
  const int64_t B = start_.size(0), N = start_.size(1);
  min_start_.assign(static_cast<size_t>(N), std::numeric_limits<int64_t>::max());
  max_start_.assign(static_cast<size_t>(N), std::numeric_limits<int64_t>::min());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < N; ++t) {
      const int64_t s = start_ptr_[b * N + t];
      TORCH_CHECK(s >= 0 && s <= t && (t == 0 || s >= start_ptr_[b * N + t - 1]), "DocumentMask: start[", b, "][", t,
                  "] = ", s, " is not a document start at or before ", t);
      min_start_[static_cast<size_t>(t)] = std::min(min_start_[static_cast<size_t>(t)], s);
      max_start_[static_cast<size_t>(t)] = std::max(max_start_[static_cast<size_t>(t)], s);
    }
  }
  // Varlen: a document begins where start[] changes along a row (and at every row's first
  // token); it must begin at its own start, or the causal runs would not be the mask.
  TORCH_CHECK(B * N < std::numeric_limits<int32_t>::max(), "DocumentMask: ", B, " x ", N,
              " tokens exceed the varlen kernel's int32 offsets");
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < N; ++t) {
      const int64_t s = start_ptr_[b * N + t];
      if (t > 0 && s == start_ptr_[b * N + t - 1]) continue;
      TORCH_CHECK(s == t, "DocumentMask: row ", b, " has a document starting at ", t, " whose start is ", s);
      varlen_.cu_seqlens.push_back(static_cast<int32_t>(b * N + t));
    }
  }
  varlen_.cu_seqlens.push_back(static_cast<int32_t>(B * N));
  for (size_t i = 0; i + 1 < varlen_.cu_seqlens.size(); ++i)
    varlen_.max_seqlen = std::max<int64_t>(varlen_.max_seqlen, varlen_.cu_seqlens[i + 1] - varlen_.cu_seqlens[i]);
}

at::Tensor DocumentMask::masked(const at::Tensor& qpos, const at::Tensor& kpos, const c10::Device& dev) const {
  const auto q = qpos.to(torch::kCPU, torch::kInt64), k = kpos.to(torch::kCPU, torch::kInt64);
  const auto qs = start_.index_select(1, q);                              // (B, nq)
  auto kk = k.view({1, 1, -1});                                           // (1, 1, nk)
  auto m = kk.gt(q.view({1, -1, 1})).logical_or(kk.lt(qs.unsqueeze(2)));  // (B, nq, nk)
  return m.to(dev);
}

at::Tensor DocumentMask::masked(int64_t q0, int64_t nq, int64_t k0, int64_t nk, const c10::Device& dev) const {
  return masked(torch::arange(q0, q0 + nq, torch::kInt64), torch::arange(k0, k0 + nk, torch::kInt64), dev);
}

at::Tensor DocumentMask::masked(int64_t b, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                                const c10::Device& dev) const {
  auto q = torch::arange(q0, q0 + nq, torch::kInt64).view({-1, 1});  // (nq, 1)
  auto k = torch::arange(k0, k0 + nk, torch::kInt64).view({1, -1});  // (1, nk)
  auto qs = start_[b].narrow(0, q0, nq).view({-1, 1});               // (nq, 1)
  return k.gt(q).logical_or(k.lt(qs)).to(dev);
}

at::Tensor DocumentMask::positions(const at::Tensor& positions) const {
  const auto p = positions.to(torch::kCPU, torch::kInt64);
  return p.unsqueeze(0) - start_.index_select(1, p);  // (B, n)
}

int64_t DocumentMask::unmasked_pairs() const {
  int64_t n = 0;
  for (int64_t b = 0; b < batch(); ++b)
    for (int64_t t = 0; t < tokens(); ++t) n += t - at(b, t) + 1;
  return n;
}

}  // namespace ulysses
