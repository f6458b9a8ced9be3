// Phases and directions of a traced range, and their stable names as traces and reports spell
// them: what the tracer records, the trace model holds and the analysis and exports read (the
// base room, profiler/README.md). No torch, no Qt.
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::prof {

enum class Phase : uint8_t {
  Step = 0,
  Embedding,
  QkvProj,
  A2ASeqToHead,
  Attention,
  A2AHeadToSeq,
  OutProj,
  Mlp,
  Norm,
  LmHead,
  Loss,
  Backward,
  GradAllReduce,
  Optimizer,
  Other,
  // Ring attention (parallel.ring_size > 1): one K/V (forward) or K/V + dK/dV (backward)
  // block exchange with the ring neighbours, on the comm lane. Appended after Other so the
  // numbers of earlier phases, stored in traces, keep their meaning.
  RingStep,
  // A blocking collective outside the layers and the gradient reduction (the loss sum and
  // valid-token all-reduce, the peak-memory max, barriers; traced by the engine's Comm with its
  // (pg, seq)), the host building a step's batch, and the sleep of an injected straggler
  // (faults.delay_ms) before each collective it issues. Collective is communication; data and
  // fault_delay are work of the rank (counted as compute: a straggler's delay stands for slow work).
  Collective,
  Data,
  FaultDelay,
  Count
};
// Stable lower-case names used in the trace ("qkv_proj", "a2a_seq_to_head", ...).
const char* phase_name(Phase p);
bool phase_from_name(const std::string& s, Phase* out);
bool phase_is_comm(Phase p);  // A2ASeqToHead, A2AHeadToSeq, GradAllReduce, RingStep, Collective

enum class Direction : uint8_t { None = 0, Forward, Backward, Recompute };
const char* direction_name(Direction d);

}  // namespace ulysses::prof
