// Rank-file caches: what read_file read from one Ulysses rank file, encoded with the trace
// caches' codec and framing (cache_io.hpp). See rank_file_cache.hpp.
#include "ulysses/profiler/rank_file_cache.hpp"

#include <cstdint>
#include <filesystem>
#include <stdexcept>

#include "ulysses/profiler/cache_io.hpp"
#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/trace_cache_key.hpp"

namespace ulysses::prof {

namespace fs = std::filesystem;
using cache_io::In;
using cache_io::Out;

namespace {

constexpr char kRankFileMagic[8] = {'U', 'L', 'Y', 'R', 'F', 'C', '0', '1'};

// Times are stored as differences (start from the previous range's start, end from start),
// computed and undone in unsigned arithmetic: any int64 values round-trip without overflow.
uint64_t time_diff(int64_t a, int64_t b) { return static_cast<uint64_t>(a) - static_cast<uint64_t>(b); }
int64_t time_add(int64_t a, uint64_t d) { return static_cast<int64_t>(static_cast<uint64_t>(a) + d); }

void encode(Out& o, const detail::Builder& b) {
  const TraceModel& m = b.m;
  o.s(m.config_json);
  o.i(m.sp_size), o.i(m.dp_size);
  o.s(b.run_id), o.i(b.world_size);
  cache_io::put_vec(o, m.notes, [&](const std::string& s) { o.s(s); });
  cache_io::put_vec(o, m.strings, [&](const std::string& s) { o.s(s); });
  cache_io::put_vec(o, b.sources, [&](const detail::SourceLane& s) {
    o.i(s.rank), o.e(static_cast<uint8_t>(s.kind)), o.i(s.id), o.s(s.name), o.i(s.order);
  });
  cache_io::put_vec(o, m.ranks, [&](const RankInfo& r) { cache_io::put_rank(o, r); });
  o.u(m.ranges.size());
  int64_t prev = 0;
  for (const TraceRange& r : m.ranges) {
    o.u(time_diff(r.start_ns, prev)), o.u(time_diff(r.end_ns, r.start_ns));
    prev = r.start_ns;
    o.u(static_cast<uint32_t>(r.lane)), o.u(static_cast<uint32_t>(r.name_id)), o.i(r.rank), o.i(r.step);
    const bool has_extra = r.extra >= 0;
    o.u((static_cast<uint64_t>(r.phase) << 4) | (static_cast<uint64_t>(r.dir) << 2) | (has_extra ? 2 : 0) |
        (r.is_kernel ? 1 : 0));
    o.i(r.layer), o.i(r.head_begin), o.i(r.head_end), o.i(r.chunk);
    if (has_extra) {
      const RangeExtra& x = m.extra(r);
      o.i(x.bytes_sent), o.i(x.bytes_recv), o.i(x.pg), o.i(x.seq), o.u(x.correlation), o.i(x.external_id);
    }
  }
  cache_io::put_timed_tables(o, m, true);
}

// What the SQLite reader guarantees of a Builder and the rest of the loader relies on: names
// and sources inside their tables, a range's rank that of its source and its extra record in
// TraceModel::ranges.extras(), no negative duration,
// thread and stream sources only. decode refuses a payload without it; cacheable does not
// write one (so a cache is never written only to be refused on every read).
bool reader_invariants_hold(const detail::Builder& b) {
  const size_t n_strings = b.m.strings.size(), n_sources = b.sources.size();
  auto name_ok = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < n_strings; };
  for (const auto& s : b.sources)
    if (s.kind != LaneKind::HostThread && s.kind != LaneKind::Comm && s.kind != LaneKind::CudaStream) return false;
  for (const TraceRange& r : b.m.ranges)
    if (r.end_ns < r.start_ns || !name_ok(r.name_id) || r.lane < 0 || static_cast<size_t>(r.lane) >= n_sources ||
        r.rank != b.sources[static_cast<size_t>(r.lane)].rank || r.extra < -1 ||
        (r.extra >= 0 && static_cast<size_t>(r.extra) >= b.m.ranges.extras_size()))
      return false;
  for (const auto& p : b.m.memory)
    if (!name_ok(p.label_id)) return false;
  for (const auto& c : b.m.runtime)
    if (!name_ok(c.name_id)) return false;
  return true;
}

// Decodes into a fresh Builder, holding it to reader_invariants_hold (and to valid phases,
// 32-bit correlation ids and a range count the payload can hold, checked as they are read).
void decode(const std::string& bytes, detail::Builder* out) {
  In in(bytes.data(), bytes.size());
  detail::Builder b;
  TraceModel& m = b.m;
  m.format = "ulysses";
  m.config_json = in.s();
  m.sp_size = in.i32(), m.dp_size = in.i32();
  b.run_id = in.s(), b.world_size = in.i();
  cache_io::get_vec(in, &m.notes, [&](std::string& s) { s = in.s(); });
  cache_io::get_vec(in, &m.strings, [&](std::string& s) { s = in.s(); });
  for (size_t k = 0; k < m.strings.size(); ++k) b.string_index.emplace(m.strings[k], static_cast<int32_t>(k));
  cache_io::get_vec(in, &b.sources, [&](detail::SourceLane& s) {
    s.rank = in.i32();
    const uint64_t kind = in.u();
    if (kind > static_cast<uint64_t>(LaneKind::CudaStream))
      In::fail();  // in the enum; which kinds: reader_invariants_hold
    s.kind = static_cast<LaneKind>(kind);
    s.id = in.i(), s.name = in.s(), s.order = static_cast<int>(in.i32());
  });
  for (size_t k = 0; k < b.sources.size(); ++k) {
    const auto& s = b.sources[k];
    b.source_index.emplace(std::make_tuple(s.rank, static_cast<int>(s.kind), s.id), static_cast<int32_t>(k));
  }
  cache_io::get_vec(in, &m.ranks, [&](RankInfo& r) { cache_io::get_rank(in, r); });
  // A range takes at least kRangeVarints bytes: a count beyond that is corrupt, refused before
  // it allocates (56 bytes per range in memory).
  constexpr size_t kRangeVarints = 11;
  const size_t n = in.count();
  if (n > (bytes.size() - static_cast<size_t>(in.pos() - bytes.data())) / kRangeVarints) In::fail();
  m.ranges.rows().reserve(n);                       // each range written once (push_back), not default-filled first
  detail::prepare_capacity(m.ranges.rows(), n, 1);  // this file is decoded on one of the reader's threads
  int64_t prev = 0;
  for (size_t k = 0; k < n; ++k) {
    TraceRange r;
    r.start_ns = time_add(prev, in.u());
    prev = r.start_ns;
    const uint64_t d = in.u();
    if (d > time_diff(INT64_MAX, r.start_ns)) In::fail();  // end past INT64_MAX
    r.end_ns = time_add(r.start_ns, d);
    const uint64_t lane = in.u(), name = in.u();
    if (lane > INT32_MAX || name > INT32_MAX) In::fail();
    r.lane = static_cast<int32_t>(lane), r.name_id = static_cast<int32_t>(name);
    r.rank = in.i32(), r.step = in.i32();
    const uint64_t bits = in.u();
    if ((bits >> 4) >= static_cast<uint64_t>(Phase::Count)) In::fail();  // direction: 2 bits, 0..3 all valid
    r.phase = static_cast<Phase>(bits >> 4), r.dir = static_cast<Direction>((bits >> 2) & 3), r.is_kernel = bits & 1;
    const int64_t layer = in.i(), head_begin = in.i(), head_end = in.i(), chunk = in.i();
    // What the reader stores is within the fields' bounds (set_layer_heads_chunk): else corrupt.
    if (detail::set_layer_heads_chunk(r, layer, head_begin, head_end, chunk) != 0) In::fail();
    if (bits & 2) {
      RangeExtra x;
      x.bytes_sent = in.i(), x.bytes_recv = in.i(), x.pg = in.i32(), x.seq = in.i32();
      const uint64_t corr = in.u();
      if (corr > UINT32_MAX) In::fail();
      x.correlation = static_cast<uint32_t>(corr);
      x.external_id = in.i();
      if (x.empty()) In::fail();  // the reader gives no range an empty record
      m.extra_for(r) = x;
    }
    m.ranges.rows().push_back(r);
  }
  cache_io::get_timed_tables(in, m, true);
  for (ClockInfo& c : m.clocks) c.applied = false;  // alignment is done after reading, as for the rows
  if (!in.done() || !reader_invariants_hold(b)) In::fail();
  *out = std::move(b);
}

// Whether what read_file left in b can be cached: a plain Ulysses rank file, and ranges as
// the reader makes them (no nesting or links yet, which the cache does not store).
bool cacheable(const detail::Builder& b) {
  if (b.m.format != "ulysses" || !b.foreign.empty() || b.m.from_nsys || !b.pending_ranges.empty() || !b.m.lanes.empty())
    return false;
  for (const TraceRange& r : b.m.ranges)
    if (r.depth != 0 || r.parent != -1 || r.origin != -1) return false;
  return reader_invariants_hold(b);
}

// file_index: the file's place in its folder, which the reader gives ranges of a file that
// names no rank (a hand-made one) as their rank.
std::string key_of(const std::string& file, int32_t file_index, const LoadOptions& lo, int64_t* newest_ns) {
  LoadOptions k;  // only what changes what read_file reads
  k.gpu_activity = lo.gpu_activity;
  return "rank-file-cache format=" + std::to_string(kRankFileCacheFormat) + " index=" + std::to_string(file_index) +
         "\n" + cache_io::make_key({file}, k, kRankFileCacheFormat, "", false, newest_ns);
}

}  // namespace

