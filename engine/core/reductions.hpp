// Long reductions with a stated error (docs/NUMERICS.md): the global gradient norm and the
// token-weighted loss, accurate at billions of elements. Each is a set of fp32 partial
// reductions over chunks of kReductionChunk elements (one ATen kernel per piece, no copy of
// the input), combined in fp64. The rounding of each partial is relative to its own chunk, so
// the error of the total does not grow with the element count (a single fp32 reduction's
// does: 7e-4 relative for x.norm() at 1e7 elements on this CPU). Figures: docs/NUMERICS.md
// (bench/numerics/bench_numerics).
//
// Sharded buffers (ZeRO): sum_of_squares_fp64 of each rank's shard is a 0-dim fp64 tensor on
// the shard's device; all-reduce it (sum) and take the square root: that is the norm of the
// whole buffer with the same bound, and no host sync happens before the all-reduce.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace ulysses {

class Comm;

// Elements per fp32 partial. The relative error of the total is at most the worst chunk's
// (it does not grow with the element count). For one chunk, whatever order ATen accumulates
// in: (kReductionChunk + 3) * 2^-24 ~ 4e-6; measured at most 2.7e-7 on constant and
// alternating inputs (which round the same way in every chunk), ~1e-10 on random gradients.
// 64 costs about what one fp32 norm does on this CPU; 32 cost 3x (ATen's row kernel).
constexpr int64_t kReductionChunk = 64;
// Elements reduced per kernel call: bounds the partials' memory (piece / chunk * 12 bytes).
constexpr int64_t kReductionPiece = int64_t{1} << 24;

// sum of x_i^2 over every element of x (any floating dtype and device; bf16/fp16 pieces are
// widened to fp32 first), as a 0-dim fp64 tensor on x's device. No host sync.
at::Tensor sum_of_squares_fp64(const at::Tensor& x);
// sum of x_i over every element, same scheme, 0-dim fp64 on x's device (error relative to
// sum |x_i|, as for any sum with cancellation).
at::Tensor sum_fp64(const at::Tensor& x);
// sqrt(sum_of_squares_fp64(x)) on the host: Hugging Face's global gradient norm
// (torch.nn.utils.clip_grad_norm_ with norm_type 2) when x holds every gradient.
double l2_norm(const at::Tensor& x);

// The token-weighted global mean loss: sum of every rank's loss sum / sum of every rank's
// valid-token count. Both are all-reduced over all ranks of `comm` as fp64 (exact counts up to
// 2^53 tokens; an fp32 count is exact only up to 2^24 = 16.7M). `loss_sum`: this rank's loss
// sum (any floating dtype, 0-dim; accumulate tiles and micro-steps in fp64); `count`: this
// rank's valid tokens. Writes the global count into *global_count when given.
double global_token_mean(const at::Tensor& loss_sum, const at::Tensor& count, Comm& comm,
                         double* global_count = nullptr);

// A reduction's value on the host: t's values in order (one copy), or its one value. A meta
// tensor (a dry run of the step: shapes, no values) has none; it gives kMetaStandIn for each,
// so the step runs on as it would (a norm of 1, a token count of 1, a peak of 1 byte).
constexpr double kMetaStandIn = 1.0;
std::vector<double> host_values(const at::Tensor& t);
double scalar_value(const at::Tensor& t);

}  // namespace ulysses
