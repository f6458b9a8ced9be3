// Names for what tensor storage holds (docs/LONG_SEQUENCES.md "What is alive at the peak"). Every
// block the counting allocators count (the planner's meta allocator, a CPU rank's counting
// wrapper) is charged to a group: the names in scope on the allocating thread (mem::Label), the
// innermost traced range there (phase, direction, layer: pushed by the tracers that see ranges,
// push_range / pop_range), the decoder layer (mem::LayerScope) and the category. So a plan and a
// measured run can say what was alive at their peak in words a user understands:
//
//   layer 17 recompute, attention: receive buffer       communication  bf16 (8, 1, 4096, 4, 128)
//   layer 18: gathered unit, prefetched                  parameters     fp32 (218112000)
//
// Engine code names what it makes with one line: `mem::Label l("gathered unit", layer);` (the
// name is a string literal, kept by pointer). Thread-local, so a label costs two stores; the
// group of an allocation is looked up once per change of what is in scope.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulysses/profiler/memory_categories.hpp"
#include "ulysses/profiler/phase.hpp"

namespace ulysses::mem {

// A label's layer for storage that belongs to no decoder layer (the embedding's gathered unit).
inline constexpr int32_t kNoLayer = -2;

// A name for what this thread allocates in its scope. `layer` >= 0 (or kNoLayer) says whose the
// storage is when it is not the computing layer's (a prefetched unit): the range is then not named.
class Label {
 public:
  explicit Label(const char* name, int32_t layer = -1);
  ~Label();
  Label(const Label&) = delete;
  Label& operator=(const Label&) = delete;
};

// The traced range the calling thread is in (a tracer that sees ranges calls these in its
// push / pop): its phase, direction and layer name what is made inside it.
void push_range(prof::Phase phase, prof::Direction dir, int32_t layer);
void pop_range();

// The autograd node whose backward runs on the calling thread (the planner's dry run pushes it
// from a RecordFunction observer): names what backward makes where no label does
// ("backward: MmBackward0"). Copied (a node's name is a temporary).
void push_op(const char* name);
void pop_op();

// The group new storage of category `c` on this thread is charged to (interned; >= 0).
int32_t current_group(prof::MemCategory c);

// Live bytes and blocks of one group.
struct GroupLive {
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// The tensor a block of `group` holds, as the op that made it returned it (the planner's dry run
// describes every block it can): the group keeps the dtype and shape of its largest one.
void describe_block(int32_t group, int64_t bytes, const std::string& dtype, const std::vector<int64_t>& shape);

// Activation offload moved `storage` (a tensor's storage context) off the device (off = true) or
// brought it back (false): the planner's dry run keeps offloaded inputs on meta, and the hook it
// sets tells its allocator model that a GPU would have freed and re-made the block. No-op
// without a hook (real runs).
using OffloadHook = void (*)(void* storage_context, void* deleter, bool off);
void set_offload_hook(OffloadHook hook);
void note_offload_storage(void* storage_context, void* deleter, bool off);  // calls the hook

// One row of a peak table: a group alive at the peak, by name.
struct TensorGroup {
  std::string name;      // "layer 17 recompute, attention: receive buffer"
  std::string category;  // memory_categories.hpp's name
  std::string dtype;     // of the group's largest described block ("" when none was described)
  std::vector<int64_t> shape;
  int64_t bytes = 0, blocks = 0;
};

// The groups of `live` (index = group id) with bytes, largest first.
std::vector<TensorGroup> name_groups(const std::vector<GroupLive>& live);

// "fp32 (8, 4096)" / "-": a row's dtype and shape as the plan prints them.
std::string dtype_shape(const TensorGroup& g);

// The row as the trace keeps it (ULYSSES_PEAK_TENSORS: shape "(8, 4096)", "" when undescribed).
prof::PeakTensor peak_tensor(const TensorGroup& g);

}  // namespace ulysses::mem
