// The all-to-all byte count of one rank, in one place: the engine labels every traced
// all-to-all range with it (engine/core/ulysses_attention.hpp uses this function), the
// profiler reports those bytes, and the studio's explainer (ui/models/explain_model) shows
// it per stage. Torch-free, Qt-free, header-only.
#pragma once

#include <cstdint>

namespace ulysses::cost {

// Bytes one rank sends (= receives) in an equal-split all-to-all of `elements` elements
// of `elem_size` bytes over P ranks (its own 1/P stays local).
inline int64_t a2a_bytes(int64_t elements, int64_t elem_size, int64_t P) { return elements * elem_size * (P - 1) / P; }

}  // namespace ulysses::cost
