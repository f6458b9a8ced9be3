// Trace overview (trace_overview.hpp): the level-of-detail reduction of a model's lanes, its
// encoding, and its cache file beside the trace (framing and key shared with the summary
// cache through cache_io.hpp).
#include "ulysses/profiler/trace_overview.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "ulysses/profiler/cache_io.hpp"
#include "cache_key.hpp"
#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/trace_open.hpp"

namespace ulysses::prof {

namespace fs = std::filesystem;

namespace {

constexpr char kOverviewMagic[8] = {'U', 'L', 'Y', 'S', 'O', 'V', 'R', 'V'};

// A range of the overview (model v): a copy of a full-model range (of m) without its links to
// other ranges and GPU ids; its bytes and collective identity get a record in v's extras.
TraceRange overview_copy(const TraceModel& m, const TraceRange& r, int32_t depth, TraceModel* v) {
  TraceRange o = r;
  o.depth = static_cast<uint8_t>(std::min(depth, 255));
  o.parent = -1;
  o.origin = -1;
  o.extra = -1;
  RangeExtra x = m.extra(r);
  x.correlation = 0;
  x.external_id = 0;
  if (!x.empty()) v->extra_for(o) = x;
  return o;
}

// One lane's ranges [first, first + count) of `m` reduced into out/counts (appended, sorted by
// start, then outer before inner).
void reduce_lane(const TraceModel& m, const Lane& lane, int64_t q, TraceModel* v, std::vector<int64_t>* counts) {
  std::vector<TraceRange>* out = &v->ranges.rows();
  struct Open {
    int64_t end;
    int64_t id;   // full-model index (identity of the enclosing range for its children)
    int32_t run;  // merged run this range belongs to (itself or through an ancestor); -1 none
  };
  struct Run {
    int32_t depth;
    int64_t head;                 // index (in lane_out) of the run's own range
    std::vector<int64_t> levels;  // index of the merged descendants at depth + 1 + k
  };
  std::vector<TraceRange> lane_out;
  std::vector<int64_t> lane_counts;
  std::vector<Open> stack;
  std::vector<Run> runs;
  // Per depth: the run open there (-1 none) and the enclosing range it was opened under.
  std::vector<int32_t> open_run;
  std::vector<int64_t> open_parent;
  auto add = [&](const TraceRange& r, int32_t depth) {
    lane_out.push_back(overview_copy(m, r, depth, v));
    lane_counts.push_back(1);
    return static_cast<int64_t>(lane_out.size()) - 1;
  };
  auto extend = [&](int64_t k, const TraceRange& r) {
    lane_out[static_cast<size_t>(k)].end_ns = std::max(lane_out[static_cast<size_t>(k)].end_ns, r.end_ns);
    ++lane_counts[static_cast<size_t>(k)];
  };
  for (int64_t i = lane.first; i < lane.first + lane.count; ++i) {
    const TraceRange& r = m.ranges[static_cast<size_t>(i)];
    while (!stack.empty() && stack.back().end <= r.start_ns) stack.pop_back();
    const auto depth = static_cast<int32_t>(stack.size());
    const int64_t parent = stack.empty() ? -1 : stack.back().id;
    const int32_t inherited = stack.empty() ? -1 : stack.back().run;
    if (open_run.size() <= static_cast<size_t>(depth)) {
      open_run.resize(static_cast<size_t>(depth) + 1, -1);
      open_parent.resize(static_cast<size_t>(depth) + 1, -2);
    }
    int32_t run = -1;
    if (inherited >= 0) {  // inside a merged run: joins the run's range at this depth
      Run& rn = runs[static_cast<size_t>(inherited)];
      const auto level = static_cast<size_t>(depth - rn.depth - 1);
      if (rn.levels.size() <= level) rn.levels.resize(level + 1, -1);
      if (rn.levels[level] < 0) {
        rn.levels[level] = add(r, depth);
      } else {
        extend(rn.levels[level], r);
      }
      run = inherited;
    } else if (r.end_ns - r.start_ns < q) {
      const int32_t cur = open_run[static_cast<size_t>(depth)];
      if (cur >= 0 && open_parent[static_cast<size_t>(depth)] == parent &&
          r.start_ns - lane_out[static_cast<size_t>(runs[static_cast<size_t>(cur)].head)].end_ns < q) {
        extend(runs[static_cast<size_t>(cur)].head, r);
        run = cur;
      } else {
        runs.push_back(Run{depth, add(r, depth), {}});
        run = static_cast<int32_t>(runs.size()) - 1;
        open_run[static_cast<size_t>(depth)] = run;
        open_parent[static_cast<size_t>(depth)] = parent;
      }
    } else {
      add(r, depth);
      open_run[static_cast<size_t>(depth)] = -1;  // a wide sibling ends the run at its depth
    }
    stack.push_back(Open{r.end_ns, i, run});
  }
  // Merged descendants were appended when first seen; order the lane by (start, depth).
  std::vector<size_t> order(lane_out.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TraceRange &x = lane_out[a], &y = lane_out[b];
    return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.depth < y.depth;
  });
  for (size_t k : order) {
    out->push_back(lane_out[k]);
    counts->push_back(lane_counts[k]);
  }
}

}  // namespace

