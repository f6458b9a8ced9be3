// Memory by category (docs/LONG_SEQUENCES.md) in the engine: the category new tensor storage is charged to
// (a thread-local scope the trainer and the model set around what they build), and the live
// bytes per category of the storage counted by the planner's meta allocator and, in real CPU
// runs, by a counting wrapper around libtorch's CPU allocator. The same scopes run in the
// planner's dry run and in a real step, so planned and measured categories are comparable.
//
//   mem::Scope s(MemCategory::Activations);  // what the forward makes from here
//
// A thread without a scope charges Other (backward's transients, OpenMP workers' scratch).
// What is not seen: memory outside c10's allocator (malloc in kernels), CUDA memory (the
// caching allocator keeps its own statistics).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "memory_labels.hpp"
#include "ulysses/profiler/memory_categories.hpp"

namespace ulysses::mem {

using prof::MemCategory;
using prof::MemoryCategories;

class Scope {
 public:
  explicit Scope(MemCategory c);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  MemCategory prev_;
};
MemCategory current();

// The decoder layer whose forward (or recompute) runs on this thread (-1: none): what it makes
// under the Activations scope is also counted per layer (Counters::at_peak_layers).
class LayerScope {
 public:
  explicit LayerScope(int32_t layer);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  int32_t prev_;
};
int32_t current_layer();

// Host memory that a run on a device keeps off it (train.offload_optimizer's masters and AdamW
// state, train.offload_params' shards), made or stepped on this thread: the planner's meta
// allocator does not count meta storage made in this scope (a meta Trainer keeps its host memory
// on meta too), as a GPU rank's device does not hold it. CPU and CUDA counting ignore it.
class HostScope {
 public:
  HostScope();
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;

 private:
  bool prev_;
};
bool in_host_scope();

// Live bytes by category of one kind of counted storage; thread-safe.
class Counters {
 public:
  // `layer` >= 0 with Activations: counted for that decoder layer too; `group` >= 0: counted for
  // that named group (memory_labels.hpp) too.
  void add(MemCategory c, int64_t n, int32_t layer = -1, int32_t group = -1);
  void sub(MemCategory c, int64_t n, int32_t layer = -1, int32_t group = -1);
  MemoryCategories live() const;
  int64_t peak() const;
  int64_t allocations() const;       // add() calls so far
  MemoryCategories at_peak() const;  // what was alive when the peak was reached
  // The highest total since the last call, with its categories and time (Tracer clock); the
  // peak then restarts from the live bytes now. False when nothing was counted.
  bool take_peak(MemoryCategories* out, int64_t* t_ns);
  // The activations of each decoder layer (index = layer) alive at the peak take_peak returned last.
  std::vector<int64_t> taken_peak_layers() const;
  // The named groups (index = group id, memory_labels.hpp) alive at the peak: at_peak()'s, and
  // the one take_peak returned last.
  std::vector<GroupLive> at_peak_groups() const;
  std::vector<GroupLive> taken_peak_groups() const;
  void reset_peak();  // peak := live now

 private:
  mutable std::mutex mu_;
  MemoryCategories live_, at_peak_;
  std::vector<int64_t> layers_live_, layers_at_peak_, layers_taken_;    // activations per decoder layer
  std::vector<GroupLive> groups_live_, groups_at_peak_, groups_taken_;  // per named group
  int64_t total_ = 0, peak_ = 0, peak_t_ = 0, allocations_ = 0;
  bool counted_ = false;
};

Counters& cpu();   // CPU tensor storage (install_cpu_counting)
Counters& meta();  // the planner's meta tensors (meta_dry_run.cpp)
Counters& cuda();  // CUDA caching-allocator blocks of this process's device (install_cuda_counting)

// Wraps libtorch's CPU allocator so that every CPU tensor storage made from now on is counted
// in cpu() under the category current() on the allocating thread. Idempotent; process-wide.
void install_cpu_counting();
bool cpu_counting_installed();
// Counting on (the default once installed) or off: off, new storage goes to libtorch's
// allocator uncounted (storage counted before is still subtracted when freed). For the cost
// benchmark, which alternates both in one process; runs never switch it off.
void set_cpu_counting(bool on);

// GPU ranks: every block the CUDA caching allocator gives out on `device` from now on is counted
// in cuda() under the category current() on the allocating thread, and given back when its free
// completes (the allocator's trace hook, torch_compat.hpp: libtorch >= 2.1 CUDA builds). Blocks
// are the allocator's rounded sizes (what it holds for the tensor). CUDA is initialised first
// (the hook attaches to the per-device allocators that exist, none before CUDA's lazy init).
// Not counting (the rank then has no categories; its ULYSSES_MEMORY samples remain), with the
// reason: the cudaMallocAsync backend (no trace hook), or a libtorch without the hook. Throws
// when the allocator is still uninitialised after the lazy init: a hook attached then would
// count nothing. Idempotent (the first call's result).
struct CudaCounting {
  bool counting = false;
  std::string backend;  // the allocator's: "native", "cudaMallocAsync", ... ("" unknown)
  std::string why_not;  // when not counting
};
CudaCounting install_cuda_counting(int device);
// What install_cuda_counting asks of CUDA (compat's functions; fakes in tests, no GPU here).
struct CudaAllocatorAccess {
  std::function<void(int)> lazy_init;
  std::function<bool()> initialized;
  std::function<std::string()> name;
  std::function<bool(std::function<void(int, uintptr_t, int64_t, bool)>)> attach;  // false: no hook
};
CudaCounting install_cuda_counting_with(int device, const CudaAllocatorAccess& cuda);
// The hook's handler: a block of `bytes` at `addr` on `device` given out (alloc) or freed; blocks
// of other devices than install_cuda_counting's, and frees of blocks given out before, are not
// counted. Tests call it with fake blocks (no GPU here).
void count_cuda_block(int device, uintptr_t addr, int64_t bytes, bool alloc);
std::shared_ptr<prof::MemoryProbe> cuda_probe();

// Activation offload moved `t` off the device (off) or brought it back (memory_labels.hpp's
// offload hook: the planner's allocator model frees and re-makes its block).
void note_offload(const at::Tensor& t, bool off);

// A receive buffer shaped like `t`, charged to Communication (all-to-all, ring, ZeRO).
at::Tensor comm_buffer_like(const at::Tensor& t);

// The profiler's view of cpu() (TracerOptions::memory_probe): categories, layers and the named
// groups alive at each step's peak (memory_labels.hpp).
std::shared_ptr<prof::MemoryProbe> cpu_probe();

// "fp32", "bf16", ...: a dtype as the peak tables print it.
std::string dtype_words(c10::ScalarType t);

// While alive, every CPU tensor an op returns describes the counted block it lives in
// (memory_labels.hpp describe_block: its group then has a dtype and a shape). A RecordFunction
// observer of every op's outputs: a worker keeps one for its first step (the groups of later
// steps are the same ones). Process-wide; nests.
class DescribeCpuTensors {
 public:
  DescribeCpuTensors();
  ~DescribeCpuTensors();
  DescribeCpuTensors(const DescribeCpuTensors&) = delete;
  DescribeCpuTensors& operator=(const DescribeCpuTensors&) = delete;

 private:
  uint64_t handle_ = 0;
};

}  // namespace ulysses::mem
