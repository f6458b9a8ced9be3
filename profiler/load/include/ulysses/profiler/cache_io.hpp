// Internal to the profiler: the binary encoding and the file framing shared by the trace
// caches kept beside a trace (rank_file_cache.hpp, summary_cache.hpp, trace_overview.hpp). In
// the load room, whose rank-file caches use it (cache_io.cpp); the caches of the cache room add
// their analysis options to the key (cache_key.hpp). Varints (zigzag for
// signed), doubles bit for bit, length-prefixed strings; a file is
//   magic[8] format key payload_size checksum payload
// and is read only when magic, format and key match and the checksum of the whole payload does.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ulysses/profiler/load_options.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof::cache_io {

// ---- encoding: varints (zigzag for signed), doubles bit for bit, length-prefixed strings ----
class Out {
 public:
  std::string b;
  void u(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<char>(v));
  }
  void i(int64_t v) { u((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f(double d) {
    uint64_t x;
    std::memcpy(&x, &d, sizeof x);
    for (int k = 0; k < 8; ++k) b.push_back(static_cast<char>((x >> (8 * k)) & 0xff));
  }
  void s(const std::string& v) {
    u(v.size());
    b += v;
  }
  void e(uint8_t v) { u(v); }
};

class In {
 public:
  In(const char* p, size_t n) : p_(p), end_(p + n) {}
  uint64_t u() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) fail();
      const auto c = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    fail();
  }
  int64_t i() {
    const uint64_t z = u();
    return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  int32_t i32() { return static_cast<int32_t>(i()); }
  bool flag() { return u() != 0; }
  double f() {
    if (end_ - p_ < 8) fail();
    uint64_t x = 0;
    for (int k = 0; k < 8; ++k) x |= static_cast<uint64_t>(static_cast<uint8_t>(p_[k])) << (8 * k);
    p_ += 8;
    double d;
    std::memcpy(&d, &x, sizeof d);
    return d;
  }
  std::string s() {
    const uint64_t n = u();
    if (n > static_cast<uint64_t>(end_ - p_)) fail();
    std::string v(p_, static_cast<size_t>(n));
    p_ += n;
    return v;
  }
  // An element count: each element takes at least one byte, so a count beyond the bytes left
  // is corrupt (and never allocates).
  size_t count() {
    const uint64_t n = u();
    if (n > static_cast<uint64_t>(end_ - p_)) fail();
    return static_cast<size_t>(n);
  }
  bool done() const { return p_ == end_; }
  const char* pos() const { return p_; }
  [[noreturn]] static void fail() { throw std::runtime_error("trace cache: truncated or malformed"); }

 private:
  const char* p_;
  const char* end_;
};

template <class T, class F>
void put_vec(Out& o, const std::vector<T>& v, F f) {
  o.u(v.size());
  for (const auto& x : v) f(x);
}
template <class T, class F>
void get_vec(In& in, std::vector<T>* v, F f) {
  const size_t n = in.count();
  v->clear();
  v->reserve(n);
  for (size_t k = 0; k < n; ++k) {
    v->emplace_back();
    f(v->back());
  }
}

// 64-bit checksum over 8-byte words (fast; it detects torn and flipped files, not attacks).
inline uint64_t checksum(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t w;
    std::memcpy(&w, p + k, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; k < n; ++k) h = (h ^ static_cast<uint8_t>(p[k])) * 0x100000001b3ULL;
  return h ^ (h >> 32);
}

// The model records both caches store (summary shell, overview): one encoding each.
inline void put_rank(Out& o, const RankInfo& r) {
  o.i(r.rank), o.i(r.sp_rank), o.i(r.dp_rank), o.s(r.device), o.s(r.hostname), o.i(r.pid);
}
inline void get_rank(In& in, RankInfo& r) {
  r.rank = in.i32(), r.sp_rank = in.i32(), r.dp_rank = in.i32(), r.device = in.s(), r.hostname = in.s();
  r.pid = in.i();
}
inline void put_step(Out& o, const StepInfo& x) {
  o.i(x.rank), o.i(x.step), o.i(x.start_ns), o.i(x.end_ns);
  o.f(x.loss), o.f(x.lr), o.f(x.grad_norm), o.f(x.tokens_per_s), o.f(x.step_ms);
  o.i(x.tokens), o.i(x.max_mem_bytes);
}
inline void get_step(In& in, StepInfo& x) {
  x.rank = in.i32(), x.step = in.i(), x.start_ns = in.i(), x.end_ns = in.i();
  x.loss = in.f(), x.lr = in.f(), x.grad_norm = in.f(), x.tokens_per_s = in.f(), x.step_ms = in.f();
  x.tokens = in.i(), x.max_mem_bytes = in.i();
}
inline void put_clock(Out& o, const ClockInfo& c) {
  o.i(c.rank), o.u(c.has_start), o.u(c.has_close), o.i(c.start_offset_ns), o.i(c.start_error_ns);
  o.i(c.start_at_ns), o.i(c.close_offset_ns), o.i(c.close_error_ns), o.i(c.close_at_ns), o.u(c.applied);
}
inline void get_clock(In& in, ClockInfo& c) {
  c.rank = in.i32(), c.has_start = in.flag(), c.has_close = in.flag(), c.start_offset_ns = in.i();
  c.start_error_ns = in.i(), c.start_at_ns = in.i(), c.close_offset_ns = in.i(), c.close_error_ns = in.i();
  c.close_at_ns = in.i(), c.applied = in.flag();
}
inline void put_memory_categories(Out& o, const MemoryCategorySample& x) {
  o.i(x.rank), o.i(x.t_ns), o.i(x.step), o.i(static_cast<int64_t>(x.edge)), o.i(x.phase), o.i(x.layer);
  for (int64_t b : x.c.bytes) o.i(b);
}
inline void put_peak_tensor(Out& o, const PeakTensorSample& x) {
  o.i(x.rank), o.i(x.step), o.i(x.ord), o.s(x.t.name), o.s(x.t.category), o.s(x.t.dtype), o.s(x.t.shape);
  o.i(x.t.bytes), o.i(x.t.blocks);
}
inline void get_peak_tensor(In& in, PeakTensorSample& x) {
  x.rank = in.i32(), x.step = in.i(), x.ord = in.i32(), x.t.name = in.s(), x.t.category = in.s(), x.t.dtype = in.s();
  x.t.shape = in.s(), x.t.bytes = in.i(), x.t.blocks = in.i();
}
inline void get_memory_categories(In& in, MemoryCategorySample& x) {
  x.rank = in.i32(), x.t_ns = in.i(), x.step = in.i();
  const int64_t edge = in.i();
  if (edge < 0 || edge > static_cast<int64_t>(MemEdge::PeakLayer)) In::fail();
  x.edge = static_cast<MemEdge>(edge);
  x.phase = in.i32(), x.layer = in.i32();
  for (int64_t& b : x.c.bytes) b = in.i();
}

inline void put_document(Out& o, const DocumentShard& d) {
  o.i(d.rank), o.i(d.piece), o.i(d.step), o.i(d.sequence), o.i(d.packed), o.i(d.shard_begin), o.i(d.shard_end);
  o.i(d.document), o.i(d.doc_tokens), o.i(d.doc_offset), o.i(d.begin), o.i(d.end);
}
inline void get_document(In& in, DocumentShard& d) {
  d.rank = in.i32(), d.piece = in.i32(), d.step = in.i(), d.sequence = in.i(), d.packed = in.i();
  d.shard_begin = in.i(), d.shard_end = in.i(), d.document = in.i(), d.doc_tokens = in.i(), d.doc_offset = in.i();
  d.begin = in.i(), d.end = in.i();
}

inline void put_memory_point(Out& o, const MemoryPoint& p) {
  o.i(p.rank), o.i(p.t_ns), o.i(p.allocated), o.i(p.reserved), o.i(p.peak), o.i(p.label_id), o.i(p.step);
}
// A 32-bit field stored as a varint: anything wider is corrupt.
inline int32_t get_int32(In& in) {
  const int64_t v = in.i();
  if (v < INT32_MIN || v > INT32_MAX) In::fail();
  return static_cast<int32_t>(v);
}
inline void get_memory_point(In& in, MemoryPoint& p) {
  p.rank = get_int32(in), p.t_ns = in.i(), p.allocated = in.i(), p.reserved = in.i(), p.peak = in.i();
  p.label_id = get_int32(in), p.step = in.i();
}
inline void put_runtime_call(Out& o, const RuntimeCall& c) {
  o.i(c.rank), o.i(c.tid), o.i(c.start_ns), o.i(c.end_ns), o.i(c.correlation), o.i(c.external_id), o.i(c.name_id);
}
inline void get_runtime_call(In& in, RuntimeCall& c) {
  c.rank = get_int32(in), c.tid = in.i(), c.start_ns = in.i(), c.end_ns = in.i(), c.correlation = in.i();
  c.external_id = in.i(), c.name_id = get_int32(in);
}

// The one codec of a model's timed tables besides its ranges (steps, memory, memory by
// category, runtime calls) and the records kept with them (peak tensors, clocks, documents),
// shared by the rank-file cache and the summary cache's shell model: a field added to one of
// these tables is encoded here once (docs/CODING.md, "Adding a timed field to the trace").
// Runtime calls only `with_runtime` (the summary's shell has none). Ranges have a codec per
// cache (every field and link in the rank-file cache, the reduced ranges in the overview).
inline void put_timed_tables(Out& o, const TraceModel& m, bool with_runtime) {
  put_vec(o, m.steps, [&](const StepInfo& x) { put_step(o, x); });
  put_vec(o, m.memory, [&](const MemoryPoint& x) { put_memory_point(o, x); });
  put_vec(o, m.memory_categories, [&](const MemoryCategorySample& x) { put_memory_categories(o, x); });
  put_vec(o, m.peak_tensors, [&](const PeakTensorSample& x) { put_peak_tensor(o, x); });
  if (with_runtime) put_vec(o, m.runtime, [&](const RuntimeCall& c) { put_runtime_call(o, c); });
  put_vec(o, m.clocks, [&](const ClockInfo& c) { put_clock(o, c); });
  put_vec(o, m.documents, [&](const DocumentShard& d) { put_document(o, d); });
}
// Inverse of put_timed_tables; throws std::runtime_error (In::fail) on malformed input.
inline void get_timed_tables(In& in, TraceModel& m, bool with_runtime) {
  get_vec(in, &m.steps, [&](StepInfo& x) { get_step(in, x); });
  get_vec(in, &m.memory, [&](MemoryPoint& x) { get_memory_point(in, x); });
  get_vec(in, &m.memory_categories, [&](MemoryCategorySample& x) { get_memory_categories(in, x); });
  get_vec(in, &m.peak_tensors, [&](PeakTensorSample& x) { get_peak_tensor(in, x); });
  if (with_runtime) get_vec(in, &m.runtime, [&](RuntimeCall& c) { get_runtime_call(in, c); });
  get_vec(in, &m.clocks, [&](ClockInfo& c) { get_clock(in, c); });
  get_vec(in, &m.documents, [&](DocumentShard& d) { get_document(in, d); });
}

// CLOCK_REALTIME in ns (file mtimes are on this clock).
int64_t now_realtime_ns();
// The cache key of the inputs and options (the cache's format, profiler build id, load
// options, then `options`, the cache's own, one line each ending in '\n', then each file's and
// its -wal file's name, size, mtime, inode); *newest_ns = the newest input mtime. LoadOptions::
// head_lanes is part of it only with `lanes_matter`: head-range lanes are display copies the
// analysis skips, so the summary is the same with or without them (the CLI loads without,
// the studio with, and both share one summary record), while an overview holds the lanes.
std::string make_key(const std::vector<std::string>& files, const LoadOptions& lo, uint32_t format,
                     const std::string& options, bool lanes_matter, int64_t* newest_ns);
// The payload of cache file `path` when its magic, format, key and checksum match; false
// otherwise (missing, foreign, stale, torn). Never throws.
bool read_file(const std::string& path, const char (&magic)[8], uint32_t format, const std::string& key,
               std::string* payload);
// Writes atomically (temp file + rename); false when the folder cannot be written.
bool write_file(const std::string& path, const char (&magic)[8], uint32_t format, const std::string& key,
                const std::string& payload);

}  // namespace ulysses::prof::cache_io
