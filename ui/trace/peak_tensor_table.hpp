// The named peak tables of the memory view (docs/STUDIO.md "Memory by category"): the tensor
// groups alive at a rank's measured peak (ULYSSES_PEAK_TENSORS, RankMemoryRow::at_peak_tensors)
// and the planner's at its peak (planned_tensors), as rows of the trace views' generic table
// model: name, category, dtype, shape, bytes, share of the peak. Widget-free.
#pragma once

#include <cstdint>
#include <vector>

#include "trace/trace_models.hpp"
#include "ulysses/profiler/memory_categories.hpp"

namespace ulysses::ui {

// `peak_bytes` > 0: the share column's denominator (else the rows' sum). Largest first, as given.
TableData peak_tensor_table(const std::vector<prof::PeakTensor>& rows, int64_t peak_bytes);

}  // namespace ulysses::ui
