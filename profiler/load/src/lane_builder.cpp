// Lane building for the trace loader: turns the raw ranges of each source (thread, comm
// row, CUDA stream) into final lanes whose ranges nest properly (overlapping async ranges are
// spread over extra sub-lanes), sets parents and depths, adds per-head-range display lanes
// and links kernels to the host range that launched them. Pure functions of the model.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <map>
#include <tuple>

#include "ulysses/profiler/trace_loading.hpp"

namespace ulysses::prof::detail {

namespace {

// Assigns sub-lanes to ranges [b, e) of one source (sorted by start asc, end desc) so that
// each sub-lane nests properly. Returns the number of sub-lanes; sub[i] per range.
int assign_sublanes(const std::vector<TraceRange>& v, size_t b, size_t e, std::vector<uint16_t>& sub) {
  std::vector<std::vector<int64_t>> stacks(1);
  for (size_t i = b; i < e; ++i) {
    const TraceRange& r = v[i];
    size_t k = 0;
    for (;; ++k) {
      if (k == stacks.size()) stacks.emplace_back();
      auto& st = stacks[k];
      while (!st.empty() && st.back() <= r.start_ns) st.pop_back();
      if (st.empty() || st.back() >= r.end_ns) break;
      if (k + 1 >= 65535) break;  // pathological input: give up splitting
    }
    stacks[k].push_back(r.end_ns);
    sub[i - b] = static_cast<uint16_t>(k);
  }
  return static_cast<int>(stacks.size());
}

// Whether a range gets a copy on its rank's head-range lane: build_lanes leaves room for
// exactly these, and add_head_lanes (either way) copies exactly these.
bool copied_to_head_lane(const TraceRange& r) { return r.head_begin >= 0 && !r.is_kernel; }

bool by_start(const TraceRange& a, const TraceRange& b) {
  return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

// Sorts v[b, e) by_start, ties in their current order (a stable sort). Input that is a few runs already in order is
// merged; already sorted input costs one pass. Otherwise it sorts 24-byte keys and then moves each 56-byte range once,
// instead of swapping ranges throughout the sort.
void sort_by_start(std::vector<TraceRange>& v, size_t b, size_t e) {
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(b);
  // A few runs already in order (a head range's copies, gathered lane by lane; one sorted lane):
  // merged stably, pairwise, without sorting.
  constexpr size_t kMaxRuns = 16;
  std::vector<size_t> runs{b};
  for (size_t i = b + 1; i < e && runs.size() <= kMaxRuns; ++i)
    if (by_start(v[i], v[i - 1])) runs.push_back(i);
  if (runs.size() <= kMaxRuns) {
    runs.push_back(e);
    const auto at = [&](size_t i) { return v.begin() + static_cast<std::ptrdiff_t>(i); };
    while (runs.size() > 2) {
      std::vector<size_t> next;
      size_t j = 0;
      for (; j + 2 < runs.size(); j += 2) {
        std::inplace_merge(at(runs[j]), at(runs[j + 1]), at(runs[j + 2]), by_start);
        next.push_back(runs[j]);
      }
      for (; j < runs.size(); ++j) next.push_back(runs[j]);
      runs.swap(next);
    }
    return;
  }
  struct Key {
    int64_t start, end;
    size_t at;
  };
  std::vector<Key> keys(e - b);
  for (size_t k = 0; k < keys.size(); ++k) {
    const TraceRange& r = v[b + k];
    keys[k] = {r.start_ns, r.end_ns, k};
  }
  std::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.start != y.start) return x.start < y.start;
    if (x.end != y.end) return x.end > y.end;
    return x.at < y.at;
  });
  std::vector<TraceRange> sorted;
  sorted.reserve(keys.size());
  for (const Key& k : keys) sorted.push_back(v[b + k.at]);
  std::move(sorted.begin(), sorted.end(), first);
}

// Sets parent and depth of ranges [b, e) of one final lane (sorted by_start).
void link_lane(std::vector<TraceRange>& v, size_t b, size_t e) {
  std::vector<int32_t> stack;
  for (size_t i = b; i < e; ++i) {
    TraceRange& r = v[i];
    while (!stack.empty() && v[stack.back()].end_ns <= r.start_ns) stack.pop_back();
    // After sub-lane assignment the top (if any) contains r.
    r.parent = stack.empty() ? -1 : stack.back();
    r.depth = static_cast<uint8_t>(std::min<size_t>(stack.size(), 255));
    stack.push_back(static_cast<int32_t>(i));
  }
}

