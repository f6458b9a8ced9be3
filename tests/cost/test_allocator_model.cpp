// The CUDA caching allocator's rules (engine/cost/allocator_model.hpp) against hand-computed
// streams: rounding, the segment sizes, best fit, splitting, merging, and what expandable
// segments save on a stream that fragments the caching allocator.
#include <gtest/gtest.h>

#include <vector>

#include "allocator_model.hpp"

using namespace ulysses::cost;

namespace {
constexpr int64_t KiB = 1024, MiB = 1024 * KiB;

struct Stream {
  std::vector<AllocEvent> e;
  Stream& a(uint64_t id, int64_t bytes) {
    e.push_back({id, bytes, true});
    return *this;
  }
  Stream& f(uint64_t id) {
    e.push_back({id, 0, false});
    return *this;
  }
};
}  // namespace

// round_size and get_allocation_size of c10/cuda/CUDACachingAllocator.cpp.
TEST(AllocatorModel, RoundsRequestsAndSizesSegmentsAsPyTorch) {
  EXPECT_EQ(allocator_block_size(1), 512);
  EXPECT_EQ(allocator_block_size(512), 512);
  EXPECT_EQ(allocator_block_size(513), 1024);
  EXPECT_EQ(allocator_segment_size(512), 2 * MiB);              // small pool: 2 MiB segments
  EXPECT_EQ(allocator_segment_size(1 * MiB), 2 * MiB);          // 1 MiB is still small
  EXPECT_EQ(allocator_segment_size(1 * MiB + 512), 20 * MiB);   // 1-10 MiB: a 20 MiB segment
  EXPECT_EQ(allocator_segment_size(10 * MiB - 512), 20 * MiB);  //
  EXPECT_EQ(allocator_segment_size(10 * MiB), 10 * MiB);        // >= 10 MiB: rounded up to 2 MiB
  EXPECT_EQ(allocator_segment_size(10 * MiB + 512), 12 * MiB);
  EXPECT_EQ(allocator_kind("caching"), AllocatorKind::Caching);
  EXPECT_EQ(allocator_kind("expandable"), AllocatorKind::Expandable);
  EXPECT_THROW(allocator_kind("cudaMallocAsync"), std::invalid_argument);
}

// Six 300 KiB requests share one 2 MiB small segment (1800 of 2048 KiB); the seventh needs a
// second one.
TEST(AllocatorModel, SmallRequestsArePackedInTwoMiBSegments) {
  Stream s;
  for (uint64_t i = 1; i <= 6; ++i) s.a(i, 300 * KiB);
  AllocatorReplay r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 2 * MiB);  // 6 x 300 KiB = 1800 KiB <= 2048 KiB
  EXPECT_EQ(r.segments, 1);
  s.a(7, 300 * KiB);
  r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 4 * MiB);
  EXPECT_EQ(r.segments, 2);
  EXPECT_EQ(r.requested_peak, 7 * 300 * KiB);
}

// 12 MiB + 1 B takes a 14 MiB segment; the 2 MiB - 512 B remainder (> 1 MiB) is split off and
// serves a 1.5 MiB request whole: its 0.5 MiB - 512 B remainder (<= 1 MiB) stays with it.
TEST(AllocatorModel, LargeBlocksSplitOnlyAboveOneMiB) {
  Stream s;
  s.a(1, 12 * MiB + 1).a(2, 3 * MiB / 2);
  const AllocatorReplay r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 14 * MiB);
  EXPECT_EQ(r.segments, 1);
  EXPECT_EQ(r.allocated_peak, 14 * MiB);  // 12 MiB + 512 and the unsplit 2 MiB - 512
  EXPECT_EQ(r.requested_peak, 12 * MiB + 1 + 3 * MiB / 2);
  // Expandable segments split every remainder >= 512 B: 12 MiB + 512 and 1.5 MiB in 20 MiB pages.
  const AllocatorReplay x = replay_allocator(s.e, AllocatorKind::Expandable);
  EXPECT_EQ(x.reserved_peak, 20 * MiB);
  EXPECT_EQ(x.allocated_peak, 12 * MiB + 512 + 3 * MiB / 2);
}

