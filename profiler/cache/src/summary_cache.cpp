// Summary cache (summary_cache.hpp): a binary encoding of the shell model and the Summary, the
// key of a trace's input files and options, and load_summary, which answers from the cache
// file beside the trace when its key matches and otherwise loads, analyzes and rewrites it.
#include "ulysses/profiler/summary_cache.hpp"

#include "ulysses/profiler/cache_io.hpp"
#include "cache_key.hpp"
#include "cache_location.hpp"
#include "ulysses/profiler/trace_loading.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

namespace ulysses::prof {

namespace fs = std::filesystem;

// A struct that grows must grow its encoding too: these sizes (LP64, libstdc++) fail the
// build when a field is added, as a reminder to extend encode/decode and bump
// kSummaryCacheFormat.
#if defined(__LP64__) && defined(__GLIBCXX__)
static_assert(sizeof(RankInfo) == 88 && sizeof(StepInfo) == 88 && sizeof(MemoryPoint) == 56 &&
                  sizeof(ClockInfo) == 64 && sizeof(TraceModel) == 1016 && sizeof(MemoryCategorySample) == 96,
              "TraceModel changed: update summary_cache.cpp and bump kSummaryCacheFormat");
static_assert(sizeof(Headline) == 48 && sizeof(StepBreakdown) == 96 && sizeof(RankTotals) == 64 &&
                  sizeof(OverlapResult) == 40 && sizeof(LayerRow) == 72 && sizeof(HeadRangeRow) == 48 &&
                  sizeof(SkewRow) == 40 && sizeof(PhaseMemoryRow) == 72 && sizeof(NameRow) == 64 &&
                  sizeof(CollectiveArrival) == 24 && sizeof(CollectiveInstance) == 88 && sizeof(RankWaitRow) == 40 &&
                  sizeof(StepEndRow) == 24 && sizeof(WaitingAnalysis) == 96 && sizeof(Summary) == 488 &&
                  sizeof(RankMemoryRow) == 224 && sizeof(CommPhaseRow) == 48,
              "Summary changed: update summary_cache.cpp and bump kSummaryCacheFormat");
#endif

namespace {

using cache_io::get_vec;
using cache_io::In;
using cache_io::make_key;
using cache_io::now_realtime_ns;
using cache_io::Out;
using cache_io::put_vec;

void decode_payload(const char* data, size_t size, TraceModel* m, Summary* s);

constexpr char kMagic[8] = {'U', 'L', 'Y', 'S', 'S', 'U', 'M', 'C'};

bool read_cache(const std::string& cpath, const std::string& key, TraceModel* m, Summary* s) {
  std::string payload;
  if (!cache_io::read_file(cpath, kMagic, kSummaryCacheFormat, key, &payload)) return false;
  TraceModel mm;
  Summary ss;
  decode_payload(payload.data(), payload.size(), &mm, &ss);
  *m = std::move(mm);
  *s = std::move(ss);
  return true;
}

bool write_cache(const std::string& cpath, const std::string& key, const std::string& payload) {
  return cache_io::write_file(cpath, kMagic, kSummaryCacheFormat, key, payload);
}

}  // namespace

std::string summary_cache_path(const std::string& trace_path) {
  // Beside our own traces, in the user's cache folder for anyone else's (cache_location.hpp).
  return cache_location::cache_file(trace_path, trace_input_files(trace_path), ".ulysses-summary-cache");
}

std::string encode_summary(const TraceModel& m, const Summary& s) {
  Out o;
  // The shell model (source is the caller's path and not stored).
  o.u(m.from_nsys);
  o.s(m.format);
  put_vec(o, m.notes, [&](const std::string& x) { o.s(x); });
  o.s(m.config_json);
  o.i(m.sp_size), o.i(m.dp_size), o.i(m.num_heads), o.i(m.num_layers);
  put_vec(o, m.strings, [&](const std::string& x) { o.s(x); });
  put_vec(o, m.ranks, [&](const RankInfo& r) { put_rank(o, r); });
  cache_io::put_timed_tables(o, m, false);
  o.i(m.t_min), o.i(m.t_max);

  // The Summary, every field.
  o.i(s.world_size);
  const Headline& h = s.headline;
  o.i(h.steps), o.f(h.tokens_per_s), o.f(h.step_ms), o.i(h.a2a_bytes_per_step), o.i(h.allreduce_bytes_per_step);
  o.i(h.peak_memory_bytes);
  o.i(s.num_ranges), o.i(s.num_kernels);
  o.i(s.kernels_by_launch), o.i(s.kernels_by_time);
  put_vec(o, s.steps, [&](const StepBreakdown& b) {
    o.i(b.rank), o.i(b.step), o.i(b.start_ns), o.i(b.end_ns), o.i(b.wall_ns), o.i(b.compute_ns), o.i(b.comm_ns);
    o.i(b.overlap_ns), o.i(b.idle_ns), o.i(b.exposed_comm_ns), o.f(b.overlap_ratio), o.u(b.gpu);
  });
  put_vec(o, s.ranks, [&](const RankTotals& t) {
    o.i(t.rank), o.i(t.steps), o.i(t.wall_ns), o.i(t.compute_ns), o.i(t.comm_ns), o.i(t.overlap_ns), o.i(t.idle_ns);
    o.f(t.overlap_ratio);
  });
  o.i(s.overall.compute_ns), o.i(s.overall.comm_ns), o.i(s.overall.overlap_ns), o.i(s.overall.busy_ns);
  o.f(s.overall.ratio);
  put_vec(o, s.comm_phases, [&](const CommPhaseRow& c) {
    o.e(static_cast<uint8_t>(c.phase)), o.i(c.comm_ns), o.i(c.overlap_ns), o.i(c.ranges), o.i(c.bytes_sent);
    o.f(c.ratio);
  });
  o.i(s.allgather.compute_ns), o.i(s.allgather.comm_ns), o.i(s.allgather.overlap_ns), o.i(s.allgather.busy_ns);
  o.f(s.allgather.ratio);
  put_vec(o, s.layers, [&](const LayerRow& l) {
    o.i(l.layer), o.e(static_cast<uint8_t>(l.dir)), o.i(l.qkv_proj_ns), o.i(l.a2a_seq_to_head_ns), o.i(l.attention_ns);
    o.i(l.a2a_head_to_seq_ns), o.i(l.out_proj_ns), o.i(l.a2a_bytes_sent), o.i(l.a2a_bytes_recv), o.i(l.samples);
  });
  put_vec(o, s.heads, [&](const HeadRangeRow& x) {
    o.i(x.head_begin), o.i(x.head_end), o.i(x.a2a_seq_to_head_ns), o.i(x.attention_ns), o.i(x.a2a_head_to_seq_ns);
    o.i(x.count), o.i(x.bytes_sent);
  });
  put_vec(o, s.skew, [&](const SkewRow& k) {
    o.e(static_cast<uint8_t>(k.phase)), o.i(k.slowest_rank), o.i(k.fastest_rank), o.f(k.slowest_ns);
    o.f(k.fastest_ns), o.f(k.ratio);
  });
  put_vec(o, s.memory, [&](const PhaseMemoryRow& p) {
    o.s(p.label), o.i(p.rank), o.i(p.max_allocated), o.i(p.max_reserved), o.i(p.max_peak), o.i(p.samples);
  });
  put_vec(o, s.memory_by_rank, [&](const RankMemoryRow& r) {
    o.i(r.rank), o.i(r.peak_bytes), o.i(r.peak_t_ns), o.i(r.peak_step), o.i(r.planned_peak_bytes);
    for (int k = 0; k < kMemCategories; ++k) o.i(r.at_peak.bytes[k]), o.i(r.planned.bytes[k]);
    put_vec(o, r.at_peak_layers, [&](const std::pair<int32_t, int64_t>& l) { o.i(l.first), o.i(l.second); });
    for (const auto* v : {&r.at_peak_tensors, &r.planned_tensors})
      put_vec(o, *v, [&](const PeakTensor& t) {
        o.s(t.name), o.s(t.category), o.s(t.dtype), o.s(t.shape), o.i(t.bytes), o.i(t.blocks);
      });
  });
  put_vec(o, s.names,
          [&](const NameRow& x) { o.s(x.name), o.u(x.is_kernel), o.i(x.count), o.i(x.total_ns), o.i(x.max_ns); });
  const WaitingAnalysis& w = s.waiting;
  put_vec(o, w.instances, [&](const CollectiveInstance& c) {
    o.i(c.pg), o.i(c.seq), o.i(c.step), o.e(static_cast<uint8_t>(c.phase)), o.e(static_cast<uint8_t>(c.dir));
    o.i(c.layer);
    put_vec(o, c.arrivals, [&](const CollectiveArrival& a) { o.i(a.rank), o.i(a.arrive_ns), o.i(a.end_ns); });
    o.i(c.first_arrival_ns), o.i(c.last_arrival_ns), o.i(c.skew_ns), o.i(c.last_arriver);
  });
  o.i(w.incomplete), o.i(w.repeated), o.f(w.median_skew_ns);
  put_vec(o, w.ranks, [&](const RankWaitRow& r) {
    o.i(r.rank), o.i(r.collectives), o.i(r.last_arrivals), o.i(r.wait_caused_ns), o.i(r.wait_suffered_ns);
  });
  put_vec(o, w.steps, [&](const StepEndRow& x) { o.i(x.step), o.i(x.rank), o.u(x.from_collective), o.i(x.skew_ns); });
  o.i(s.clock_error_ns);
  return std::move(o.b);
}

void decode_summary(const std::string& bytes, TraceModel* m, Summary* s) {
  decode_payload(bytes.data(), bytes.size(), m, s);
}

namespace {
void decode_payload(const char* data, size_t size, TraceModel* mp, Summary* sp) {
  In in(data, size);
  TraceModel& m = *mp;
  Summary& s = *sp;
  m = TraceModel{};
  s = Summary{};
  m.from_nsys = in.flag();
  m.format = in.s();
  get_vec(in, &m.notes, [&](std::string& x) { x = in.s(); });
  m.config_json = in.s();
  m.sp_size = in.i32(), m.dp_size = in.i32(), m.num_heads = in.i32(), m.num_layers = in.i32();
  get_vec(in, &m.strings, [&](std::string& x) { x = in.s(); });
  get_vec(in, &m.ranks, [&](RankInfo& r) { get_rank(in, r); });
  cache_io::get_timed_tables(in, m, false);
  m.t_min = in.i(), m.t_max = in.i();

  s.world_size = in.i32();
  Headline& h = s.headline;
  h.steps = in.i(), h.tokens_per_s = in.f(), h.step_ms = in.f(), h.a2a_bytes_per_step = in.i();
  h.allreduce_bytes_per_step = in.i(), h.peak_memory_bytes = in.i();
  s.num_ranges = in.i(), s.num_kernels = in.i();
  s.kernels_by_launch = in.i(), s.kernels_by_time = in.i();
  get_vec(in, &s.steps, [&](StepBreakdown& b) {
    b.rank = in.i32(), b.step = in.i(), b.start_ns = in.i(), b.end_ns = in.i(), b.wall_ns = in.i();
    b.compute_ns = in.i(), b.comm_ns = in.i(), b.overlap_ns = in.i(), b.idle_ns = in.i();
    b.exposed_comm_ns = in.i(), b.overlap_ratio = in.f(), b.gpu = in.flag();
  });
  get_vec(in, &s.ranks, [&](RankTotals& t) {
    t.rank = in.i32(), t.steps = in.i(), t.wall_ns = in.i(), t.compute_ns = in.i(), t.comm_ns = in.i();
    t.overlap_ns = in.i(), t.idle_ns = in.i(), t.overlap_ratio = in.f();
  });
  s.overall.compute_ns = in.i(), s.overall.comm_ns = in.i(), s.overall.overlap_ns = in.i();
  s.overall.busy_ns = in.i(), s.overall.ratio = in.f();
  get_vec(in, &s.comm_phases, [&](CommPhaseRow& c) {
    const uint64_t ph = in.u();
    if (ph >= static_cast<uint64_t>(Phase::Count)) In::fail();
    c.phase = static_cast<Phase>(ph), c.comm_ns = in.i(), c.overlap_ns = in.i(), c.ranges = in.i();
    c.bytes_sent = in.i(), c.ratio = in.f();
  });
  s.allgather.compute_ns = in.i(), s.allgather.comm_ns = in.i(), s.allgather.overlap_ns = in.i();
  s.allgather.busy_ns = in.i(), s.allgather.ratio = in.f();
  get_vec(in, &s.layers, [&](LayerRow& l) {
    l.layer = in.i32(), l.dir = static_cast<Direction>(in.u()), l.qkv_proj_ns = in.i();
    l.a2a_seq_to_head_ns = in.i(), l.attention_ns = in.i(), l.a2a_head_to_seq_ns = in.i(), l.out_proj_ns = in.i();
    l.a2a_bytes_sent = in.i(), l.a2a_bytes_recv = in.i(), l.samples = in.i();
  });
  get_vec(in, &s.heads, [&](HeadRangeRow& x) {
    x.head_begin = in.i32(), x.head_end = in.i32(), x.a2a_seq_to_head_ns = in.i(), x.attention_ns = in.i();
    x.a2a_head_to_seq_ns = in.i(), x.count = in.i(), x.bytes_sent = in.i();
  });
  get_vec(in, &s.skew, [&](SkewRow& k) {
    k.phase = static_cast<Phase>(in.u()), k.slowest_rank = in.i32(), k.fastest_rank = in.i32();
    k.slowest_ns = in.f(), k.fastest_ns = in.f(), k.ratio = in.f();
  });
  get_vec(in, &s.memory, [&](PhaseMemoryRow& p) {
    p.label = in.s(), p.rank = in.i32(), p.max_allocated = in.i(), p.max_reserved = in.i(), p.max_peak = in.i();
    p.samples = in.i();
  });
  get_vec(in, &s.memory_by_rank, [&](RankMemoryRow& r) {
    r.rank = in.i32(), r.peak_bytes = in.i(), r.peak_t_ns = in.i(), r.peak_step = in.i();
    r.planned_peak_bytes = in.i();
    for (int k = 0; k < kMemCategories; ++k) r.at_peak.bytes[k] = in.i(), r.planned.bytes[k] = in.i();
    get_vec(in, &r.at_peak_layers, [&](std::pair<int32_t, int64_t>& l) { l.first = in.i32(), l.second = in.i(); });
    for (auto* v : {&r.at_peak_tensors, &r.planned_tensors})
      get_vec(in, v, [&](PeakTensor& t) {
        t.name = in.s(), t.category = in.s(), t.dtype = in.s(), t.shape = in.s(), t.bytes = in.i(), t.blocks = in.i();
      });
  });
  get_vec(in, &s.names, [&](NameRow& x) {
    x.name = in.s(), x.is_kernel = in.flag(), x.count = in.i(), x.total_ns = in.i(), x.max_ns = in.i();
  });
  WaitingAnalysis& w = s.waiting;
  get_vec(in, &w.instances, [&](CollectiveInstance& c) {
    c.pg = in.i32(), c.seq = in.i(), c.step = in.i(), c.phase = static_cast<Phase>(in.u());
    c.dir = static_cast<Direction>(in.u()), c.layer = in.i32();
    get_vec(in, &c.arrivals, [&](CollectiveArrival& a) { a.rank = in.i32(), a.arrive_ns = in.i(), a.end_ns = in.i(); });
    c.first_arrival_ns = in.i(), c.last_arrival_ns = in.i(), c.skew_ns = in.i(), c.last_arriver = in.i32();
  });
  w.incomplete = in.i(), w.repeated = in.i(), w.median_skew_ns = in.f();
  get_vec(in, &w.ranks, [&](RankWaitRow& r) {
    r.rank = in.i32(), r.collectives = in.i(), r.last_arrivals = in.i(), r.wait_caused_ns = in.i();
    r.wait_suffered_ns = in.i();
  });
  get_vec(in, &w.steps, [&](StepEndRow& x) {
    x.step = in.i(), x.rank = in.i32(), x.from_collective = in.flag(), x.skew_ns = in.i();
  });
  s.clock_error_ns = in.i();
  if (!in.done()) In::fail();
  // The shell model's times as a load leaves them (within +-2^62 ns, t_min <= t_max): the
  // report subtracts t_min from them (INT64_MIN - 3 was undefined behaviour; found by fuzzing).
  bool times_ok = m.t_min <= m.t_max && !detail::time_out_of_range(m.t_min) && !detail::time_out_of_range(m.t_max);
  for (const auto& x : m.steps)
    times_ok &= !detail::time_out_of_range(x.start_ns) && !detail::time_out_of_range(x.end_ns);
  for (const auto& x : m.memory) times_ok &= !detail::time_out_of_range(x.t_ns);
  if (!times_ok) In::fail();
}
}  // namespace

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The cache file and key of a trace's inputs, computed once for both the read and the write.
struct CacheProbe {
  std::vector<std::string> files;
  std::string cpath, key;  // both empty: no cache for these inputs
  int64_t newest_ns = -1;
};

CacheProbe probe_cache(const std::string& trace_path, const LoadOptions& lo, const AnalysisOptions& ao,
                       const SummaryCacheOptions& co) {
  CacheProbe p;
  if (!co.enabled || summary_cache_disabled_by_env()) return p;
  try {
    p.files = trace_input_files(trace_path);
    p.cpath = summary_cache_path(trace_path);
    if (!p.cpath.empty()) p.key = make_key(p.files, lo, ao, false, &p.newest_ns);
  } catch (...) {  // no cache for inputs that cannot be listed; load_trace reports them
    p = CacheProbe{};
  }
  return p;
}

std::optional<CachedSummary> read_probed(const CacheProbe& p, const std::string& trace_path) {
  if (p.cpath.empty() || p.key.empty()) return std::nullopt;
  try {
    CachedSummary out;
    if (!read_cache(p.cpath, p.key, &out.model, &out.summary)) return std::nullopt;
    out.model.source = trace_path;  // as load_trace sets it
    out.from_cache = true;
    return out;
  } catch (...) {  // a cache that cannot be read is no cache
    return std::nullopt;
  }
}
}  // namespace