// "heads 0-3", and "heads 0-3 #2" for its second sub-lane (sub-lane s counts from 0).
std::string head_lane_name(int32_t head_begin, int32_t head_end, size_t s) {
  return "heads " + std::to_string(head_begin) + "-" + std::to_string(head_end - 1) +
         (s ? " #" + std::to_string(s + 1) : "");
}

// The legacy loader's way: copies every range into a new vector, rank by rank, with that
// rank's head-range copies after its lanes (a map of copies per head range, each sorted).
void add_head_lanes_by_copying(TraceModel& m, bool exact_reserve) {
  size_t copies = 0;
  for (const auto& r : m.ranges.rows()) {
    if (copied_to_head_lane(r)) {
      ++copies;
      if (!exact_reserve) break;
    }
  }
  if (copies == 0) return;
  std::vector<TraceRange> out;
  std::vector<Lane> lanes;
  // Exact: growing past a reserve of the originals alone doubles the vector (up to ~2x slack).
  out.reserve(m.ranges.rows().size() + (exact_reserve ? copies : 0));
  size_t li = 0;
  while (li < m.lanes.size()) {
    int32_t rank = m.lanes[li].rank;
    size_t lend = li;
    while (lend < m.lanes.size() && m.lanes[lend].rank == rank) ++lend;
    std::map<std::pair<int32_t, int32_t>, std::vector<TraceRange>> heads;
    for (size_t l = li; l < lend; ++l) {
      Lane lane = m.lanes[l];
      int64_t first = static_cast<int64_t>(out.size());
      for (int64_t k = 0; k < lane.count; ++k) {
        TraceRange r = m.ranges.rows()[static_cast<size_t>(lane.first + k)];
        r.lane = static_cast<int32_t>(lanes.size());
        if (r.parent >= 0) r.parent = static_cast<int32_t>(r.parent - lane.first + first);
        out.push_back(r);
        if (copied_to_head_lane(r)) {
          r.origin = static_cast<int32_t>(out.size() - 1);  // the copy points at its original
          heads[{r.head_begin, r.head_end}].push_back(r);
        }
      }
      lane.first = first;
      lanes.push_back(std::move(lane));
    }
    for (auto& [hr, v] : heads) {
      sort_by_start(v, 0, v.size());
      std::vector<uint16_t> sub(v.size());
      int n = assign_sublanes(v, 0, v.size(), sub);
      for (int s = 0; s < n; ++s) {
        Lane l;
        l.rank = rank;
        l.kind = LaneKind::HeadRange;
        l.head_begin = hr.first;
        l.head_end = hr.second;
        l.name = head_lane_name(hr.first, hr.second, static_cast<size_t>(s));
        l.first = static_cast<int64_t>(out.size());
        for (size_t k = 0; k < v.size(); ++k) {
          if (sub[k] != s) continue;
          TraceRange r = v[k];
          r.lane = static_cast<int32_t>(lanes.size());
          out.push_back(r);
        }
        l.count = static_cast<int64_t>(out.size()) - l.first;
        link_lane(out, static_cast<size_t>(l.first), out.size());
        lanes.push_back(std::move(l));
      }
    }
    li = lend;
  }
  m.ranges.rows() = std::move(out);
  m.lanes = std::move(lanes);
}

// Splits v[b, e) (sorted by_start) into sub-lanes that nest, reordering it stably by sub-lane;
// returns the number of ranges in each sub-lane.
std::vector<int64_t> split_into_sublanes(std::vector<TraceRange>& v, size_t b, size_t e) {
  std::vector<uint16_t> sub(e - b);
  const int n = assign_sublanes(v, b, e, sub);
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  for (uint16_t s : sub) ++counts[s];
  if (n > 1) {
    std::vector<size_t> idx(e - b);
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return sub[x] < sub[y]; });
    std::vector<TraceRange> seg(e - b);
    for (size_t k = 0; k < idx.size(); ++k) seg[k] = v[b + idx[k]];
    std::move(seg.begin(), seg.end(), v.begin() + static_cast<std::ptrdiff_t>(b));
  }
  return counts;
}

}  // namespace

