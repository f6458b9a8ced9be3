// The Nsight Systems numbering our trace files share with `nsys export --type sqlite`: NVTX
// event types, the thread ids of the synthetic communication rows, and the globalPid /
// globalTid encoding. The writer encodes with it, the readers of our files and of nsys exports
// decode with it: one definition, in the base room (profiler/README.md). No torch, no Qt.
#pragma once

#include <cstdint>

namespace ulysses::prof {

// NVTX eventType values as nsys writes them.
constexpr int kNvtxPushPopRange = 59;
constexpr int kNvtxStartEndRange = 60;
// Thread id of the synthetic "comm" row (no Linux tid reaches it: pid_max <= 2^22).
constexpr int64_t kCommTid = 0xFFFFFE;
// ... and of the ring attention rows (Tracer::kRingLane, kRingGradLane): "ring kv", "ring dkv".
constexpr int64_t kRingTid = 0xFFFFFD;
constexpr int64_t kRingGradTid = 0xFFFFFC;
// ... and of ZeRO stage 3's rows (Tracer::kZeroGatherLane, kZeroReduceLane).
constexpr int64_t kZeroGatherTid = 0xFFFFFB;
constexpr int64_t kZeroReduceTid = 0xFFFFFA;
// Whether `tid` is one of the synthetic communication rows above.
constexpr bool is_comm_row_tid(int64_t tid) {
  return tid == kCommTid || tid == kRingTid || tid == kRingGradTid || tid == kZeroGatherTid || tid == kZeroReduceTid;
}

// nsys serialization: globalPid = pid << 24, globalTid = globalPid + tid (the bits above 48
// hold nsys' hardware/VM id, which the decoders drop). Encoders and decoders, one constant.
constexpr int64_t kGlobalIdShift = 0x1000000LL;  // 2^24
inline int64_t make_global_pid(int64_t pid) { return pid * kGlobalIdShift; }
inline int64_t make_global_tid(int64_t pid, int64_t tid) { return pid * kGlobalIdShift + (tid % kGlobalIdShift); }
// pid of a globalPid or globalTid.
inline int64_t pid_of_global_id(int64_t global_id) { return global_id / kGlobalIdShift % kGlobalIdShift; }
// OS thread id of a globalTid.
inline int64_t tid_of_global_tid(int64_t global_tid) { return global_tid % kGlobalIdShift; }

}  // namespace ulysses::prof
