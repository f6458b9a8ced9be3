// Activation checkpointing of one block (a transformer layer): the forward runs without
// building a graph and only the block's input is kept (optionally parked in CPU memory);
// backward re-runs the block's forward with autograd on, then back-propagates through the
// recomputed graph ("reentrant" checkpointing, as torch.utils.checkpoint with
// use_reentrant=True). Parameter gradients accumulate into the parameters' .grad directly
// during that inner backward; the gradient of the block input is returned.
//
// Collectives inside the block (the Ulysses all-to-alls) are safe: every rank recomputes
// the same layers in the same order, so the recompute's exchanges pair up as in forward.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "torch_compat.hpp"

namespace ulysses {

// Owned by the caller (one per checkpointed block), alive until the backward has run.
struct CheckpointSlot {
  // Runs the block on x; `recompute` is true for the re-run inside backward (for tracing).
  std::function<at::Tensor(const at::Tensor& x, bool recompute)> run;
  bool offload = false;    // keep the input in CPU memory between forward and backward
  compat::HostCopy saved;  // the kept input when offloaded
  // Called when the block's backward starts, before its recompute (e.g. to prefetch the
  // previous block's input back from CPU memory). May be empty.
  std::function<void()> on_backward;
};

// Block output for input x (B, n, d). With grad mode off, or when x needs no gradient,
// simply runs the block.
at::Tensor checkpoint_block(const at::Tensor& x, CheckpointSlot* slot);

}  // namespace ulysses