void order_file_ranges(std::vector<TraceRange>& ranges) {
  // One pass finds the sources whose ranges are out of order; only those are sorted, each in
  // the places its ranges already hold.
  std::vector<std::pair<int64_t, int64_t>> last;  // per source: start, end of its last range
  std::vector<char> unsorted;
  bool any = false;
  for (const TraceRange& r : ranges) {
    if (r.lane < 0) continue;  // not from the reader; build_lanes decides
    const size_t l = static_cast<size_t>(r.lane);
    if (l >= last.size()) {
      last.resize(l + 1, {INT64_MIN, INT64_MAX});
      unsorted.resize(l + 1, 0);
    }
    const auto& [s, e] = last[l];
    if (r.start_ns < s || (r.start_ns == s && r.end_ns > e)) {
      unsorted[l] = 1;
      any = true;
    }
    last[l] = {r.start_ns, r.end_ns};
  }
  if (!any) return;
  std::vector<std::vector<size_t>> places(unsorted.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int32_t l = ranges[i].lane;
    if (l >= 0 && unsorted[static_cast<size_t>(l)]) places[static_cast<size_t>(l)].push_back(i);
  }
  std::vector<TraceRange> lane;
  for (const auto& at : places) {
    if (at.empty()) continue;
    lane.clear();
    for (size_t i : at) lane.push_back(ranges[i]);
    sort_by_start(lane, 0, lane.size());
    for (size_t k = 0; k < at.size(); ++k) ranges[at[k]] = lane[k];
  }
}