std::optional<CachedSummary> read_summary_cache(const std::string& trace_path, const LoadOptions& lo,
                                                const AnalysisOptions& ao, const SummaryCacheOptions& co) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<CachedSummary> hit = read_probed(probe_cache(trace_path, lo, ao, co), trace_path);
  if (hit) hit->load_s = seconds_since(t0);
  return hit;
}

CachedSummary load_summary(const std::string& trace_path, const LoadOptions& lo, const AnalysisOptions& ao,
                           const SummaryCacheOptions& co) {
  const int64_t started_ns = now_realtime_ns();
  auto t0 = std::chrono::steady_clock::now();
  const CacheProbe p = probe_cache(trace_path, lo, ao, co);
  if (std::optional<CachedSummary> hit = read_probed(p, trace_path)) {
    hit->load_s = seconds_since(t0);
    return std::move(*hit);
  }
  CachedSummary out;
  t0 = std::chrono::steady_clock::now();
  out.model = load_trace(trace_path, lo);
  out.load_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  out.summary = analyze(out.model, ao);
  out.analyze_s = seconds_since(t0);
  if (!p.cpath.empty() && !p.key.empty()) {
    try {
      int64_t newest_after = -1;
      // Not while the run is still being written, nor when an input changed while it was read.
      const bool settled = p.newest_ns >= 0 && p.newest_ns < started_ns - co.racy_window_ns;
      if (settled && make_key(p.files, lo, ao, false, &newest_after) == p.key &&
          trace_input_files(trace_path) == p.files)
        out.written = write_cache(p.cpath, p.key, encode_summary(out.model, out.summary));
    } catch (...) {
    }
  }
  return out;
}

}  // namespace ulysses::prof
