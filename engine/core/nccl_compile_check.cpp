// Compile-only check of the NCCL path against a CPU libtorch's headers plus the CUDA
// toolkit's (CI has no CUDA libtorch to link with): keeps torch_compat.hpp's NCCL branch
// and Comm's use of it compiling. Built as an object library, never linked.
#include "torch_compat.hpp"

namespace ulysses::compat {
c10::intrusive_ptr<Backend> nccl_compile_check(c10::intrusive_ptr<c10d::Store> s) {
  return make_nccl(std::move(s), 0, 1, std::chrono::milliseconds(1000));
}
}  // namespace ulysses::compat