std::string rank_file_cache_path(const std::string& rank_file) {
  const fs::path p(rank_file);
  return (p.parent_path() / ("." + p.filename().string() + ".ulysses-read-cache")).string();
}

namespace detail {

bool rank_file_caches_on(const LoadOptions& lo) { return lo.file_caches && !summary_cache_disabled_by_env(); }

RankFileCacheProbe probe_rank_file_cache(const std::string& file, int32_t file_index, const LoadOptions& lo) {
  RankFileCacheProbe p;
  p.file_index = file_index;
  if (!rank_file_caches_on(lo)) return p;
  try {
    p.probed_at_ns = cache_io::now_realtime_ns();
    p.key = key_of(file, file_index, lo, &p.newest_ns);
    p.path = rank_file_cache_path(file);
  } catch (...) {
    p = RankFileCacheProbe{};
  }
  return p;
}

std::vector<std::string> rank_files_for_caches(const std::string& trace_path) {
  try {
    std::error_code ec;
    if (!fs::is_directory(trace_path, ec)) return {};
    std::vector<std::string> files = find_rank_files(trace_path);
    if (files.size() < 2) return {};
    // Only a folder of Ulysses rank files is read by the parallel reader, which uses the caches
    // (nsys exports or PyTorch traces named rank*.sqlite are read one after another).
    for (const auto& f : files) {
      if (looks_like_json(f)) return {};
      sql::Db db;
      if (validate_file(f, &db) != FileKind::Ulysses) return {};
    }
    return files;
  } catch (...) {
    return {};
  }
}

bool rank_file_cache_current(const std::string& file, int32_t file_index, const LoadOptions& lo) {
  const RankFileCacheProbe p = probe_rank_file_cache(file, file_index, lo);
  std::string payload;
  return !p.path.empty() && !p.key.empty() &&
         cache_io::read_file(p.path, kRankFileMagic, kRankFileCacheFormat, p.key, &payload);
}

bool read_rank_file_cache(const RankFileCacheProbe& p, Builder* b) {
  if (p.path.empty() || p.key.empty()) return false;
  try {
    std::string payload;
    if (!cache_io::read_file(p.path, kRankFileMagic, kRankFileCacheFormat, p.key, &payload)) return false;
    Builder fresh;
    decode(payload, &fresh);
    *b = std::move(fresh);
    return true;
  } catch (...) {  // malformed, or no memory for it: read the rows
    return false;
  }
}

bool write_rank_file_cache(const RankFileCacheProbe& p, const std::string& file, const LoadOptions& lo,
                           const Builder& b) {
  if (p.path.empty() || p.key.empty() || !cacheable(b)) return false;
  try {
    // Settled before the read began, and unchanged since.
    if (p.newest_ns < 0 || p.newest_ns >= p.probed_at_ns - lo.file_cache_racy_window_ns) return false;
    int64_t newest_after = -1;
    if (key_of(file, p.file_index, lo, &newest_after) != p.key) return false;
    Out o;
    encode(o, b);
    return cache_io::write_file(p.path, kRankFileMagic, kRankFileCacheFormat, p.key, o.b);
  } catch (...) {
    return false;
  }
}

}  // namespace detail

std::string encode_rank_file(const std::string& rank_file, const LoadOptions& lo) {
  detail::Builder b;
  b.m.sp_size = b.m.dp_size = -1;
  detail::read_file(b, rank_file, 0, lo);
  detail::order_file_ranges(b.m.ranges.rows());  // as the loader does before it writes a cache
  if (!cacheable(b)) throw std::runtime_error(rank_file + " is not a plain Ulysses rank file");
  Out o;
  encode(o, b);
  return o.b;
}

TraceModel model_from_rank_file_cache(const std::string& payload, const LoadOptions& lo) {
  detail::Builder b;
  decode(payload, &b);
  return detail::model_of_file_builders({&b}, lo);
}

}  // namespace ulysses::prof