namespace {
// Sources in lane order (rank, order, id), and each source's place in it.
struct SourceOrder {
  std::vector<int32_t> order;           // lane -> source
  std::vector<int32_t> rank_of_source;  // source -> lane
};
SourceOrder order_sources(const Builder& b) {
  SourceOrder so;
  so.order.resize(b.sources.size());
  for (size_t i = 0; i < so.order.size(); ++i) so.order[i] = static_cast<int32_t>(i);
  std::sort(so.order.begin(), so.order.end(), [&](int32_t x, int32_t y) {
    const auto &a = b.sources[x], &c = b.sources[y];
    return std::tie(a.rank, a.order, a.id) < std::tie(c.rank, c.order, c.id);
  });
  so.rank_of_source.resize(b.sources.size());
  for (size_t i = 0; i < so.order.size(); ++i) so.rank_of_source[so.order[i]] = static_cast<int32_t>(i);
  return so;
}

// Each source's ranges: [begin[l], begin[l] + count[l]) of m.ranges.rows().
struct SourceSlices {
  std::vector<int64_t> begin, count;
};

// Legacy: one sort of the whole vector (moves 56-byte ranges n log n times).
SourceSlices gather_sources_by_sorting(Builder& b, const SourceOrder& so) {
  TraceModel& m = b.m;
  for (auto& v : b.pending_ranges) m.ranges.rows().insert(m.ranges.rows().end(), v.begin(), v.end());
  b.pending_ranges.clear();
  for (auto& r : m.ranges.rows()) r.lane = so.rank_of_source[r.lane];
  std::sort(m.ranges.rows().begin(), m.ranges.rows().end(), [](const TraceRange& x, const TraceRange& y) {
    return x.lane != y.lane ? x.lane < y.lane : by_start(x, y);
  });
  SourceSlices sl{std::vector<int64_t>(so.order.size(), 0), std::vector<int64_t>(so.order.size(), 0)};
  size_t i = 0;
  for (size_t l = 0; l < so.order.size(); ++l) {
    size_t e = i;
    while (e < m.ranges.rows().size() && m.ranges.rows()[e].lane == static_cast<int32_t>(l)) ++e;
    sl.begin[l] = static_cast<int64_t>(i);
    sl.count[l] = static_cast<int64_t>(e - i);
    i = e;
  }
  return sl;
}

// Every range is copied once, into its lane's slice; the parts (m.ranges.rows(), then the
// parallel reader's per-file vectors) are counted and copied on up to `threads` threads,
// each part into places of its own, so the lanes come out as one pass in part order would
// give them. With room_for_head_lanes the vector's capacity also holds the head-range
// copies, so add_head_lanes does not move it to a bigger one; that room is not touched
// here (no memory for it while the parts are still held).
SourceSlices gather_sources_in_parallel(Builder& b, const SourceOrder& so, int threads, bool room_for_head_lanes) {
  TraceModel& m = b.m;
  const std::vector<int32_t>& rank_of_source = so.rank_of_source;
  SourceSlices sl{std::vector<int64_t>(so.order.size(), 0), std::vector<int64_t>(so.order.size(), 0)};
  std::vector<std::vector<TraceRange>> parts;
  parts.reserve(b.pending_ranges.size() + 1);
  parts.push_back(std::move(m.ranges.rows()));
  for (auto& v : b.pending_ranges) parts.push_back(std::move(v));
  b.pending_ranges.clear();
  struct PartLanes {  // the lanes one part's ranges go to: [lo, lo + n.size())
    int32_t lo = 0;
    std::vector<int64_t> n, at;  // per lane: ranges, where the part's first goes
    int64_t heads = 0;           // head-range copies its ranges will have
  };
  std::vector<PartLanes> pl(parts.size());
  parallel_for(parts.size(), threads, [&](size_t p) {
    const std::vector<TraceRange>& v = parts[p];
    if (v.empty()) return;
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (const TraceRange& r : v) {
      lo = std::min(lo, rank_of_source[static_cast<size_t>(r.lane)]);
      hi = std::max(hi, rank_of_source[static_cast<size_t>(r.lane)]);
    }
    PartLanes& x = pl[p];
    x.lo = lo;
    x.n.assign(static_cast<size_t>(hi - lo) + 1, 0);
    for (const TraceRange& r : v) {
      ++x.n[static_cast<size_t>(rank_of_source[static_cast<size_t>(r.lane)] - lo)];
      x.heads += room_for_head_lanes && copied_to_head_lane(r);
    }
  });
  int64_t head_copies = 0;
  for (const PartLanes& x : pl) {
    for (size_t k = 0; k < x.n.size(); ++k) sl.count[static_cast<size_t>(x.lo) + k] += x.n[k];
    head_copies += x.heads;
  }
  int64_t total = 0;
  for (size_t l = 0; l < so.order.size(); ++l) {
    sl.begin[l] = total;
    total += sl.count[l];
  }
  std::vector<int64_t> pos(sl.begin);
  for (PartLanes& x : pl) {
    x.at.assign(pos.begin() + x.lo, pos.begin() + x.lo + static_cast<std::ptrdiff_t>(x.n.size()));
    for (size_t k = 0; k < x.n.size(); ++k) pos[static_cast<size_t>(x.lo) + k] += x.n[k];
  }
  std::vector<TraceRange> out;
  out.reserve(static_cast<size_t>(total + head_copies));
  prepare_capacity(out, static_cast<size_t>(total), threads);
  out.resize(static_cast<size_t>(total));
  parallel_for(parts.size(), threads, [&](size_t p) {
    PartLanes& x = pl[p];
    for (const TraceRange& r : parts[p]) {
      const int32_t l = rank_of_source[static_cast<size_t>(r.lane)];
      TraceRange& o = out[static_cast<size_t>(x.at[static_cast<size_t>(l - x.lo)]++)];
      o = r;
      o.lane = l;
    }
    std::vector<TraceRange>().swap(parts[p]);  // peak: the output + the parts not yet copied
  });
  m.ranges.rows() = std::move(out);
  // Largest lanes first, so one big lane does not start last.
  std::vector<size_t> by_size(so.order.size());
  for (size_t l = 0; l < by_size.size(); ++l) by_size[l] = l;
  std::sort(by_size.begin(), by_size.end(), [&](size_t x, size_t y) { return sl.count[x] > sl.count[y]; });
  parallel_for(by_size.size(), threads, [&](size_t k) {
    const size_t l = by_size[k];
    sort_by_start(m.ranges.rows(), static_cast<size_t>(sl.begin[l]), static_cast<size_t>(sl.begin[l] + sl.count[l]));
  });
  return sl;
}

// Sub-lanes of every source (in parallel), then lane ids in source order, then each final
// lane's ids, parents and depths (in parallel).
void make_source_lanes(Builder& b, const SourceOrder& so, const SourceSlices& sl, int work_threads) {
  TraceModel& m = b.m;
  const std::vector<int32_t>& order = so.order;
  std::vector<std::vector<int64_t>> counts(order.size());
  parallel_for(order.size(), work_threads, [&](size_t l) {
    const size_t i = static_cast<size_t>(sl.begin[l]);
    counts[l] = split_into_sublanes(m.ranges.rows(), i, i + static_cast<size_t>(sl.count[l]));
  });
  std::vector<Lane> lanes;
  std::vector<int32_t> first_lane(order.size());
  for (size_t si = 0; si < order.size(); ++si) {
    const SourceLane& src = b.sources[order[si]];
    first_lane[si] = static_cast<int32_t>(lanes.size());
    int64_t k = sl.begin[si];
    for (size_t s = 0; s < counts[si].size(); ++s) {
      Lane l;
      l.rank = src.rank;
      l.kind = src.kind;
      l.name = s == 0 ? src.name : src.name + " #" + std::to_string(s + 1);
      l.tid_or_stream = src.id;
      l.first = k;
      l.count = counts[si][s];
      k += l.count;
      lanes.push_back(std::move(l));
    }
  }
  parallel_for(order.size(), work_threads, [&](size_t si) {
    for (size_t s = 0; s < counts[si].size(); ++s) {
      const int32_t lane_id = first_lane[si] + static_cast<int32_t>(s);
      const Lane& l = lanes[static_cast<size_t>(lane_id)];
      const size_t f = static_cast<size_t>(l.first), e = f + static_cast<size_t>(l.count);
      for (size_t k = f; k < e; ++k) m.ranges.rows()[k].lane = lane_id;
      link_lane(m.ranges.rows(), f, e);
    }
  });
  m.lanes = std::move(lanes);
}
}  // namespace

