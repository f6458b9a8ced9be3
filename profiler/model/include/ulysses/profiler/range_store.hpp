// TraceRange, RangeExtra and RangeStore: how a TraceModel holds its ranges. A loader builds
// plain rows (std::vector<TraceRange>); once loaded, the store is sealed into columns of about
// 20 bytes per range instead of 56 (+ 40 per extra record), and gives each range back as a
// TraceRange value. No torch, no Qt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "ulysses/profiler/phase.hpp"

namespace ulysses::prof {

// What a range's layer, heads and chunk may be (TraceRange's 16-bit fields): layer
// 0..kMaxTraceLayers-1 (as validate() allows models), heads 0 <= begin < end <= kMaxTraceHeads,
// chunk 0..kMaxTraceChunks-1, each or -1 (none). Readers read anything else as absent, with a
// note.
inline constexpr int32_t kMaxTraceLayers = 1024;
inline constexpr int32_t kMaxTraceHeads = 32767;
inline constexpr int32_t kMaxTraceChunks = 32767;

// One timed interval. Times are ns on the trace's host clock; ranges of one lane are
// sorted by start and nest properly (depth 0 = outermost). What a loader builds and what
// RangeStore gives back; a sealed store holds it in about 20 bytes (see RangeStore). The fields
// most ranges leave empty (bytes, collective identity, GPU ids) are a RangeExtra, which a range
// names by `extra` (read them with TraceModel::extra(r)).
struct TraceRange {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t rank = 0;
  int32_t lane = 0;     // index into TraceModel::lanes
  int32_t name_id = 0;  // index into TraceModel::strings (phase name or NVTX/kernel text)
  int32_t step = -1;
  int32_t parent = -1;  // index into TraceModel::ranges of the enclosing range on this lane
  // Kernel: index into TraceModel::ranges of the host range that launched it (the traced range
  // whose id it carries, or for an all-to-all issue the comm range recorded for it); -1 when
  // unknown. HeadRange copy: the host range it copies.
  int32_t origin = -1;
  int32_t extra = -1;  // index into RangeStore::extras(); -1: none (every field of it at its default)
  // Readers keep these within kMaxTraceLayers, kMaxTraceHeads and kMaxTraceChunks (else -1).
  int16_t layer = -1;
  int16_t head_begin = -1, head_end = -1;
  int16_t chunk = -1;
  Phase phase = Phase::Other;
  Direction dir = Direction::None;
  uint8_t depth = 0;
  bool is_kernel = false;  // GPU kernel / memcpy from CUPTI or nsys
  int64_t duration() const { return end_ns - start_ns; }
};

// What few ranges carry, apart from TraceRange so that the others do not pay for it: a
// communication range's bytes and collective identity, GPU attribution. Shared by a range and
// its HeadRange copies.
struct RangeExtra {
  int64_t bytes_sent = 0, bytes_recv = 0;
  // GPU attribution (Ulysses traces of GPU ranks). Kernel / memcpy: CUPTI correlation id of its
  // launch and the external id the Tracer had pushed then; step, layer, phase, dir, heads and
  // chunk of the range are then those of the range that launched it. Host range: the external
  // id its push carried. 0 = none.
  int64_t external_id = 0;
  uint32_t correlation = 0;  // CUPTI correlation ids are 32-bit
  // Collective identity (RangeInfo::pg / seq): the same (pg, seq) on every member rank names
  // one collective instance. -1 = not a collective (and in traces older than format 3).
  int32_t pg = -1;
  int32_t seq = -1;
  bool empty() const {
    return bytes_sent == 0 && bytes_recv == 0 && external_id == 0 && correlation == 0 && pg == -1 && seq == -1;
  }
};

// A value for some indices of [0, n): one bit per index and the values of the set ones, in
// index order, found by counting the bits before (a few loads, no search).
template <class T>
struct SparseColumn {
  std::vector<uint64_t> bits;    // bit i % 64 of word i / 64: index i has a value
  std::vector<uint32_t> before;  // values of the words before word w
  std::vector<T> values;
  const T* find(size_t i) const {
    const uint64_t w = bits[i >> 6], b = uint64_t{1} << (i & 63);
    if (!(w & b)) return nullptr;
    return &values[before[i >> 6] + static_cast<uint32_t>(__builtin_popcountll(w & (b - 1)))];
  }
  size_t heap_bytes() const {
    return bits.capacity() * sizeof(uint64_t) + before.capacity() * sizeof(uint32_t) + values.capacity() * sizeof(T);
  }
};

// The ranges of a TraceModel (grouped by lane) and their extra records.
//
// Built as rows: push_back, rows(), row(i) and extras() give the loaders a plain vector. seal()
// then turns the rows into columns, which is what a loaded model holds (load_trace seals):
//   start  4 B, an offset from its block's base (blocks of kBlock ranges; a block whose starts
//          span more than 2^32 ns keeps them whole);
//   length 4 B (longer ones, 4.3 s and more, in a sorted side list);
//   attributes 4 B, an index into a table of the distinct (rank, lane, name, layer, heads,
//          chunk, phase, direction, depth, kernel) combinations: a trace repeats the same few
//          thousand per lane, step after step;
//   parent 2 B, how many ranges before it (far ones in a side list), step 2 B (step + 1; big
//          ones in a side list);
//   origin and extra only for ranges that have one (SparseColumn), and the extra records as
//          12 B (bytes as an index into their distinct pairs, pg, seq) plus GPU ids for those
//          that have them.
// operator[] and the iterators give every range back as the TraceRange it was sealed from,
// sealed or not. A store too big to seal (2^32 ranges) stays rows.
//
// Changing a sealed store (rows(), row(), extras(), push_back, ...) turns it back into rows
// first: correct, but the memory comes back, so the loaders change ranges before they seal and
// nothing else does; unseal_count() counts these for the tests to hold to zero.
class RangeStore {
 public:
  static constexpr size_t kBlock = 256;
  // Attributes shared by many ranges: 24 bytes, no padding (hashed as bytes).
  struct Attr {
    int32_t rank = 0, lane = 0, name_id = 0;
    int16_t layer = -1, head_begin = -1, head_end = -1, chunk = -1;
    Phase phase = Phase::Other;
    Direction dir = Direction::None;
    uint8_t depth = 0;
    uint8_t is_kernel = 0;
  };
  struct CompactExtra {
    uint32_t bytes = 0;  // index into byte_pairs_
    int32_t pg = -1, seq = -1;
  };
  struct GpuIds {
    int64_t external_id = 0;
    uint32_t correlation = 0;
  };

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = TraceRange;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = TraceRange;
    const_iterator() = default;
    const_iterator(const RangeStore* s, size_t i) : s_(s), i_(i) {}
    TraceRange operator*() const { return (*s_)[i_]; }
    TraceRange operator[](difference_type k) const { return (*s_)[i_ + static_cast<size_t>(k)]; }
    const_iterator& operator++() { return ++i_, *this; }
    const_iterator operator++(int) {
      const_iterator t = *this;
      ++i_;
      return t;
    }
    const_iterator& operator--() { return --i_, *this; }
    const_iterator operator--(int) {
      const_iterator t = *this;
      --i_;
      return t;
    }
    const_iterator& operator+=(difference_type k) { return i_ += static_cast<size_t>(k), *this; }
    const_iterator& operator-=(difference_type k) { return i_ -= static_cast<size_t>(k), *this; }
    const_iterator operator+(difference_type k) const { return {s_, i_ + static_cast<size_t>(k)}; }
    const_iterator operator-(difference_type k) const { return {s_, i_ - static_cast<size_t>(k)}; }
    difference_type operator-(const const_iterator& o) const {
      return static_cast<difference_type>(i_) - static_cast<difference_type>(o.i_);
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }
    bool operator<(const const_iterator& o) const { return i_ < o.i_; }
    bool operator>(const const_iterator& o) const { return i_ > o.i_; }
    bool operator<=(const const_iterator& o) const { return i_ <= o.i_; }
    bool operator>=(const const_iterator& o) const { return i_ >= o.i_; }

