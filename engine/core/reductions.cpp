// Long reductions with a stated error (see reductions.hpp): per-chunk fp32 partials, fp64 total.
#include "reductions.hpp"

#include <cmath>

#include "comm.hpp"

namespace ulysses {

namespace {

// Calls part(rows, tail) for every piece of x: rows = (m, kReductionChunk) fp32 (or fp64) view
// of the piece's whole chunks, tail = its last piece's remaining elements (may be empty).
// Pieces are contiguous 1-D slices; a non-contiguous x is copied one piece at a time.
template <class F>
void for_each_piece(const at::Tensor& x, F&& part) {
  auto flat = x.reshape({-1});  // a view when x is contiguous
  const int64_t N = flat.numel(), C = kReductionChunk;
  for (int64_t s = 0; s < N; s += kReductionPiece) {
    const int64_t len = std::min(kReductionPiece, N - s);
    auto p = flat.narrow(0, s, len);
    if (p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble) p = p.to(at::kFloat);
    p = p.contiguous();
    const int64_t m = len / C * C;
    part(m > 0 ? p.narrow(0, 0, m).view({m / C, C}) : at::Tensor(),  // (m/C, C)
         m < len ? p.narrow(0, m, len - m) : at::Tensor());          // (len - m)
  }
}

}  // namespace

at::Tensor sum_of_squares_fp64(const at::Tensor& x) {
  auto acc = at::zeros({}, x.options().dtype(at::kDouble));
  for_each_piece(x, [&](const at::Tensor& rows, const at::Tensor& tail) {
    if (rows.defined()) {
      // fp32 norm of each chunk (one kernel, no squared copy), squared and summed in fp64
      auto part = at::linalg_vector_norm(rows, 2, at::IntArrayRef{1}, false, c10::nullopt);  // (m/C)
      acc.add_(part.to(at::kDouble).square().sum());
    }
    if (tail.defined()) acc.add_(tail.to(at::kDouble).square().sum());
  });
  return acc;
}

at::Tensor sum_fp64(const at::Tensor& x) {
  auto acc = at::zeros({}, x.options().dtype(at::kDouble));
  for_each_piece(x, [&](const at::Tensor& rows, const at::Tensor& tail) {
    if (rows.defined()) acc.add_(rows.sum(1).to(at::kDouble).sum());  // (m/C) fp32 partials
    if (tail.defined()) acc.add_(tail.to(at::kDouble).sum());
  });
  return acc;
}

double l2_norm(const at::Tensor& x) { return std::sqrt(scalar_value(sum_of_squares_fp64(x))); }

std::vector<double> host_values(const at::Tensor& t) {
  if (t.is_meta()) return std::vector<double>(static_cast<size_t>(t.numel()), kMetaStandIn);
  const auto h = t.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
  return {h.data_ptr<double>(), h.data_ptr<double>() + h.numel()};
}

double scalar_value(const at::Tensor& t) { return t.is_meta() ? kMetaStandIn : t.item<double>(); }

double global_token_mean(const at::Tensor& loss_sum, const at::Tensor& count, Comm& comm, double* global_count) {
  // [loss sum, valid tokens] (2,) fp64 on the communication device
  auto both = at::stack({loss_sum.detach().reshape({}).to(comm.device(), at::kDouble),
                         count.detach().reshape({}).to(comm.device(), at::kDouble)});
  comm.all_reduce_sum(both);
  const std::vector<double> host = host_values(both);
  const double total = host[0], tokens = host[1];
  if (global_count) *global_count = tokens;
  return total / std::max(1.0, tokens);
}

}  // namespace ulysses
