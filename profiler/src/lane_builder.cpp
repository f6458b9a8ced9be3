// Lane building for the trace loader: turns the raw ranges of each source (thread, comm
// row, CUDA stream) into final lanes whose ranges nest properly (overlapping async ranges are
// spread over extra sub-lanes), sets parents and depths, adds per-head-range display lanes
// and links kernels to the host range that launched them. Pure functions of the model.
#include <algorithm>
#include <map>
#include <tuple>

#include "trace_loading.hpp"

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

bool by_start(const TraceRange& a, const TraceRange& b) {
  return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

// Sorts v[b, e) by_start, ties in their current order. Sorts 24-byte keys and then moves each
// 96-byte range once, instead of swapping ranges throughout the sort; already sorted input
// (a lane whose ranges were written in start order) costs one pass.
void sort_by_start(std::vector<TraceRange>& v, size_t b, size_t e) {
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(b), last = v.begin() + static_cast<std::ptrdiff_t>(e);
  if (std::is_sorted(first, last, by_start)) return;
  struct Key {
    int64_t start, end;
    size_t at;
  };
  std::vector<Key> keys(e - b);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = {v[b + k].start_ns, v[b + k].end_ns, k};
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

}  // namespace

// Splits sources into final lanes (rank-grouped) and orders ranges by lane.
void build_lanes(Builder& b, int threads) {
  TraceModel& m = b.m;
  // Order sources: rank, order, id.
  std::vector<int32_t> order(b.sources.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    const auto &a = b.sources[x], &c = b.sources[y];
    return std::tie(a.rank, a.order, a.id) < std::tie(c.rank, c.order, c.id);
  });
  std::vector<int32_t> rank_of_source(b.sources.size());
  for (size_t i = 0; i < order.size(); ++i) rank_of_source[order[i]] = static_cast<int32_t>(i);
  if (threads < 0) {  // legacy: one sort of the whole vector (moves 96-byte ranges n log n times)
    for (auto& v : b.pending_ranges) m.ranges.insert(m.ranges.end(), v.begin(), v.end());
    b.pending_ranges.clear();
    for (auto& r : m.ranges) r.lane = rank_of_source[r.lane];
    std::sort(m.ranges.begin(), m.ranges.end(), [](const TraceRange& x, const TraceRange& y) {
      return x.lane != y.lane ? x.lane < y.lane : by_start(x, y);
    });
  } else {
    // One counting pass puts every range in its lane's slice (each range copied once), then
    // the slices are sorted by start independently, in parallel.
    // Input: m.ranges, then the parallel reader's per-file vectors (freed one by one).
    std::vector<std::vector<TraceRange>> parts;
    parts.reserve(b.pending_ranges.size() + 1);
    parts.push_back(std::move(m.ranges));
    for (auto& v : b.pending_ranges) parts.push_back(std::move(v));
    b.pending_ranges.clear();
    std::vector<int64_t> begin(order.size() + 1, 0);
    size_t total = 0;
    for (const auto& v : parts) {
      total += v.size();
      for (const auto& r : v) ++begin[static_cast<size_t>(rank_of_source[r.lane]) + 1];
    }
    for (size_t l = 0; l < order.size(); ++l) begin[l + 1] += begin[l];
    {
      std::vector<int64_t> pos(begin.begin(), begin.end() - 1);
      std::vector<TraceRange> out(total);
      for (auto& v : parts) {
        for (const auto& r : v) {
          const int32_t l = rank_of_source[r.lane];
          TraceRange& o = out[static_cast<size_t>(pos[static_cast<size_t>(l)]++)];
          o = r;
          o.lane = l;
        }
        std::vector<TraceRange>().swap(v);  // peak: the output + the files not yet moved
      }
      m.ranges = std::move(out);
    }
    // Largest lanes first, so one big lane does not start last.
    std::vector<size_t> by_size(order.size());
    for (size_t l = 0; l < by_size.size(); ++l) by_size[l] = l;
    std::sort(by_size.begin(), by_size.end(),
              [&](size_t x, size_t y) { return begin[x + 1] - begin[x] > begin[y + 1] - begin[y]; });
    parallel_for(by_size.size(), threads, [&](size_t k) {
      const size_t l = by_size[k];
      sort_by_start(m.ranges, begin[l], begin[l + 1]);
    });
  }

  std::vector<Lane> lanes;
  std::vector<uint16_t> sub;
  size_t i = 0;
  for (size_t si = 0; si < order.size(); ++si) {
    const SourceLane& src = b.sources[order[si]];
    size_t e = i;
    while (e < m.ranges.size() && m.ranges[e].lane == static_cast<int32_t>(si)) ++e;
    sub.assign(e - i, 0);
    int n = assign_sublanes(m.ranges, i, e, sub);
    if (n > 1) {
      // Stable reorder of this segment by sub-lane keeps by_start order inside each.
      std::vector<size_t> idx(e - i);
      for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
      std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return sub[x] < sub[y]; });
      std::vector<TraceRange> seg(e - i);
      for (size_t k = 0; k < idx.size(); ++k) seg[k] = m.ranges[i + idx[k]];
      std::vector<uint16_t> sub2(e - i);
      for (size_t k = 0; k < idx.size(); ++k) sub2[k] = sub[idx[k]];
      std::copy(seg.begin(), seg.end(), m.ranges.begin() + static_cast<std::ptrdiff_t>(i));
      sub.swap(sub2);
    }
    size_t k = i;
    for (int s = 0; s < n; ++s) {
      Lane l;
      l.rank = src.rank;
      l.kind = src.kind;
      l.name = s == 0 ? src.name : src.name + " #" + std::to_string(s + 1);
      l.tid_or_stream = src.id;
      l.first = static_cast<int64_t>(k);
      int32_t lane_id = static_cast<int32_t>(lanes.size());
      while (k < e && sub[k - i] == s) m.ranges[k++].lane = lane_id;
      l.count = static_cast<int64_t>(k) - l.first;
      link_lane(m.ranges, static_cast<size_t>(l.first), k);
      lanes.push_back(std::move(l));
    }
    i = e;
  }
  m.lanes = std::move(lanes);
}

