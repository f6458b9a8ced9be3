// The explainer with a run open (docs/STUDIO.md): each stage of one Ulysses attention layer carries
// the run's measured time, and a range selected in the timeline names its stage. Widget-free
// and Qt-free; the figures come from the profiler's analysis core (prof::layer_table, the
// `layers` table of `ulysses-trace summary --json`), never from a second reading of the trace.
//
//   stage time  = median over the forward layers of the run of (stage time of that layer,
//                 summed over ranks and steps) / samples, i.e. the median over layers of
//                 the per-rank per-step mean (ulysses::true_median: mean of the two middle
//                 values for an even count). Layers where the phase took no time are left
//                 out; a stage no layer traced is "not measured" (the sequence shard stage
//                 has no range of its own and is never measured).
//   stages      0 shard, 1 q/k/v projection (qkv_proj), 2 seq→head all-to-all
//               (a2a_seq_to_head), 3 attention, 4 head→seq all-to-all (a2a_head_to_seq),
//               5 output projection (out_proj) — explain_model's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::ui {

inline constexpr int kExplainStageCount = 6;

struct StageTime {
  bool measured = false;
  double median_ns = 0;  // per layer, per rank, per step (see above)
  int layers = 0;        // forward layers the median is taken over
};

// One entry per explainer stage (kExplainStageCount), from the analysis' layer table.
std::vector<StageTime> stage_times(const std::vector<prof::LayerRow>& layers);

// Ring attention (ring_size > 1): the median duration of the forward K/V exchanges (ring_step
// ranges, direction forward, posting to completion), one per hop; measured = false without any.
StageTime ring_hop_time(const prof::TraceModel& m);

// The explainer stage a traced range belongs to: by its phase (any direction: a backward
// range is the mirror of its forward stage), else by its name for foreign traces
// ("seq_to_head", "attn", "o_proj", ...); -1 when the range is no stage of the attention layer
// (MLP, optimizer, step, ...).
int explain_stage_of_phase(prof::Phase phase);
int explain_stage_of_range(prof::Phase phase, const std::string& name);

}  // namespace ulysses::ui
