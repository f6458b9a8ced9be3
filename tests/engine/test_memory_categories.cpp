// The counting CPU allocator of memory by category (engine/core/memory_categories): a storage
// is charged to the scope it was made in and given back when freed, raw allocations too; with
// counting switched off (the cost benchmark's "off" side) nothing is charged and storage made
// then frees through libtorch's own allocator.
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "memory_categories.hpp"
#include "ulysses/profiler/memory_categories.hpp"

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

// GPU ranks' categories (the CUDA caching allocator's trace hook, libtorch >= 2.1): fed here with
// fake blocks as the hook gives them (no GPU on this machine). A block is charged to the scope
// of the thread that asked for it and given back when its free completes; other devices' blocks
// and frees of blocks given out before counting are left out.
TEST(CudaCategoryCounting, BlocksFromTheAllocatorHookAreChargedToTheScope) {
  // this rank's device is 0: installed through a fake native allocator (the real one needs a GPU)
  const auto installed =
      mem::install_cuda_counting_with(0, {[](int) {}, [] { return true; }, [] { return std::string("native"); },
                                          [](std::function<void(int, uintptr_t, int64_t, bool)>) { return true; }});
  ASSERT_TRUE(installed.counting);
  auto live_cuda = [](MemCategory c) { return mem::cuda().live().bytes[static_cast<int>(c)]; };
  const int64_t act0 = live_cuda(MemCategory::Activations), com0 = live_cuda(MemCategory::Communication);
  {
    mem::Scope s(MemCategory::Activations);
    mem::count_cuda_block(0, 0x1000, 2 << 20, true);  // a 2 MiB block
    mem::count_cuda_block(1, 0x9000, 4 << 20, true);  // another device: not this rank's
    {
      mem::Scope c(MemCategory::Communication);
      mem::count_cuda_block(0, 0x3000, 512, true);
    }
  }
  EXPECT_EQ(live_cuda(MemCategory::Activations) - act0, 2 << 20);
  EXPECT_EQ(live_cuda(MemCategory::Communication) - com0, 512);
  mem::count_cuda_block(0, 0x7777, 1 << 20, false);  // never seen given out: nothing to give back
  mem::count_cuda_block(0, 0x1000, 2 << 20, false);  // freed (on any thread, any scope)
  EXPECT_EQ(live_cuda(MemCategory::Activations), act0);
  EXPECT_EQ(live_cuda(MemCategory::Communication) - com0, 512);
  mem::count_cuda_block(0, 0x3000, 512, false);
  EXPECT_EQ(live_cuda(MemCategory::Communication), com0);
  // The probe the tracer samples reads these counters.
  {
    mem::Scope s(MemCategory::Logits);
    mem::count_cuda_block(0, 0x5000, 1000, true);
  }
  prof::MemoryCategories seen;
  mem::cuda_probe()->live(&seen);
  EXPECT_EQ(seen.bytes[static_cast<int>(MemCategory::Logits)],
            mem::cuda().live().bytes[static_cast<int>(MemCategory::Logits)]);
  mem::count_cuda_block(0, 0x5000, 1000, false);
}

// Activations are also counted per decoder layer (LayerScope, set by the model around each
// layer's forward and recompute), and the layers alive at a peak come with it.
TEST(CpuCategoryCounting, ActivationsPerLayerAtThePeak) {
  mem::Counters c;
  c.add(MemCategory::Parameters, 100);
  c.add(MemCategory::Activations, 1000, 0);
  c.add(MemCategory::Activations, 3000, 2);
  c.add(MemCategory::Other, 50, 2);  // only activations are counted per layer
  prof::MemoryCategories at;
  int64_t t = 0;
  ASSERT_TRUE(c.take_peak(&at, &t));
  EXPECT_EQ(c.taken_peak_layers(), (std::vector<int64_t>{1000, 0, 3000}));
  // The next peak starts from the live bytes at the take (4150); a layer's activations going
  // over it make the new peak, with the layers alive then.
  c.sub(MemCategory::Activations, 3000, 2);
  c.add(MemCategory::Activations, 5000, 1);
  ASSERT_TRUE(c.take_peak(&at, &t));
  EXPECT_EQ(at.total(), 100 + 1000 + 50 + 5000);
  EXPECT_EQ(c.taken_peak_layers(), (std::vector<int64_t>{1000, 5000, 0}));
  // Through the counting allocator: what layer 1's forward makes under Activations.
  mem::install_cpu_counting();
  mem::cpu().reset_peak();
  torch::Tensor a;
  {
    mem::Scope s(MemCategory::Activations);
    mem::LayerScope l(1);
    EXPECT_EQ(mem::current_layer(), 1);
    a = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB: this test's peak
  }
  EXPECT_EQ(mem::current_layer(), -1);
  ASSERT_TRUE(mem::cpu().take_peak(&at, &t));
  const auto layers = mem::cpu().taken_peak_layers();
  ASSERT_GE(layers.size(), 2u);
  EXPECT_GE(layers[1], int64_t{4} << 20);
}