   private:
    const RangeStore* s_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;
  using value_type = TraceRange;

  size_t size() const { return sealed_ ? n_ : rows_.size(); }
  bool empty() const { return size() == 0; }
  // Range i (a value: a sealed store has no TraceRange to refer to).
  const TraceRange operator[](size_t i) const { return sealed_ ? decode(i) : rows_[i]; }
  const TraceRange front() const { return (*this)[0]; }
  const TraceRange back() const { return (*this)[size() - 1]; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }
  // The extra record `e` (TraceRange::extra of a range of this store; >= 0).
  RangeExtra extra(int32_t e) const;
  size_t extras_size() const { return sealed_ ? cx_.size() : extras_.size(); }

  // Building (each unseals a sealed store first).
  std::vector<TraceRange>& rows();
  std::vector<RangeExtra>& extras();  // TraceRange::extra of the rows
  TraceRange& row(size_t i) { return rows()[i]; }
  void push_back(const TraceRange& r) { rows().push_back(r); }
  void reserve(size_t n) { rows().reserve(n); }
  void resize(size_t n) { rows().resize(n); }
  void clear() { rows().clear(), extras().clear(); }

  // Rows to columns, on up to `threads` threads (0: one per core). Ranges and extras read the
  // same after it; the rows' memory is freed. If it throws (std::bad_alloc), the store is the
  // rows it was.
  void seal(int threads = 0);
  bool sealed() const { return sealed_; }
  // Heap bytes the store holds (either form).
  size_t heap_bytes() const;
  // How many times, in this process, a sealed store was turned back into rows.
  static uint64_t unseal_count();

