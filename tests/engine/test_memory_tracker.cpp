// MemoryTracker: exact live/peak bytes of known CPU allocations, frees of older blocks
// ignored, autograd backward allocations seen, threads that inherit the ThreadLocalState
// counted, nested trackers both counting.
#include <gtest/gtest.h>

#include <thread>

#include <ATen/ThreadLocalState.h>
#include <torch/torch.h>

#include "memory_tracker.hpp"

using ulysses::MemoryTracker;

TEST(MemoryTracker, CountsKnownAllocationsExactly) {
  MemoryTracker mt;
  EXPECT_EQ(mt.current_bytes(), 0);
  auto a = torch::empty({1000}, torch::kFloat32);  // 4000 bytes
  EXPECT_EQ(mt.current_bytes(), 4000);
  auto b = torch::empty({500}, torch::kFloat64);  // 4000 bytes
  EXPECT_EQ(mt.current_bytes(), 8000);
  EXPECT_EQ(mt.peak_bytes(), 8000);
  a.reset();
  EXPECT_EQ(mt.current_bytes(), 4000);
  EXPECT_EQ(mt.peak_bytes(), 8000);
  auto c = torch::empty({10, 10}, torch::kInt32);  // 400 bytes
  EXPECT_EQ(mt.current_bytes(), 4400);
  EXPECT_EQ(mt.peak_bytes(), 8000);
  auto v = c.view({100});  // a view allocates no storage
  EXPECT_EQ(mt.current_bytes(), 4400);
  mt.reset_peak();
  EXPECT_EQ(mt.peak_bytes(), 4400);
  EXPECT_EQ(mt.allocations(), 3);
  EXPECT_EQ(mt.allocated_bytes_total(), 8400);
}

TEST(MemoryTracker, FreesOfBlocksAllocatedBeforeAreIgnored) {
  auto old = torch::empty({1 << 16}, torch::kFloat32);
  MemoryTracker mt;
  old.reset();
  EXPECT_EQ(mt.current_bytes(), 0);
  auto t = torch::ones({256}, torch::kFloat32);
  EXPECT_EQ(mt.current_bytes(), 1024);
}

TEST(MemoryTracker, SeesAutogradBackwardAllocations) {
  at::set_num_threads(1);
  auto x = torch::randn({256, 256}).set_requires_grad(true);  // made before tracking
  const int64_t full = 256 * 256 * 4;
  MemoryTracker mt;
  auto y = (x * x).sum();  // the product is freed once summed; y is 4 bytes
  EXPECT_EQ(mt.current_bytes(), 4);
  EXPECT_GE(mt.peak_bytes(), full);  // the product existed
  mt.reset_peak();
  y.backward();
  // x.grad (256x256 fp32) now lives; backward built 2 * x * grad, i.e. at least one more
  // full-size temporary besides the gradient itself.
  ASSERT_TRUE(x.grad().defined());
  EXPECT_GE(mt.current_bytes(), 4 + full);
  EXPECT_LT(mt.current_bytes(), 4 + full + 64);  // plus at most a few scalars
  EXPECT_GE(mt.peak_bytes(), 2 * full);
  x.mutable_grad().reset();
  EXPECT_LT(mt.current_bytes(), 64);
}

TEST(MemoryTracker, CountsThreadsThatInheritTheState) {
  MemoryTracker mt;
  at::ThreadLocalState state;  // what autograd and at::launch hand to their workers
  std::thread th([&] {
    at::ThreadLocalStateGuard g(state);
    auto t = torch::empty({2048}, torch::kFloat32);  // 8192 bytes, freed at scope end
  });
  th.join();
  EXPECT_EQ(mt.peak_bytes(), 8192);
  EXPECT_EQ(mt.current_bytes(), 0);
  std::thread plain([] { auto t = torch::empty({4096}, torch::kFloat32); });  // no inherited state
  plain.join();
  EXPECT_EQ(mt.peak_bytes(), 8192);
}

TEST(MemoryTracker, NestedTrackersBothCount) {
  MemoryTracker outer;
  auto a = torch::empty({100}, torch::kFloat32);  // 400
  {
    MemoryTracker inner;
    auto b = torch::empty({50}, torch::kFloat32);  // 200
    EXPECT_EQ(inner.current_bytes(), 200);
    EXPECT_EQ(outer.current_bytes(), 600);
  }
  EXPECT_EQ(outer.current_bytes(), 400);
  EXPECT_EQ(outer.peak_bytes(), 600);
  auto c = torch::empty({25}, torch::kFloat32);  // back on the outer tracker alone
  EXPECT_EQ(outer.current_bytes(), 500);
}