TraceOverview build_overview(const TraceModel& m, int32_t resolution) {
  TraceOverview o;
  TraceModel& v = o.model;
  v.source = m.source;
  v.from_nsys = m.from_nsys;
  v.format = m.format;
  v.sp_size = m.sp_size, v.dp_size = m.dp_size, v.num_heads = m.num_heads, v.num_layers = m.num_layers;
  v.strings = m.strings;
  v.ranks = m.ranks;
  v.steps = m.steps;
  v.clocks = m.clocks;
  v.t_min = m.t_min, v.t_max = m.t_max;
  o.full_ranges = static_cast<int64_t>(m.ranges.size());
  o.quantum_ns = std::max<int64_t>(1, (m.t_max - m.t_min) / std::max(1, resolution));
  v.lanes.reserve(m.lanes.size());
  for (const Lane& l : m.lanes) {
    Lane nl = l;
    nl.first = static_cast<int64_t>(v.ranges.size());
    reduce_lane(m, l, o.quantum_ns, &v, &o.counts);
    nl.count = static_cast<int64_t>(v.ranges.size()) - nl.first;
    v.lanes.push_back(std::move(nl));
  }
  return o;
}

std::string encode_overview(const TraceOverview& ov) {
  using cache_io::put_vec;
  cache_io::Out o;
  const TraceModel& m = ov.model;
  o.u(m.from_nsys);
  o.s(m.format);
  o.i(m.sp_size), o.i(m.dp_size), o.i(m.num_heads), o.i(m.num_layers);
  put_vec(o, m.strings, [&](const std::string& x) { o.s(x); });
  put_vec(o, m.ranks, [&](const RankInfo& r) { cache_io::put_rank(o, r); });
  put_vec(o, m.steps, [&](const StepInfo& x) { cache_io::put_step(o, x); });
  put_vec(o, m.clocks, [&](const ClockInfo& c) { cache_io::put_clock(o, c); });
  o.i(m.t_min), o.i(m.t_max);
  o.i(ov.quantum_ns), o.i(ov.full_ranges);
  // Lanes with their ranges (times as deltas from the previous start of the lane).
  o.u(m.lanes.size());
  for (const Lane& l : m.lanes) {
    o.i(l.rank), o.e(static_cast<uint8_t>(l.kind)), o.s(l.name), o.i(l.head_begin), o.i(l.head_end);
    o.i(l.tid_or_stream), o.u(static_cast<uint64_t>(l.count));
    int64_t prev = m.t_min;
    for (int64_t k = l.first; k < l.first + l.count; ++k) {
      const TraceRange& r = m.ranges[static_cast<size_t>(k)];
      o.i(r.start_ns - prev), o.i(r.end_ns - r.start_ns);
      prev = r.start_ns;
      const RangeExtra& x = m.extra(r);
      o.i(r.name_id), o.i(r.step), o.i(r.layer), o.i(r.head_begin), o.i(r.head_end), o.i(r.chunk);
      o.i(x.bytes_sent), o.i(x.bytes_recv), o.e(static_cast<uint8_t>(r.phase)), o.e(static_cast<uint8_t>(r.dir));
      o.u(r.depth), o.u(r.is_kernel), o.i(x.pg), o.i(x.seq), o.i(ov.counts[static_cast<size_t>(k)]);
    }
  }
  return std::move(o.b);
}

