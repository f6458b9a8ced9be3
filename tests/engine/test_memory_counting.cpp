// The counting CPU allocator of memory by category (engine/core/memory_categories): a storage
// is charged to the scope it was made in and given back when freed, raw allocations too; with
// counting switched off (the cost benchmark's "off" side) nothing is charged and storage made
// then frees through libtorch's own allocator.
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "memory_categories.hpp"

using namespace ulysses;
using mem::MemCategory;

namespace {
int64_t live(MemCategory c) { return mem::cpu().live().bytes[static_cast<int>(c)]; }
}  // namespace

TEST(CpuCategoryCounting, ChargesTheScopeFreesGiveBackAndOffChargesNothing) {
  mem::install_cpu_counting();
  ASSERT_TRUE(mem::cpu_counting_installed());
  const int64_t act0 = live(MemCategory::Activations), opt0 = live(MemCategory::Optimizer);
  const int64_t n0 = mem::cpu().allocations();
  torch::Tensor a, b;
  {
    mem::Scope s(MemCategory::Activations);
    a = torch::empty({1000}, torch::kFloat32);  // 4000 B
    {
      mem::Scope inner(MemCategory::Optimizer);
      b = torch::empty({250}, torch::kFloat64);  // 2000 B
    }
  }
  EXPECT_EQ(live(MemCategory::Activations) - act0, 4000);
  EXPECT_EQ(live(MemCategory::Optimizer) - opt0, 2000);
  EXPECT_EQ(mem::cpu().allocations() - n0, 2);
  a.reset();
  EXPECT_EQ(live(MemCategory::Activations), act0);
  // raw_allocate / raw_deallocate (some ATen kernels' scratch) go through the same table.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw = nullptr;
  {
    mem::Scope s(MemCategory::Activations);
    raw = cpu->raw_allocate(512);
  }
  EXPECT_EQ(live(MemCategory::Activations) - act0, 512);
  cpu->raw_deallocate(raw);
  EXPECT_EQ(live(MemCategory::Activations), act0);
  // Off: nothing charged, storage and raw blocks made then still free (raw through the base
  // allocator's deleter), storage counted before is still given back.
  mem::set_cpu_counting(false);
  {
    mem::Scope s(MemCategory::Activations);
    auto c = torch::empty({1000}, torch::kFloat32);
    void* r2 = cpu->raw_allocate(256);
    EXPECT_EQ(live(MemCategory::Activations), act0);
    cpu->raw_deallocate(r2);
    b.reset();
    EXPECT_EQ(live(MemCategory::Optimizer), opt0);
  }
  EXPECT_EQ(mem::cpu().allocations() - n0, 3);
  mem::set_cpu_counting(true);
  {
    mem::Scope s(MemCategory::Activations);
    auto d = torch::empty({100}, torch::kFloat32);
    EXPECT_EQ(live(MemCategory::Activations) - act0, 400);
  }
  EXPECT_EQ(live(MemCategory::Activations), act0);
}