// Splits sources into final lanes (rank-grouped) and orders ranges by lane.
void build_lanes(Builder& b, int threads, bool room_for_head_lanes) {
  const SourceOrder so = order_sources(b);
  const SourceSlices sl =
      threads < 0 ? gather_sources_by_sorting(b, so) : gather_sources_in_parallel(b, so, threads, room_for_head_lanes);
  make_source_lanes(b, so, sl, threads < 0 ? 1 : threads);
}

namespace {
// One rank's head-range copies of one head range.
struct HeadGroup {
  int32_t head_begin, head_end;
  std::vector<int64_t> originals;  // indices before the move, in lane order
  std::vector<int64_t> sublanes;   // ranges per sub-lane
};
// One rank's lanes [li, lend), holding ranges [rb, re).
struct RankBlock {
  int32_t rank = 0;
  size_t li = 0, lend = 0;
  int64_t rb = 0, re = 0;
  std::vector<HeadGroup> groups;
  int64_t copies = 0, shift = 0;  // ranges before it move up by `shift`
  int32_t lane_shift = 0;         // head lanes of the ranks before it
  int32_t first_head_lane = 0;    // lane id of its first head lane
};

// The ranks' blocks; false when the lanes are not grouped by rank with their ranges in lane
// order (build_lanes), which the in-place way needs.
bool rank_blocks(TraceModel& m, std::vector<RankBlock>& blocks) {
  int64_t next = 0;
  for (size_t li = 0; li < m.lanes.size();) {
    RankBlock bl;
    bl.rank = m.lanes[li].rank;
    bl.li = li;
    bl.rb = next;
    while (li < m.lanes.size() && m.lanes[li].rank == bl.rank) {
      if (m.lanes[li].first != next || m.lanes[li].count < 0) return false;
      next += m.lanes[li].count;
      ++li;
    }
    bl.lend = li;
    bl.re = next;
    blocks.push_back(std::move(bl));
  }
  return next == static_cast<int64_t>(m.ranges.rows().size());
}

// Which ranges each rank copies, per head range (ascending, as the legacy map), and how far
// each block moves up; returns all the copies.
int64_t collect_head_copies(TraceModel& m, std::vector<RankBlock>& blocks, int threads) {
  parallel_for(blocks.size(), threads, [&](size_t k) {
    RankBlock& bl = blocks[k];
    std::map<std::pair<int32_t, int32_t>, std::vector<int64_t>> heads;
    for (int64_t i = bl.rb; i < bl.re; ++i) {
      const TraceRange& r = m.ranges.rows()[static_cast<size_t>(i)];
      if (copied_to_head_lane(r)) heads[{r.head_begin, r.head_end}].push_back(i);
    }
    for (auto& [hr, v] : heads) {
      bl.copies += static_cast<int64_t>(v.size());
      bl.groups.push_back(HeadGroup{hr.first, hr.second, std::move(v), {}});
    }
  });
  int64_t copies = 0;
  for (RankBlock& bl : blocks) {
    bl.shift = copies;
    copies += bl.copies;
  }
  return copies;
}

// Grows the ranges by the copies and moves each rank's block up by its shift.
void move_blocks_up(TraceModel& m, const std::vector<RankBlock>& blocks, int64_t copies, int threads) {
  const size_t n = m.ranges.rows().size(), end = n + static_cast<size_t>(copies);
  m.ranges.rows().reserve(end);  // exact (build_lanes usually left the room)
  prepare_capacity(m.ranges.rows(), end - n, threads);
  m.ranges.rows().resize(end);
  for (size_t k = blocks.size(); k-- > 0;) {
    const RankBlock& bl = blocks[k];
    if (bl.shift == 0 || bl.rb == bl.re) continue;
    // From the end, `shift` ranges at a time: each wave's ranges go to places the waves before
    // it have emptied (or past the block), so a wave's pieces do not overlap and are copied in
    // parallel.
    const auto b = m.ranges.rows().begin();
    for (int64_t hi = bl.re; hi > bl.rb;) {
      const int64_t lo = std::max(bl.rb, hi - bl.shift);
      constexpr int64_t kPiece = 1 << 12;  // 384 KB
      parallel_for(static_cast<size_t>((hi - lo + kPiece - 1) / kPiece), threads, [&](size_t p) {
        const int64_t f = lo + static_cast<int64_t>(p) * kPiece, e = std::min(hi, f + kPiece);
        std::copy(b + f, b + e, b + f + bl.shift);
      });
      hi = lo;
    }
  }
}

// Each rank writes its copies after its own ranges, grouped by head range, sorted and split
// into nesting sub-lanes.
void write_head_copies(TraceModel& m, std::vector<RankBlock>& blocks, int threads) {
  parallel_for(blocks.size(), threads, [&](size_t k) {
    RankBlock& bl = blocks[k];
    size_t pos = static_cast<size_t>(bl.re + bl.shift);
    for (HeadGroup& g : bl.groups) {
      const size_t first = pos;
      for (int64_t i : g.originals) {
        TraceRange& r = m.ranges.rows()[pos++];
        r = m.ranges.rows()[static_cast<size_t>(i + bl.shift)];
        r.origin = static_cast<int32_t>(i + bl.shift);  // the copy points at its original
      }
      std::vector<int64_t>().swap(g.originals);
      sort_by_start(m.ranges.rows(), first, pos);
      g.sublanes = split_into_sublanes(m.ranges.rows(), first, pos);
    }
  });
}

// Lanes: each rank's own (moved up), then its head lanes.
std::vector<Lane> lanes_with_head_lanes(TraceModel& m, std::vector<RankBlock>& blocks) {
  std::vector<Lane> lanes;
  int32_t head_lanes = 0;
  for (RankBlock& bl : blocks) {
    bl.lane_shift = head_lanes;
    for (size_t l = bl.li; l < bl.lend; ++l) {
      lanes.push_back(std::move(m.lanes[l]));
      lanes.back().first += bl.shift;
    }
    bl.first_head_lane = static_cast<int32_t>(lanes.size());
    int64_t first = bl.re + bl.shift;
    for (const HeadGroup& g : bl.groups) {
      for (size_t s = 0; s < g.sublanes.size(); ++s) {
        Lane l;
        l.rank = bl.rank;
        l.kind = LaneKind::HeadRange;
        l.head_begin = g.head_begin;
        l.head_end = g.head_end;
        l.name = head_lane_name(g.head_begin, g.head_end, s);
        l.first = first;
        l.count = g.sublanes[s];
        first += l.count;
        lanes.push_back(std::move(l));
        ++head_lanes;
      }
    }
  }
  return lanes;
}

// Lane ids and parents of the moved ranges; lane ids, parents and depths of the copies.
void relink_rank_blocks(TraceModel& m, const std::vector<RankBlock>& blocks, const std::vector<Lane>& lanes,
                        int threads) {
  parallel_for(blocks.size(), threads, [&](size_t k) {
    const RankBlock& bl = blocks[k];
    for (int64_t i = bl.rb + bl.shift; i < bl.re + bl.shift; ++i) {
      TraceRange& r = m.ranges.rows()[static_cast<size_t>(i)];
      r.lane += bl.lane_shift;
      if (r.parent >= 0) r.parent = static_cast<int32_t>(r.parent + bl.shift);
    }
    int32_t lane_id = bl.first_head_lane;
    for (const HeadGroup& g : bl.groups) {
      for (int64_t count : g.sublanes) {
        const Lane& l = lanes[static_cast<size_t>(lane_id)];
        for (int64_t i = l.first; i < l.first + count; ++i) m.ranges.rows()[static_cast<size_t>(i)].lane = lane_id;
        link_lane(m.ranges.rows(), static_cast<size_t>(l.first), static_cast<size_t>(l.first + count));
        ++lane_id;
      }
    }
  });
}
}  // namespace

