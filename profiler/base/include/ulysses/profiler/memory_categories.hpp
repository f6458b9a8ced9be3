// Live memory by what holds it (docs/LONG_SEQUENCES.md): the categories a run's memory is charged to, the
// same in the engine's counting allocators (real CPU runs and the meta-device planner), the
// trace (ULYSSES_MEMORY_CATEGORIES), `ulysses-trace summary --json` and the Chrome export.
// No torch, no Qt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulysses/profiler/phase.hpp"

namespace ulysses::prof {

enum class MemCategory : int32_t {
  Parameters = 0,     // the model's weights (and their bf16 compute copies)
  Gradients = 1,      // the flat gradient buffer (ZeRO: its shard and the units' buffers)
  Optimizer = 2,      // AdamW m, v, fp32 master shards and the step's own temporaries
  Activations = 3,    // made by a layer's forward (saved for backward, or its temporaries)
  Logits = 4,         // final norm, lm_head, logits and the loss
  Communication = 5,  // all-to-all, ring and ZeRO collective buffers
  Other = 6,          // everything else: backward's transients, inputs, scratch
};
inline constexpr int kMemCategories = 7;
inline constexpr const char* kMemCategoryNames[kMemCategories] = {
    "parameters", "gradients", "optimizer", "activations", "logits", "communication", "other"};

struct MemoryCategories {
  int64_t bytes[kMemCategories] = {};
  int64_t total() const {
    int64_t t = 0;
    for (int64_t b : bytes) t += b;
    return t;
  }
};

// Which edge of a traced range a sample was taken at; Peak: the step's highest total (taken
// when it happened, written at the step's end); Planned: the planner's prediction of the peak
// (one row, step -1), written by rank 0 when the run starts; PlannedBegin / PlannedEnd: the
// planner's curve, its categories at both edges of every range its dry run pushed (the model's
// ranges: layers, attention, all-to-alls, MLP, loss), in the dry run's order (step -1, the
// sample's time its position in that order after the run's start; phase and layer the range's).
// PeakLayer: one decoder layer's activations alive at the step's peak (layer = the layer; only
// the activations column is set; written beside the Peak row).
enum class MemEdge : int32_t {
  Begin = 0,
  End = 1,
  Peak = 2,
  Planned = 3,
  PlannedBegin = 4,
  PlannedEnd = 5,
  PeakLayer = 6
};
// The samples of the measured curve (a range's edges and the step's peak).
inline bool is_curve_sample(MemEdge e) { return e == MemEdge::Begin || e == MemEdge::End || e == MemEdge::Peak; }
inline bool is_planned(MemEdge e) {
  return e == MemEdge::Planned || e == MemEdge::PlannedBegin || e == MemEdge::PlannedEnd;
}

// One point of the planner's curve (PlannedBegin / PlannedEnd rows).
struct PlannedMemoryPoint {
  int32_t phase = -1, layer = -1;
  bool begin = true;
  MemoryCategories c;
};

// One named tensor or group of tensors alive at a step's peak (docs/LONG_SEQUENCES.md "What is
// alive at the peak"): the engine's name for it ("layer 0 forward, MLP"), its category, the dtype
// and shape of its largest tensor ("" when unknown) and the group's live bytes and blocks.
struct PeakTensor {
  std::string name, category, dtype;
  std::string shape;  // "(512, 4096)"; "" unknown
  int64_t bytes = 0, blocks = 0;
};
// Rows of a step's peak table the trace keeps: the largest kPeakTableRows - 1 groups, then one
// row for the rest (named "(N smaller groups)"), so a step's rows always add up to its peak.
inline constexpr int kPeakTableRows = 64;

// Supplied by the engine (Tracer options): live bytes by category now, and the highest total
// since the last take_peak with its categories and time (then the peak restarts from now).
class MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  virtual void live(MemoryCategories* out) = 0;
  virtual bool take_peak(MemoryCategories* out, int64_t* t_ns) = 0;
  // The activations of each decoder layer (index = layer) alive at the peak take_peak returned last.
  virtual std::vector<int64_t> taken_peak_layers() { return {}; }
  // The named groups alive at the peak take_peak returned last, largest first (none: no names).
  virtual std::vector<PeakTensor> taken_peak_tensors() { return {}; }
  // The tracer entered (left) a range on the calling thread: what is made inside it is named by
  // it (the engine's memory labels, as the planner's dry run names it).
  virtual void enter_range(Phase phase, Direction dir, int32_t layer) {}
  virtual void leave_range() {}
};

}  // namespace ulysses::prof
