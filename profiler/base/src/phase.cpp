// Stable names of phases and directions as they appear in traces and reports.
#include <cstring>

#include "ulysses/profiler/phase.hpp"

namespace ulysses::prof {

namespace {
const char* const kPhaseNames[] = {
    "step",           "embedding", "qkv_proj", "a2a_seq_to_head", "attention",  "a2a_head_to_seq",
    "out_proj",       "mlp",       "norm",     "lm_head",         "loss",       "backward",
    "grad_allreduce", "optimizer", "other",    "ring_step",       "collective", "data",
    "fault_delay"};
static_assert(sizeof(kPhaseNames) / sizeof(kPhaseNames[0]) == static_cast<size_t>(Phase::Count), "one name per Phase");
}  // namespace

const char* phase_name(Phase p) {
  auto i = static_cast<size_t>(p);
  return i < static_cast<size_t>(Phase::Count) ? kPhaseNames[i] : "other";
}

bool phase_from_name(const std::string& s, Phase* out) {
  for (size_t i = 0; i < static_cast<size_t>(Phase::Count); ++i) {
    if (s == kPhaseNames[i]) {
      if (out) *out = static_cast<Phase>(i);
      return true;
    }
  }
  return false;
}

bool phase_is_comm(Phase p) {
  return p == Phase::A2ASeqToHead || p == Phase::A2AHeadToSeq || p == Phase::GradAllReduce || p == Phase::RingStep ||
         p == Phase::Collective;
}

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::Forward:
      return "fwd";
    case Direction::Backward:
      return "bwd";
    case Direction::Recompute:
      return "recompute";
    default:
      return "none";
  }
}

}  // namespace ulysses::prof
