// Compile-only check of the NCCL/CUDA path against a CPU libtorch's headers plus the CUDA
// toolkit's (CI has no CUDA libtorch to link with): keeps torch_compat.hpp's CUDA branches
// (NCCL group, error handling, shutdown/abort, set_device, memory stats, the allocator's lazy init,
// name and trace hook, HostCopy's CUDA copies) compiling; CMake also compiles the engine sources
// with a CUDA branch (comm, memory_categories, activation_checkpoint, model, trainer, local_attention) with the same
// definitions. Built as an object library, never linked.
#include "torch_compat.hpp"

namespace ulysses::compat {
c10::intrusive_ptr<Backend> nccl_compile_check(c10::intrusive_ptr<c10d::Store> s) {
  enable_nccl_error_handling();
  auto pg = make_nccl(std::move(s), 0, 1, std::chrono::milliseconds(1000));
  set_cuda_device(0);
  int64_t a = 0, r = 0, p = 0;
  cuda_memory(torch::Device(torch::kCUDA, 0), &a, &r, &p);
  synchronize(torch::Device(torch::kCUDA, 0));
  cuda_lazy_init(0);
  if (cuda_allocator_initialized() && cuda_allocator_name() == "native")
    (void)attach_cuda_block_tracker([](int, uintptr_t, int64_t, bool) {});
  HostCopy h;  // activation offload's CUDA branch: pinned copy, one side stream, events
  h.offload(at::Tensor());
  h.prefetch();
  (void)h.restore();
  // Packed documents on CUDA: flash's varlen entry (libtorch 2.x; 1.13's branch refuses).
  if (flash_varlen_supports(at::Tensor()))
    (void)flash_varlen_causal(at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), 0);
  if (!shutdown_backend(pg)) abort_backend(pg);
  return pg;
}
}  // namespace ulysses::compat