// Two 20 MiB halves of a freed 40 MiB segment merge back when both are freed, so a 40 MiB
// request fits again: no second segment.
TEST(AllocatorModel, FreedNeighboursMerge) {
  Stream s;
  s.a(1, 40 * MiB).f(1).a(2, 20 * MiB).a(3, 20 * MiB).f(2).f(3).a(4, 40 * MiB);
  const AllocatorReplay r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 40 * MiB);
  EXPECT_EQ(r.segments, 1);
  // Freed in the other order too.
  Stream t;
  t.a(1, 40 * MiB).f(1).a(2, 20 * MiB).a(3, 20 * MiB).f(3).f(2).a(4, 40 * MiB);
  EXPECT_EQ(replay_allocator(t.e, AllocatorKind::Caching).reserved_peak, 40 * MiB);
}

// The stream that fragments the caching allocator: a 100 MiB block freed, then two 60 MiB ones.
// Caching: the first 60 MiB fits in the cached 100 MiB segment (40 MiB left over), the second
// needs a new 60 MiB segment: 160 MiB reserved for 120 MiB requested. Expandable: the 40 MiB
// left at the segment's end grows by one 20 MiB page: 120 MiB.
TEST(AllocatorModel, ExpandableSegmentsGrowTheFreeEndInsteadOfANewSegment) {
  Stream s;
  s.a(1, 100 * MiB).f(1).a(2, 60 * MiB).a(3, 60 * MiB);
  const AllocatorReplay c = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(c.requested_peak, 120 * MiB);
  EXPECT_EQ(c.reserved_peak, 160 * MiB);
  EXPECT_EQ(c.overhead(), 40 * MiB);
  const AllocatorReplay x = replay_allocator(s.e, AllocatorKind::Expandable);
  EXPECT_EQ(x.reserved_peak, 120 * MiB);
  EXPECT_EQ(x.overhead(), 0);
  EXPECT_EQ(x.segments, 6);  // 20 MiB pages mapped
}

// Best fit: of two cached blocks that fit, the smaller one is taken, so the larger stays for a
// larger request.
TEST(AllocatorModel, BestFitTakesTheSmallestBlockThatFits) {
  Stream s;
  s.a(1, 30 * MiB).a(2, 50 * MiB).f(1).f(2).a(3, 30 * MiB).a(4, 50 * MiB);
  const AllocatorReplay r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 80 * MiB);
  EXPECT_EQ(r.segments, 2);
  // Largest first: the 50 MiB request takes the 50 MiB block, not a split of anything else.
  Stream t;
  t.a(1, 30 * MiB).a(2, 50 * MiB).f(1).f(2).a(4, 50 * MiB).a(3, 30 * MiB);
  EXPECT_EQ(replay_allocator(t.e, AllocatorKind::Caching).reserved_peak, 80 * MiB);
}

// A free of a block the stream never gave out (made before recording began) is ignored.
TEST(AllocatorModel, UnknownFreesAreIgnored) {
  Stream s;
  s.f(99).a(1, 4 * MiB).f(1);
  const AllocatorReplay r = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(r.reserved_peak, 20 * MiB);
  EXPECT_EQ(r.requested_peak, 4 * MiB);
}

// At the device's limit the allocator gives back its entirely free cached segments and retries:
// a 100 MiB segment freed whole makes room for a 120 MiB one under a 150 MiB limit; a split one
// cannot be given back.
TEST(AllocatorModel, AtTheLimitFreeCachedSegmentsAreGivenBack) {
  Stream s;
  s.a(1, 100 * MiB).f(1).a(2, 120 * MiB);
  const AllocatorReplay unlimited = replay_allocator(s.e, AllocatorKind::Caching);
  EXPECT_EQ(unlimited.reserved_peak, 220 * MiB);  // the free 100 MiB segment stays cached
  EXPECT_EQ(unlimited.cache_releases, 0);
  const AllocatorReplay limited = replay_allocator(s.e, AllocatorKind::Caching, 150 * MiB);
  EXPECT_EQ(limited.reserved_peak, 120 * MiB);  // given back before the 120 MiB segment is made
  EXPECT_EQ(limited.cache_releases, 1);
  // A split segment is not free as a whole: it stays, and the limit is passed.
  Stream t;
  t.a(1, 100 * MiB).f(1).a(2, 60 * MiB).a(3, 60 * MiB);
  EXPECT_EQ(replay_allocator(t.e, AllocatorKind::Caching, 150 * MiB).reserved_peak, 160 * MiB);
  // Expandable: the free pages at the end are unmapped.
  Stream x;
  x.a(1, 100 * MiB).a(2, 20 * MiB).f(1).f(2).a(3, 140 * MiB);
  EXPECT_EQ(replay_allocator(x.e, AllocatorKind::Expandable).reserved_peak, 140 * MiB);  // grows by one page
}
