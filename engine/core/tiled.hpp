// Sequence-tiled computations that keep only one tile's working set alive (Arctic Long
// Sequence Training's TiledMLP and TiledFusedLogitsLoss, in C++). Tokens are tiled over
// the flattened (B * n) token axis; a last tile may be shorter.
//
// Shapes: B batch, n local tokens, d hidden, f intermediate, V vocab, T tile tokens.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

#include "ulysses/profiler/tracer.hpp"

namespace ulysses {

// SwiGLU MLP down(silu(gate(h)) * up(h)) over tiles of `tile` tokens. Forward keeps only h;
// backward recomputes each tile's (T, f) intermediates and back-propagates through them,
// so the MLP's working set is one tile. h (B, n, d); gate, up (f, d); down (d, f).
// Returns (B, n, d). Differentiable in h and the three weights.
at::Tensor tiled_mlp(const at::Tensor& h, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
                     int64_t tile);

// Sum over tokens of cross-entropy(lm_head(rms_norm(x)), labels) (labels -100 ignored),
// in tiles of `tile` tokens: each tile's logits (T, V) are made, turned into the tile's
// loss and differentiated on the spot (inside the forward), so no (B*n, V) tensor ever
// exists. The gradients for x, the norm weight and the head weight are kept from the
// forward and scaled by the incoming gradient in backward. x (B, n, d); norm_w (d);
// head_w (V, d); labels (B, n) int64. Returns a fp32 scalar.
// Traced (when `tracer` is active) as an lm_head forward and an lm_head backward range per
// tile (chunk = tile index), both inside the loss forward range.
at::Tensor tiled_logits_loss_sum(const at::Tensor& x, const at::Tensor& norm_w, double eps, const at::Tensor& head_w,
                                 const at::Tensor& labels, int64_t tile, prof::Tracer* tracer = nullptr);

// One token tile of a sequence-tiled computation (tiled_tokens): `tiles` are the tiled inputs
// narrowed to tokens [begin, begin + len) of their dim 1, `weights` whole; returns the tile's
// outputs, each (B, len, ...).
using TileFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& tiles,
                                                     const std::vector<at::Tensor>& weights)>;

// Runs fn over tiles of `tile` tokens along dim 1 of every tiled input (B, n, ...; an input
// shared by every sequence may be (1, n, ...)), as TiledMLP does for the MLP: forward keeps
// only the inputs and writes each tile's outputs into the whole outputs (B, n, ...); backward
// recomputes one tile at a time with autograd and back-propagates that tile's slice of the
// outputs' gradients, so one tile's intermediates exist at a time. Weight gradients are summed
// over the tiles in fp32. Inputs that need no gradient (RoPE tables) get none. `fn` must outlive
// the autograd graph (the model owns it). tile <= 0: fn once, with plain autograd.
std::vector<at::Tensor> tiled_tokens(const TileFn* fn, const std::vector<at::Tensor>& tiled,
                                     const std::vector<at::Tensor>& weights, int64_t tile);

}  // namespace ulysses
