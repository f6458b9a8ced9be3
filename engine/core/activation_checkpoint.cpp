// Reentrant activation checkpointing of one block (see activation_checkpoint.hpp).
#include "activation_checkpoint.hpp"

#include <torch/csrc/autograd/engine.h>

#include "memory_categories.hpp"
#include "memory_labels.hpp"

namespace ulysses {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class CheckpointFn : public torch::autograd::Function<CheckpointFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, CheckpointSlot* slot) {
    // Function::apply runs forward with grad mode off: no graph is built inside the block.
    ctx->saved_data["slot"] = reinterpret_cast<int64_t>(slot);
    at::Tensor y = slot->run(x, /*recompute=*/false);
    if (slot->offload) {
      slot->saved.offload(x);
      mem::note_offload(x, /*off=*/true);  // the planner's allocator model: a GPU frees the block
    } else {
      ctx->save_for_backward({x});
    }
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto* slot = reinterpret_cast<CheckpointSlot*>(ctx->saved_data["slot"].toInt());
    if (slot->on_backward) slot->on_backward();
    at::Tensor x;
    if (slot->offload) {
      x = slot->saved.restore();
      mem::note_offload(x, /*off=*/false);  // and makes it again
      slot->saved.reset();
    } else {
      x = ctx->get_saved_variables()[0];
    }
    at::Tensor xd = x.detach().requires_grad_(true);
    at::Tensor y;
    {
      torch::AutoGradMode on(true);
      mem::Scope act(mem::MemCategory::Activations);  // the recomputed forward
      mem::Label recompute("recompute");              // memory_labels.hpp: names the peak table's rows
      y = slot->run(xd, /*recompute=*/true);
    }
    // Inner backward: parameter gradients accumulate into .grad, the input's lands in xd. As
    // torch::autograd::backward, from y's gradient edge, but without y: the recomputed output's
    // bytes (B, n, d) go before the backward starts (only its graph is needed).
    const torch::autograd::Edge root = torch::autograd::impl::gradient_edge(y);
    y = at::Tensor();
    torch::autograd::Engine::get_default_engine().execute({root}, {grads[0]}, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true);
    // The block's backward has run once and for all: drop what its closure holds (the RoPE
    // tables of the step), so nothing of this step stays alive until the next forward.
    slot->run = nullptr;
    slot->on_backward = nullptr;
    return {xd.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint_block(const at::Tensor& x, CheckpointSlot* slot) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return slot->run(x, false);
  return CheckpointFn::apply(x, slot);
}

}  // namespace ulysses
