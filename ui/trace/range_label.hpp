// The text a range's box shows in the timeline. Qt-free (timeline_core).
#pragma once

#include <cstdint>
#include <string>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::ui {

// The range's name, except on ZeRO stage 3's rows ("zero gather", "zero reduce-scatter",
// engine/core/zero3): there a range is named by what it moves, from its own fields —
// "gather L3 · 135 KiB", "prefetch L4 · 135 KiB" (chunk 1: issued ahead, while the unit before
// computed), "reduce-scatter L3 · 135 KiB"; units that are not a decoder layer (layer -1: the
// embedding or the final norm + lm_head) read "embed/head". The bytes are the range's own
// bytes_sent (this rank's share of the ring volume).
std::string timeline_range_label(const prof::TraceModel& m, int64_t range);

}  // namespace ulysses::ui
