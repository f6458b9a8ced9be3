// Replay of an allocation stream through the CUDA caching allocator's rules (see
// allocator_model.hpp for each rule and where PyTorch has it).
#include "allocator_model.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace ulysses::cost {

namespace {

// c10/cuda/CUDACachingAllocator.cpp's constants.
constexpr int64_t kMinBlockSize = 512;                 // every size rounded to a multiple of this
constexpr int64_t kSmallSize = int64_t{1} << 20;       // largest "small" request
constexpr int64_t kSmallBuffer = int64_t{2} << 20;     // small requests packed in 2 MiB segments
constexpr int64_t kMinLargeAlloc = int64_t{10} << 20;  // 1-10 MiB requests take a kLargeBuffer segment
constexpr int64_t kLargeBuffer = int64_t{20} << 20;
constexpr int64_t kRoundLarge = int64_t{2} << 20;  // larger segments rounded up to 2 MiB

struct Block {
  int64_t size = 0;
  int64_t segment = 0;
  bool allocated = false;
};

// One pool (small or large): blocks by address; free ones also by (size, address) for best fit.
// Segments of the caching allocator lie apart in the address space (a gap after each), so only
// blocks of one segment are ever neighbours.
class Pool {
 public:
  Pool(bool small, bool expandable) : small_(small), expandable_(expandable) {}

  // Hands out a block of `size` (rounded) and returns its address and size (larger than `size`
  // when the remainder was not split off); grows `reserved`.
  std::pair<int64_t, int64_t> alloc(int64_t size, int64_t* reserved, int64_t* segments) {
    int64_t addr = -1;
    if (expandable_) {
      addr = best_fit(size, /*skip_tail=*/true);
      if (addr < 0) addr = grow_tail(size, reserved, segments);
    } else {
      addr = best_fit(size, /*skip_tail=*/false);
      if (addr < 0) {
        const int64_t seg = allocator_segment_size(size);
        addr = next_base_;
        next_base_ += seg + kRoundLarge;  // a gap: segments never merge
        segment_size_[segments_made_] = seg;
        blocks_[addr] = Block{seg, segments_made_++, false};
        *reserved += seg;
        ++*segments;
      }
    }
    Block& b = blocks_[addr];
    const int64_t remaining = b.size - size;
    if (should_split(remaining)) {
      blocks_[addr + size] = Block{remaining, b.segment, false};
      free_.insert({remaining, addr + size});
      b.size = size;
    }
    b.allocated = true;
    return {addr, b.size};
  }

  // Bytes a request of `size` would add to the reserved memory (0: a cached block fits).
  int64_t growth(int64_t size) const {
    for (auto it = free_.lower_bound({size, -1}); it != free_.end(); ++it)
      if (!expandable_ || it->second + it->first != mapped_end_) return 0;
    if (!expandable_) return allocator_segment_size(size);
    const int64_t page = small_ ? kSmallBuffer : kLargeBuffer;
    int64_t have = 0;
    if (!blocks_.empty()) {
      auto last = std::prev(blocks_.end());
      if (!last->second.allocated && last->first + last->second.size == mapped_end_) have = last->second.size;
    }
    return have >= size ? 0 : (size - have + page - 1) / page * page;
  }

  // What the allocator does when the device is full (release_cached_blocks): gives back every
  // cached segment that is entirely free (caching) or the free pages at the segment's end
  // (expandable). Returns the bytes given back.
  int64_t release_cached() {
    int64_t freed = 0;
    if (!expandable_) {
      for (auto it = free_.begin(); it != free_.end();) {
        const int64_t addr = it->second;
        const Block& b = blocks_.at(addr);
        if (b.size == segment_size_.at(b.segment)) {
          freed += b.size;
          segment_size_.erase(b.segment);
          blocks_.erase(addr);
          it = free_.erase(it);
        } else {
          ++it;
        }
      }
      return freed;
    }
    if (blocks_.empty()) return 0;
    const int64_t page = small_ ? kSmallBuffer : kLargeBuffer;
    auto last = std::prev(blocks_.end());
    if (last->second.allocated || last->first + last->second.size != mapped_end_) return 0;
    const int64_t unmap = last->second.size / page * page;
    if (unmap == 0) return 0;
    free_.erase({last->second.size, last->first});
    last->second.size -= unmap;
    mapped_end_ -= unmap;
    if (last->second.size == 0) {
      blocks_.erase(last);
    } else {
      free_.insert({last->second.size, last->first});
    }
    return unmap;
  }

