// GPU code paths of the engine proven on the CPU with fakes (no GPU on this machine):
// - memory categories: CUDA is initialised before the allocator's trace hook is attached, an
//   allocator still uninitialised then is refused, the cudaMallocAsync backend is reported and
//   never attached (memory_categories.cpp);
// - attention's backward at sp 1: the window between the out-proj's and the qkv projection's
//   backward is an Attention range, so a flash-backward kernel that autograd's thread launches
//   there is attributed to it (trainer.cpp's record_backward_mark_ranges, with a fake CUPTI);
// - activation offload: one side stream per device, the restored input allocated on the
//   consumer stream, the side stream ordered after the consumer (host_copy.hpp, fake streams);
// - ring exchanges on NCCL waited for without a host-side timeout (ring_attention.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_copy.hpp"
#include "memory_categories.hpp"
#include "profiler/fake_gpu.hpp"
#include "ring_attention.hpp"
#include "profiler/test_util.hpp"
#include "trainer.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses {
namespace {

using prof::Direction;
using prof::Phase;

// ---- memory categories ----------------------------------------------------------------

// A fake CUDA whose allocator exists only once lazy_init ran (as CUDA's: the per-device
// allocators are made at CUDA's lazy initialisation), logging what was asked of it.
struct FakeCuda {
  bool init_makes_allocator = true;
  std::string name = "native";
  bool initialised = false;
  std::vector<std::string> calls;
  mem::CudaAllocatorAccess access() {
    return {[this](int d) {
              calls.push_back("lazy_init " + std::to_string(d));
              if (init_makes_allocator) initialised = true;
            },
            [this] { return initialised; }, [this] { return name; },
            [this](std::function<void(int, uintptr_t, int64_t, bool)>) {
              calls.push_back("attach");
              // the real hook attaches to the device allocators that exist: none before init
              if (name == "cudaMallocAsync") throw std::runtime_error("cudaMallocAsync does not support a trace hook");
              return initialised;
            }};
  }
};

TEST(GpuPaths, MemoryCountingInitialisesCudaBeforeAttachingTheHook) {
  FakeCuda cuda;
  const auto c = mem::install_cuda_counting_with(3, cuda.access());
  EXPECT_TRUE(c.counting) << c.why_not;
  EXPECT_EQ(c.backend, "native");
  EXPECT_EQ(cuda.calls, (std::vector<std::string>{"lazy_init 3", "attach"}));
}

TEST(GpuPaths, AnUninitialisedAllocatorIsRefused) {
  FakeCuda cuda;
  cuda.init_makes_allocator = false;  // CUDA's init left no allocator: a hook would count nothing
  try {
    (void)mem::install_cuda_counting_with(0, cuda.access());
    FAIL() << "an uninitialised allocator was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not initialised"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("profile.memory=false"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda.calls, (std::vector<std::string>{"lazy_init 0"})) << "the hook must not be attached";
}

TEST(GpuPaths, TheCudaMallocAsyncBackendIsReportedNotAborted) {
  FakeCuda cuda;
  cuda.name = "cudaMallocAsync";
  mem::CudaCounting c;
  ASSERT_NO_THROW(c = mem::install_cuda_counting_with(0, cuda.access()));
  EXPECT_FALSE(c.counting);
  EXPECT_EQ(c.backend, "cudaMallocAsync");
  EXPECT_NE(c.why_not.find("cudaMallocAsync"), std::string::npos) << c.why_not;
  EXPECT_EQ(cuda.calls, (std::vector<std::string>{"lazy_init 0"}));
}

TEST(GpuPaths, ThisBuildSaysWhyItHasNoCudaCounting) {
  const auto c = mem::install_cuda_counting(0);  // CPU libtorch: no hook, and it says so
  EXPECT_FALSE(c.counting);
  EXPECT_FALSE(c.why_not.empty());
}

// ---- attention's backward at sp 1 -----------------------------------------------------

int64_t kernel_named(const prof::TraceModel& m, const std::string& name) {
  for (size_t i = 0; i < m.ranges.size(); ++i)
    if (m.ranges[i].is_kernel && m.strings[size_t(m.ranges[i].name_id)] == name) return int64_t(i);
  return -1;
}

// One layer's backward as autograd runs it: MLP, out-proj, then attention (a flash-backward
// kernel launched by autograd's thread, with no range of its own), then the qkv projection;
// the markers' times (BackwardMarks) are recorded on the stepping thread afterwards.
prof::TraceModel one_layer_backward(bool attention_window, const std::string& dir) {
  const std::string path = dir + "/rank0.sqlite";
  ut::FakeCupti* fake = nullptr;
  auto o = ut::options_for(path, 0, 1);
  o.device = "cuda:0";
  o.gpu_source = ut::fake_cupti_factory(&fake);
  {
    auto t = prof::Tracer::open(o);
    t->begin_step(2);
    const int64_t T = prof::Tracer::now_ns();
    {
      ULYSSES_RANGE(t.get(), Phase::Backward, Direction::Backward);
      BackwardMarks marks;
      marks.layers.resize(1);
      auto& L = marks.layers[0];
      auto tick = [] {
        ut::spin_ns(20000);
        return prof::Tracer::now_ns();
      };
      L.mlp_begin = tick();
      L.mlp_end = tick();
      L.o_begin = tick();
      L.o_end = tick();
      std::thread autograd([&] {
        ut::spin_ns(5000);
        fake->launch("flash_bwd_kernel", T + 100000, T + 200000, 7);
      });
      autograd.join();
      L.qkv_begin = tick();
      L.qkv_end = tick();
      record_backward_mark_ranges(t.get(), marks, attention_window, 8);
    }
    t->end_step(prof::StepRecord{2});
  }
  return prof::load_trace(path);
}

TEST(GpuPaths, AttentionBackwardAtSp1IsAttributedToItsLayer) {
  ut::TempDir tmp;
  const auto m = one_layer_backward(/*attention_window=*/true, tmp.path);
  const int64_t k = kernel_named(m, "flash_bwd_kernel");
  ASSERT_GE(k, 0);
  const auto kr = m.ranges[size_t(k)];
  ASSERT_GE(kr.origin, 0) << "the kernel is attributed";
  EXPECT_TRUE(m.attributed_by_time(int32_t(k))) << "launched by autograd's thread with no range of its own";
  EXPECT_EQ(kr.phase, Phase::Attention) << "not the generic backward";
  EXPECT_EQ(kr.dir, Direction::Backward);
  EXPECT_EQ(kr.layer, 0);
  const auto& origin = m.ranges[size_t(kr.origin)];
  EXPECT_EQ(origin.head_begin, 0);
  EXPECT_EQ(origin.head_end, 8);
}

// Where the attention records its own backward ranges (sp > 1, head chunks, ring) the window is
// not recorded: the same kernel then falls to the enclosing Backward range.
TEST(GpuPaths, WithoutTheWindowTheKernelFallsToTheGenericBackward) {
  ut::TempDir tmp;
  const auto m = one_layer_backward(/*attention_window=*/false, tmp.path);
  const int64_t k = kernel_named(m, "flash_bwd_kernel");
  ASSERT_GE(k, 0);
  EXPECT_EQ(m.ranges[size_t(k)].phase, Phase::Backward);
  EXPECT_EQ(m.ranges[size_t(k)].layer, -1);
}

// ---- activation offload's streams -----------------------------------------------------

// Fake streams and events over CPU tensors: every operation is logged with the stream it ran
// on. Stream 0 is the consumer (the current stream); side streams get ids from 100 on.
struct FakeStreams {
  static inline std::vector<std::string> log;
  static inline int side_streams_made = 0;
  static inline int events = 0;
  static inline int current_stream = 0;
};
struct FakeCopyOps {
  static constexpr bool kDevice = true;
  using Stream = int;
  using Event = int;
  static bool on_device(const at::Tensor&) { return true; }
  static int device_of(const at::Tensor&) { return 0; }
  static Stream current(int) { return FakeStreams::current_stream; }
  static Stream new_side_stream(int dev) { return 100 + dev + 10 * FakeStreams::side_streams_made++; }
  static Event record(const Stream& s) {
    const int e = ++FakeStreams::events;
    FakeStreams::log.push_back("record e" + std::to_string(e) + " s" + std::to_string(s));
    return e;
  }
  static void wait(const Event& e, const Stream& s) {
    FakeStreams::log.push_back("wait e" + std::to_string(e) + " s" + std::to_string(s));
  }
  static at::Tensor to_host(const Stream& s, const at::Tensor& x) {
    FakeStreams::log.push_back("to_host s" + std::to_string(s));
    return x.clone();
  }
  static at::Tensor empty_on_device(const at::Tensor& host, int) {
    FakeStreams::log.push_back("alloc s" + std::to_string(FakeStreams::current_stream));
    return at::empty_like(host);
  }
  static void copy(const Stream& s, at::Tensor& dst, const at::Tensor& src) {
    FakeStreams::log.push_back("copy s" + std::to_string(s));
    dst.copy_(src);
  }
  static void record_stream(const at::Tensor&, const Stream& s) {
    FakeStreams::log.push_back("record_stream s" + std::to_string(s));
  }
};

TEST(GpuPaths, OffloadCopiesUseOneSideStreamAndRestoreOnTheConsumer) {
  FakeStreams::log.clear();
  constexpr int kLayers = 6;
  std::vector<HostCopyOn<FakeCopyOps>> saved(kLayers);
  std::vector<at::Tensor> inputs;
  for (int l = 0; l < kLayers; ++l) {
    inputs.push_back(torch::full({4, 3}, float(l)));
    saved[size_t(l)].offload(inputs.back());
  }
  // backward: layer l restores its input after layer l+1 prefetched it
  for (int l = kLayers - 1; l >= 0; --l) {
    if (l > 0) saved[size_t(l - 1)].prefetch();
    const at::Tensor x = saved[size_t(l)].restore();
    EXPECT_TRUE(torch::equal(x, inputs[size_t(l)])) << "layer " << l;
    saved[size_t(l)].reset();
  }
  EXPECT_EQ(FakeStreams::side_streams_made, 1) << "one side stream for the device, whatever the number of copies";
  const std::string side = "s" + std::to_string(HostCopyOn<FakeCopyOps>::side_stream(0));
  int allocs = 0, copies = 0;
  const auto& log = FakeStreams::log;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].rfind("to_host", 0) == 0 || log[i].rfind("copy", 0) == 0) {
      EXPECT_EQ(log[i].substr(log[i].find(' ') + 1), side) << log[i] << ": every copy on the one side stream";
      ++copies;
    }
    if (log[i].rfind("alloc", 0) == 0) {
      ++allocs;
      EXPECT_EQ(log[i], "alloc s0") << "the restored input comes from the consumer stream's pool";
      // then: the side stream waits for the consumer's work so far, copies, keeps the block
      ASSERT_LT(i + 5, log.size());
      EXPECT_EQ(log[i + 1].substr(0, 7), "record ");
      EXPECT_EQ(log[i + 1].substr(log[i + 1].rfind(' ') + 1), "s0");
      EXPECT_EQ(log[i + 2].rfind("wait ", 0), 0u);
      EXPECT_EQ(log[i + 2].substr(log[i + 2].rfind(' ') + 1), side);
      EXPECT_EQ(log[i + 4], "copy " + side);
      EXPECT_EQ(log[i + 5], "record_stream " + side) << "freed on the consumer only after the copy";
    }
  }
  EXPECT_EQ(allocs, kLayers);
  EXPECT_EQ(copies, 2 * kLayers);
}

// ---- ring exchanges on NCCL ------------------------------------------------------------

// A ring exchange on NCCL is waited for with no timeout (the stream waits, the host does not);
// on Gloo with the group timeout (the host waits, bounded).
TEST(GpuPaths, RingWaitsOnNcclDoNotBlockTheHost) {
  const std::chrono::milliseconds t(30000);
  EXPECT_EQ(ring_wait_timeout("nccl", t), std::chrono::milliseconds(0)) << "c10d's kNoTimeout";
  EXPECT_EQ(ring_wait_timeout("gloo", t), t);
}

}  // namespace
}  // namespace ulysses