// Appends per-rank HeadRange lanes (copies), keeping lanes grouped by rank.
//
// In place: each rank's block of ranges moves up (once, as one block) by the number of head
// copies of the ranks before it, and its copies are written into the room left after it; ranks
// are worked on in parallel. The same model as the legacy way (add_head_lanes_by_copying),
// which copies every range into a new vector and keeps a map of copies per head range.
void add_head_lanes(TraceModel& m, bool exact_reserve, int threads) {
  if (!exact_reserve) {
    add_head_lanes_by_copying(m, false);
    return;
  }
  // Lanes not grouped by rank with their ranges in lane order: the legacy way, which assumes less.
  std::vector<RankBlock> blocks;
  if (!rank_blocks(m, blocks)) {
    add_head_lanes_by_copying(m, true);
    return;
  }
  const int64_t copies = collect_head_copies(m, blocks, threads);
  if (copies == 0) return;
  move_blocks_up(m, blocks, copies, threads);
  write_head_copies(m, blocks, threads);
  std::vector<Lane> lanes = lanes_with_head_lanes(m, blocks);
  relink_rank_blocks(m, blocks, lanes, threads);
  m.lanes = std::move(lanes);
}

// Kernel -> the host range that launched it (TraceRange::origin), once indices are final: the
// traced range carrying the kernel's external id; for an all-to-all issue (its id has no range
// of its own) the range of the same rank, step, phase, direction, layer, heads and chunk.
void link_kernels_to_launchers(TraceModel& m, int threads) {
  bool any = false;
  for (const auto& l : m.lanes) {  // head-range lanes hold copies of host ranges, never kernels
    if (l.kind == LaneKind::HeadRange) continue;
    for (int64_t k = l.first; k < l.first + l.count && !any; ++k) {
      const TraceRange& r = m.ranges.rows()[static_cast<size_t>(k)];
      any = r.is_kernel && m.extra(r).external_id != 0;
    }
    if (any) break;
  }
  if (!any) return;
  // Every key holds the rank, so each rank is linked apart (ranks in parallel): its host
  // ranges in lane order as sorted tables (the first range of a key wins), then a binary
  // search per kernel. Was a tree of all ranks' host ranges: 10 s for 10 M ranges.
  using Info = std::array<int32_t, 7>;  // step, phase, dir, layer, heads, chunk
  auto info_of = [](const TraceRange& r) -> Info {
    return {r.step, static_cast<int32_t>(r.phase), static_cast<int32_t>(r.dir), r.layer, r.head_begin, r.head_end,
            r.chunk};
  };
  std::vector<std::pair<size_t, size_t>> rank_lanes;  // [first lane, end lane) of each rank
  for (size_t l = 0; l < m.lanes.size();) {
    size_t e = l;
    while (e < m.lanes.size() && m.lanes[e].rank == m.lanes[l].rank) ++e;
    rank_lanes.emplace_back(l, e);
    l = e;
  }
  // Lanes are grouped by rank (build_lanes) and hold ranges of their rank (the readers); were
  // either not so, ranks would link apart and miss each other's launchers: then one group.
  std::vector<int32_t> seen;
  for (const auto& [b, e] : rank_lanes) seen.push_back(m.lanes[b].rank);
  std::sort(seen.begin(), seen.end());
  std::atomic<bool> mixed{std::adjacent_find(seen.begin(), seen.end()) != seen.end()};
  parallel_for(m.lanes.size(), threads, [&](size_t l) {
    const Lane& lane = m.lanes[l];
    if (lane.kind == LaneKind::HeadRange || mixed) return;
    for (int64_t k = lane.first; k < lane.first + lane.count; ++k)
      if (m.ranges.rows()[static_cast<size_t>(k)].rank != lane.rank) {
        mixed = true;
        return;
      }
  });
  if (mixed) rank_lanes.assign(1, {0, m.lanes.size()});
  parallel_for(rank_lanes.size(), threads, [&](size_t g) {
    const auto [lb, le] = rank_lanes[g];
    std::vector<std::tuple<int32_t, int64_t, int32_t>> by_id;  // rank, external id, range
    std::vector<std::tuple<int32_t, Info, int32_t>> by_info;   // rank, info, range
    for (size_t l = lb; l < le; ++l) {
      const Lane& lane = m.lanes[l];
      if (lane.kind == LaneKind::HeadRange || lane.kind == LaneKind::CudaStream) continue;
      for (int64_t k = lane.first; k < lane.first + lane.count; ++k) {
        const TraceRange& r = m.ranges.rows()[static_cast<size_t>(k)];
        const int64_t ext = m.extra(r).external_id;
        if (ext != 0)
          by_id.emplace_back(r.rank, ext, static_cast<int32_t>(k));
        else
          by_info.emplace_back(r.rank, info_of(r), static_cast<int32_t>(k));
      }
    }
    // Stable: among equal keys the first in lane order stays first, and is the one found.
    auto key_less = [](const auto& x, const auto& y) {
      return std::tie(std::get<0>(x), std::get<1>(x)) < std::tie(std::get<0>(y), std::get<1>(y));
    };
    std::stable_sort(by_id.begin(), by_id.end(), key_less);
    std::stable_sort(by_info.begin(), by_info.end(), key_less);
    for (size_t l = lb; l < le; ++l) {
      const Lane& lane = m.lanes[l];
      if (lane.kind == LaneKind::HeadRange) continue;
      for (int64_t k = lane.first; k < lane.first + lane.count; ++k) {
        TraceRange& r = m.ranges.rows()[static_cast<size_t>(k)];
        const int64_t ext = m.extra(r).external_id;
        if (!r.is_kernel || ext == 0) continue;
        const std::tuple<int32_t, int64_t, int32_t> id{r.rank, ext, 0};
        auto it = std::lower_bound(by_id.begin(), by_id.end(), id, key_less);
        if (it != by_id.end() && !key_less(id, *it)) {
          r.origin = std::get<2>(*it);
          continue;
        }
        const std::tuple<int32_t, Info, int32_t> info{r.rank, info_of(r), 0};
        auto jt = std::lower_bound(by_info.begin(), by_info.end(), info, key_less);
        if (jt != by_info.end() && !key_less(info, *jt)) r.origin = std::get<2>(*jt);
      }
    }
  });
}