 private:
  struct Block {
    int64_t base = 0;   // smallest start of the block
    int64_t wide = -1;  // >= 0: the block's starts are wide_starts_[wide, wide + kBlock)
  };
  static constexpr uint32_t kLongDur = 0xFFFFFFFFu;
  static constexpr uint16_t kFarParent = 0xFFFFu, kBigStep = 0xFFFFu;

  TraceRange decode(size_t i) const;
  void build_columns(int threads);  // seal() but for freeing the rows and saying so
  void encode_block_starts(size_t lo, size_t hi, std::vector<int64_t>& wide);  // part of build_columns
  void build_extra_columns();                                                  // part of build_columns
  void unseal();
  template <class T>
  static T side(const std::vector<std::pair<uint32_t, T>>& v, size_t i);

  bool sealed_ = false;
  std::vector<TraceRange> rows_;
  std::vector<RangeExtra> extras_;

  size_t n_ = 0;
  std::vector<Block> blocks_;
  std::vector<int64_t> wide_starts_;
  std::vector<uint32_t> start_off_;
  std::vector<uint32_t> dur_;
  std::vector<std::pair<uint32_t, int64_t>> long_dur_;
  std::vector<uint32_t> attr_;
  std::vector<Attr> attrs_;
  std::vector<uint16_t> parent_up_;
  std::vector<std::pair<uint32_t, int32_t>> far_parent_;
  std::vector<uint16_t> step1_;
  std::vector<std::pair<uint32_t, int32_t>> big_step_;
  SparseColumn<int32_t> origin_, extra_;
  std::vector<CompactExtra> cx_;
  std::vector<std::pair<int64_t, int64_t>> byte_pairs_;
  SparseColumn<GpuIds> cx_gpu_;
};

template <class T>
T RangeStore::side(const std::vector<std::pair<uint32_t, T>>& v, size_t i) {
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (v[mid].first < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return v[lo].second;  // seal() put every escaped index in its list
}

inline TraceRange RangeStore::decode(size_t i) const {
  TraceRange r;
  const Block& b = blocks_[i / kBlock];
  r.start_ns = b.wide < 0 ? b.base + start_off_[i] : wide_starts_[static_cast<size_t>(b.wide) + i % kBlock];
  const uint32_t d = dur_[i];
  const int64_t len = d != kLongDur ? int64_t{d} : side(long_dur_, i);
  r.end_ns =
      static_cast<int64_t>(static_cast<uint64_t>(r.start_ns) + static_cast<uint64_t>(len));  // as sealed, wraps and all
  const Attr& a = attrs_[attr_[i]];
  r.rank = a.rank;
  r.lane = a.lane;
  r.name_id = a.name_id;
  const uint16_t s = step1_[i];
  r.step = s != kBigStep ? int32_t{s} - 1 : side(big_step_, i);
  const uint16_t p = parent_up_[i];
  r.parent = p == 0 ? -1 : p != kFarParent ? static_cast<int32_t>(i - p) : side(far_parent_, i);
  const int32_t* o = origin_.find(i);
  r.origin = o ? *o : -1;
  const int32_t* x = extra_.find(i);
  r.extra = x ? *x : -1;
  r.layer = a.layer;
  r.head_begin = a.head_begin;
  r.head_end = a.head_end;
  r.chunk = a.chunk;
  r.phase = a.phase;
  r.dir = a.dir;
  r.depth = a.depth;
  r.is_kernel = a.is_kernel != 0;
  return r;
}

}  // namespace ulysses::prof
