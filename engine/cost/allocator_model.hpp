// The CUDA caching allocator's behaviour, replayed on the planner's allocation stream
// (docs/GPU.md "Allocator model"): what a GPU rank reserves for the tensors the dry run
// allocates and frees in order, instead of a flat share of the peak. The rules are PyTorch's
// c10/cuda/CUDACachingAllocator.cpp (native allocator, default settings):
//   - every request is rounded up to a multiple of 512 B (kMinBlockSize, round_size);
//   - requests <= 1 MiB (kSmallSize) come from the small pool, the rest from the large pool;
//   - a request no cached free block fits (best fit: the smallest free block of the pool that is
//     large enough, lower_bound on (size, address)) makes a new segment (cudaMalloc) of
//     get_allocation_size: 2 MiB for a small one (kSmallBuffer), 20 MiB for 1-10 MiB
//     (kLargeBuffer, kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge);
//   - a block larger than the request is split (should_split) when what remains is >= 512 B in
//     the small pool, > 1 MiB in the large pool (max_split_size unset: no oversize rule);
//   - a freed block merges with its free neighbours of the same segment; segments are given back
//     only when a new one would pass the device's limit: then every cached segment that is
//     entirely free is released and the request retried (release_cached_blocks on a failed
//     cudaMalloc); without a limit (0) nothing is given back.
// expandable_segments:True (PYTORCH_CUDA_ALLOC_CONF, what Arctic Long Sequence Training runs
// with): one segment per pool whose end grows by mapping pages, 2 MiB for the small pool and
// 20 MiB for the large one ("Note [Expandable Segments]"); a request no free block fits extends
// the free block at the end by as many pages as it lacks; every remainder >= 512 B is split; at
// the limit the free pages at the end are unmapped.
// One stream is modelled (a side stream's blocks are not reused by the compute stream in a
// real run). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ulysses::cost {

enum class AllocatorKind { Caching, Expandable };
// "caching" | "expandable" (train.allocator); throws std::invalid_argument for anything else.
AllocatorKind allocator_kind(const std::string& name);

// One event of the stream: block `id` of `bytes` (as requested) given out, or freed.
struct AllocEvent {
  uint64_t id = 0;
  int64_t bytes = 0;
  bool alloc = true;
};

struct AllocatorReplay {
  int64_t requested_peak = 0;  // most requested bytes live at once (what the dry run counts)
  int64_t allocated_peak = 0;  // most bytes of blocks handed out at once (rounded, unsplit remainders)
  int64_t reserved_peak = 0;   // most bytes of segments (cudaMalloc'ed or mapped) at once
  int64_t segments = 0;        // segments made (caching) or pages mapped (expandable)
  int64_t cache_releases = 0;  // times the limit made the allocator give its cache back
  // reserved above requested at the reserved peak's moment: what the allocator adds
  int64_t overhead() const { return reserved_peak - requested_peak; }
};

// The caching allocator's rounding of one request (round_size) and the segment it makes when
// no cached block fits (get_allocation_size).
int64_t allocator_block_size(int64_t bytes);
int64_t allocator_segment_size(int64_t block_bytes);

// limit_bytes > 0: what the allocator may reserve (the device's memory less what is not its own).
AllocatorReplay replay_allocator(const std::vector<AllocEvent>& events, AllocatorKind kind, int64_t limit_bytes = 0);

}  // namespace ulysses::cost