// Kernels no launching range claims (no external id, or one no range carries: launched on a
// thread that pushed nothing, e.g. autograd's backward thread) -> the innermost range of their
// rank's stepping thread ("main") open at their launch (the API record of the same correlation
// id; the kernel's own start when there is none), which then gives them its step, phase,
// direction, layer, heads and chunk; listed in TraceModel::time_attributed. Ulysses traces only.
void attribute_kernels_by_time(TraceModel& m) {
  m.time_attributed.clear();
  if (m.format != "ulysses") return;
  std::map<std::pair<int32_t, int64_t>, int64_t> launch_of;  // (rank, correlation) -> launch time
  for (const RuntimeCall& c : m.runtime) launch_of.emplace(std::make_pair(c.rank, c.correlation), c.start_ns);
  std::map<int32_t, std::vector<size_t>> main_lanes;  // rank -> lanes of its stepping thread
  std::map<int32_t, int64_t> main_tid;
  for (const Lane& l : m.lanes)
    if (l.kind == LaneKind::HostThread && l.name == "main") main_tid.emplace(l.rank, l.tid_or_stream);
  for (size_t i = 0; i < m.lanes.size(); ++i) {
    const Lane& l = m.lanes[i];
    auto t = main_tid.find(l.rank);
    if (l.kind == LaneKind::HostThread && t != main_tid.end() && t->second == l.tid_or_stream)
      main_lanes[l.rank].push_back(i);
  }
  if (main_lanes.empty()) return;
  auto& rows = m.ranges.rows();
  // Innermost range of lane `li` holding time t (-1: none): the last range starting at or before
  // t, then up its parents to the first that has not ended.
  auto enclosing = [&](size_t li, int64_t t) -> int64_t {
    const Lane& l = m.lanes[li];
    const auto b = rows.begin() + l.first, e = b + l.count;
    auto it = std::upper_bound(b, e, t, [](int64_t v, const TraceRange& r) { return v < r.start_ns; });
    if (it == b) return -1;
    int64_t k = (it - rows.begin()) - 1;
    while (k >= 0 && rows[static_cast<size_t>(k)].end_ns < t) k = rows[static_cast<size_t>(k)].parent;
    return k;
  };
  for (const Lane& kl : m.lanes) {
    if (kl.kind != LaneKind::CudaStream) continue;
    auto ml = main_lanes.find(kl.rank);
    if (ml == main_lanes.end()) continue;
    for (int64_t k = kl.first; k < kl.first + kl.count; ++k) {
      TraceRange& r = rows[static_cast<size_t>(k)];
      // (A kernel whose external id names its launcher keeps what that launcher row says.)
      if (!r.is_kernel || r.origin >= 0 || m.extra(r).external_id != 0) continue;
      int64_t t = r.start_ns;
      auto li = launch_of.find({r.rank, static_cast<int64_t>(m.extra(r).correlation)});
      if (m.extra(r).correlation != 0 && li != launch_of.end()) t = li->second;
      int64_t best = -1;
      for (size_t lane : ml->second) {
        const int64_t c = enclosing(lane, t);
        if (c >= 0 &&
            (best < 0 || rows[static_cast<size_t>(c)].duration() < rows[static_cast<size_t>(best)].duration()))
          best = c;
      }
      if (best < 0) continue;
      const TraceRange& h = rows[static_cast<size_t>(best)];
      r.origin = static_cast<int32_t>(best);
      r.step = h.step;
      r.phase = h.phase;
      r.dir = h.dir;
      r.layer = h.layer;
      r.head_begin = h.head_begin;
      r.head_end = h.head_end;
      r.chunk = h.chunk;
      m.time_attributed.push_back(static_cast<int32_t>(k));
    }
  }
  std::sort(m.time_attributed.begin(), m.time_attributed.end());
}

}  // namespace ulysses::prof::detail