  // Frees the block at `addr` and merges it with its free neighbours.
  void free(int64_t addr) {
    auto it = blocks_.find(addr);
    it->second.allocated = false;
    if (it != blocks_.begin()) {  // merge with the block before
      auto prev = std::prev(it);
      if (!prev->second.allocated && prev->second.segment == it->second.segment &&
          prev->first + prev->second.size == it->first) {
        free_.erase({prev->second.size, prev->first});
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.allocated && next->second.segment == it->second.segment &&
        it->first + it->second.size == next->first) {
      free_.erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    free_.insert({it->second.size, it->first});
  }

 private:
  bool should_split(int64_t remaining) const {
    if (small_ || expandable_) return remaining >= kMinBlockSize;
    return remaining > kSmallSize;
  }

  // The smallest free block of at least `size` (address order among equals); with skip_tail the
  // free block at the end of an expandable segment counts as the size it can grow to, so it is
  // taken last.
  int64_t best_fit(int64_t size, bool skip_tail) {
    for (auto it = free_.lower_bound({size, -1}); it != free_.end(); ++it) {
      if (skip_tail && it->second + it->first == mapped_end_) continue;
      const int64_t addr = it->second;
      free_.erase(it);
      return addr;
    }
    return -1;
  }

  // Expandable: extends the free block at the end (or makes one there) by whole pages.
  int64_t grow_tail(int64_t size, int64_t* reserved, int64_t* segments) {
    const int64_t page = small_ ? kSmallBuffer : kLargeBuffer;
    int64_t addr = mapped_end_, have = 0;
    if (!blocks_.empty()) {
      auto last = std::prev(blocks_.end());
      if (!last->second.allocated && last->first + last->second.size == mapped_end_) {
        addr = last->first;
        have = last->second.size;
        free_.erase({have, addr});
      }
    }
    const int64_t pages = have >= size ? 0 : (size - have + page - 1) / page;
    mapped_end_ += pages * page;
    *reserved += pages * page;
    *segments += pages;
    blocks_[addr] = Block{have + pages * page, 0, false};
    return addr;
  }

  bool small_, expandable_;
  std::map<int64_t, Block> blocks_;
  std::set<std::pair<int64_t, int64_t>> free_;  // (size, address)
  std::map<int64_t, int64_t> segment_size_;     // caching: segment -> its size
  int64_t next_base_ = 0, segments_made_ = 0, mapped_end_ = 0;
};

}  // namespace

AllocatorKind allocator_kind(const std::string& name) {
  if (name == "caching") return AllocatorKind::Caching;
  if (name == "expandable") return AllocatorKind::Expandable;
  throw std::invalid_argument("train.allocator must be caching or expandable (got \"" + name + "\")");
}

int64_t allocator_block_size(int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

int64_t allocator_segment_size(int64_t block_bytes) {
  if (block_bytes <= kSmallSize) return kSmallBuffer;
  if (block_bytes < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((block_bytes + kRoundLarge - 1) / kRoundLarge);
}

AllocatorReplay replay_allocator(const std::vector<AllocEvent>& events, AllocatorKind kind, int64_t limit_bytes) {
  const bool expandable = kind == AllocatorKind::Expandable;
  Pool small(true, expandable), large(false, expandable);
  struct Live {
    bool small;
    int64_t addr, bytes, block;
  };
  std::unordered_map<uint64_t, Live> live;
  AllocatorReplay r;
  int64_t requested = 0, allocated = 0, reserved = 0;
  for (const AllocEvent& e : events) {
    if (e.alloc) {
      if (e.bytes <= 0) continue;  // a zero-byte storage takes no block
      const int64_t size = allocator_block_size(e.bytes);
      const bool is_small = size <= kSmallSize;
      Pool& pool = is_small ? small : large;
      if (limit_bytes > 0 && reserved + pool.growth(size) > limit_bytes) {  // out of memory: give cache back, retry
        reserved -= small.release_cached() + large.release_cached();
        ++r.cache_releases;
      }
      const auto [addr, block] = (is_small ? small : large).alloc(size, &reserved, &r.segments);
      live[e.id] = Live{is_small, addr, e.bytes, block};
      requested += e.bytes;
      allocated += block;  // the block as handed out: a remainder not split off counts with it
      r.requested_peak = std::max(r.requested_peak, requested);
      r.allocated_peak = std::max(r.allocated_peak, allocated);
      r.reserved_peak = std::max(r.reserved_peak, reserved);
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) continue;  // given out before the stream began
      (it->second.small ? small : large).free(it->second.addr);
      requested -= it->second.bytes;
      allocated -= it->second.block;
      live.erase(it);
    }
  }
  return r;
}

}  // namespace ulysses::cost