TraceOverview decode_overview(const std::string& bytes) {
  using cache_io::get_vec;
  cache_io::In in(bytes.data(), bytes.size());
  TraceOverview ov;
  TraceModel& m = ov.model;
  m.from_nsys = in.flag();
  m.format = in.s();
  m.sp_size = in.i32(), m.dp_size = in.i32(), m.num_heads = in.i32(), m.num_layers = in.i32();
  get_vec(in, &m.strings, [&](std::string& x) { x = in.s(); });
  get_vec(in, &m.ranks, [&](RankInfo& r) { cache_io::get_rank(in, r); });
  get_vec(in, &m.steps, [&](StepInfo& x) { cache_io::get_step(in, x); });
  get_vec(in, &m.clocks, [&](ClockInfo& c) { cache_io::get_clock(in, c); });
  m.t_min = in.i(), m.t_max = in.i();
  ov.quantum_ns = in.i(), ov.full_ranges = in.i();
  // What the studio indexes and draws must hold whatever the file says (the checksum catches
  // torn files, not crafted ones): times ordered and without overflow, names in the table,
  // counts positive and adding up to full_ranges.
  int64_t span = 0;
  if (m.t_min > m.t_max || __builtin_sub_overflow(m.t_max, m.t_min, &span) || ov.quantum_ns < 1 || ov.full_ranges < 0)
    cache_io::In::fail();
  int64_t counted = 0;
  const size_t nlanes = in.count();
  const auto nstrings = static_cast<int64_t>(m.strings.size());
  auto phase_of = [&](uint64_t p) {
    if (p >= static_cast<uint64_t>(Phase::Count)) cache_io::In::fail();
    return static_cast<Phase>(p);
  };
  for (size_t li = 0; li < nlanes; ++li) {
    Lane l;
    l.rank = in.i32();
    const uint64_t kind = in.u();
    if (kind > static_cast<uint64_t>(LaneKind::CudaStream)) cache_io::In::fail();
    l.kind = static_cast<LaneKind>(kind);
    l.name = in.s(), l.head_begin = in.i32(), l.head_end = in.i32(), l.tid_or_stream = in.i();
    l.first = static_cast<int64_t>(m.ranges.size());
    l.count = static_cast<int64_t>(in.count());
    int64_t prev = m.t_min;
    for (int64_t k = 0; k < l.count; ++k) {
      TraceRange r;
      r.rank = l.rank;
      r.lane = static_cast<int32_t>(li);
      const int64_t delta = in.i(), dur = in.i();
      if (dur < 0 || __builtin_add_overflow(prev, delta, &r.start_ns) ||
          __builtin_add_overflow(r.start_ns, dur, &r.end_ns) || r.start_ns < m.t_min || r.end_ns > m.t_max)
        cache_io::In::fail();  // the model's time span holds every range
      prev = r.start_ns;
      r.name_id = in.i32();
      if (r.name_id < 0 || r.name_id >= nstrings) cache_io::In::fail();
      r.step = in.i32();
      const int64_t layer = in.i(), head_begin = in.i(), head_end = in.i(), chunk = in.i();
      if (detail::set_layer_heads_chunk(r, layer, head_begin, head_end, chunk) != 0) cache_io::In::fail();
      RangeExtra x;
      x.bytes_sent = in.i(), x.bytes_recv = in.i();
      r.phase = phase_of(in.u());
      const uint64_t dir = in.u();
      if (dir > static_cast<uint64_t>(Direction::Recompute)) cache_io::In::fail();
      r.dir = static_cast<Direction>(dir);
      r.depth = static_cast<uint8_t>(std::min<uint64_t>(in.u(), 255));
      r.is_kernel = in.flag();
      x.pg = in.i32(), x.seq = in.i32();
      if (!x.empty()) m.extra_for(r) = x;
      const int64_t count = in.i();
      if (count < 1 || count > ov.full_ranges - counted) cache_io::In::fail();
      counted += count;
      m.ranges.push_back(r);
      ov.counts.push_back(count);
    }
    m.lanes.push_back(std::move(l));
  }
  if (!in.done() || counted != ov.full_ranges) cache_io::In::fail();
  return ov;
}