// Appends per-rank HeadRange lanes (copies), keeping lanes grouped by rank.
void add_head_lanes(TraceModel& m, bool exact_reserve) {
  size_t copies = 0;
  for (const auto& r : m.ranges) {
    if (r.head_begin >= 0 && !r.is_kernel) {
      ++copies;
      if (!exact_reserve) break;
    }
  }
  if (copies == 0) return;
  std::vector<TraceRange> out;
  std::vector<Lane> lanes;
  // Exact: growing past a reserve of the originals alone doubles the vector (up to ~2x slack).
  out.reserve(m.ranges.size() + (exact_reserve ? copies : 0));
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
        TraceRange r = m.ranges[static_cast<size_t>(lane.first + k)];
        r.lane = static_cast<int32_t>(lanes.size());
        if (r.parent >= 0) r.parent = static_cast<int32_t>(r.parent - lane.first + first);
        out.push_back(r);
        if (r.head_begin >= 0 && !r.is_kernel) {
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
        l.name = "heads " + std::to_string(hr.first) + "-" + std::to_string(hr.second - 1) +
                 (s ? " #" + std::to_string(s + 1) : "");
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
  m.ranges = std::move(out);
  m.lanes = std::move(lanes);
}

// Kernel -> the host range that launched it (TraceRange::origin), once indices are final: the
// traced range carrying the kernel's external id; for an all-to-all issue (its id has no range
// of its own) the range of the same rank, step, phase, direction, layer, heads and chunk.
void link_kernels_to_launchers(TraceModel& m) {
  bool any = false;
  for (const auto& r : m.ranges) any |= r.is_kernel && r.external_id != 0;
  if (!any) return;
  std::map<std::pair<int32_t, int64_t>, int32_t> by_id;
  std::map<std::tuple<int32_t, int32_t, int, int, int32_t, int32_t, int32_t, int32_t>, int32_t> by_info;
  auto info_key = [](const TraceRange& r) {
    return std::make_tuple(r.rank, r.step, static_cast<int>(r.phase), static_cast<int>(r.dir), r.layer, r.head_begin,
                           r.head_end, r.chunk);
  };
  for (const auto& l : m.lanes) {
    if (l.kind == LaneKind::HeadRange || l.kind == LaneKind::CudaStream) continue;
    for (int64_t k = l.first; k < l.first + l.count; ++k) {
      const TraceRange& r = m.ranges[static_cast<size_t>(k)];
      if (r.external_id != 0)
        by_id.emplace(std::make_pair(r.rank, r.external_id), static_cast<int32_t>(k));
      else
        by_info.emplace(info_key(r), static_cast<int32_t>(k));
    }
  }
  for (auto& r : m.ranges) {
    if (!r.is_kernel || r.external_id == 0) continue;
    auto it = by_id.find({r.rank, r.external_id});
    if (it != by_id.end()) {
      r.origin = it->second;
      continue;
    }
    auto jt = by_info.find(info_key(r));
    if (jt != by_info.end()) r.origin = jt->second;
  }
}

}  // namespace ulysses::prof::detail