std::string overview_cache_path(const std::string& trace_path) {
  const std::string s = summary_cache_path(trace_path);
  if (s.empty()) return "";
  const std::string suffix = ".ulysses-summary-cache";
  return s.substr(0, s.size() - suffix.size()) + ".ulysses-overview-cache";
}

OverviewCacheProbe probe_overview_cache(const std::string& trace_path, const LoadOptions& lo,
                                        const SummaryCacheOptions& co) {
  OverviewCacheProbe p;
  p.racy_window_ns = co.racy_window_ns;
  p.probed_at_ns = cache_io::now_realtime_ns();
  if (!co.enabled || summary_cache_disabled_by_env()) return p;
  try {
    p.files = trace_input_files(trace_path);
    p.path = overview_cache_path(trace_path);
    if (!p.path.empty()) p.key = cache_io::make_key(p.files, lo, AnalysisOptions{}, true, &p.newest_ns);
  } catch (...) {  // no cache for inputs that cannot be listed; load_trace reports them
    p = OverviewCacheProbe{};
  }
  return p;
}

std::optional<TraceOverview> read_overview_cache(const OverviewCacheProbe& p, const std::string& trace_path) {
  if (p.path.empty() || p.key.empty()) return std::nullopt;
  try {
    std::string payload;
    if (!cache_io::read_file(p.path, kOverviewMagic, kOverviewCacheFormat, p.key, &payload)) return std::nullopt;
    TraceOverview ov = decode_overview(payload);
    ov.model.source = trace_path;
    return ov;
  } catch (...) {  // a cache that cannot be read is no cache
    return std::nullopt;
  }
}

bool write_overview_cache(const OverviewCacheProbe& p, const std::string& trace_path, const LoadOptions& lo,
                          const TraceOverview& o) {
  // Not while the run is still being written, nor when an input changed since the probe.
  if (!p.writable()) return false;
  try {
    int64_t newest_now = -1;
    if (trace_input_files(trace_path) != p.files ||
        cache_io::make_key(p.files, lo, AnalysisOptions{}, true, &newest_now) != p.key)
      return false;
    return cache_io::write_file(p.path, kOverviewMagic, kOverviewCacheFormat, p.key, encode_overview(o));
  } catch (...) {
    return false;
  }
}

PreparedCaches prepare_trace_caches(const std::string& trace_path, int64_t racy_window_ns) {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedCaches out;
  TraceOpen open(trace_path, racy_window_ns);  // as the studio opens it
  out.overview_cached = open.overview().has_value();
  out.summary_cached = open.summary().has_value();
  const std::vector<std::string> rank_files = detail::rank_files_for_caches(trace_path);
  out.rank_files = static_cast<int>(rank_files.size());
  for (size_t k = 0; k < rank_files.size(); ++k)
    out.rank_files_cached +=
        detail::rank_file_cache_current(rank_files[k], static_cast<int32_t>(k), open.load_options());
  if (!out.summary_cached || !out.overview_cached || out.rank_files_cached < out.rank_files) {
    const TraceModel model = open.ranges().model;  // the overview or rank-file caches need the ranges
    out.summary_cached = open.summary_cached();
    out.loaded = true;
    out.ranges = count_ranges_and_kernels(model).first;  // as the summary and the studio count them
    open.write_overview(model, &out.overview_ranges);
    out.overview_cached = open.overview_cached();
    // Current now: the caches the load read and those it wrote (not read back from disk again).
    const LoadOptions::Stats& files = open.file_stats();
    out.rank_files_cached = out.rank_files > 0 ? files.from_file_cache + files.file_caches_written : 0;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ulysses::prof
