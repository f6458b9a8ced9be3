// Turning the files read into one model (after the readers, before the analysis): each file's
// times converted to rank 0's clock at its import (align_to_rank0, over the fields of
// detail::for_each_timed_table), the files of a run folder read in parallel and merged, and the
// model finished (foreign ranks renumbered, lanes built, t_min/t_max). load_trace
// (trace_store.cpp) and the rank-file caches (model_of_file_builders) call it.
#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/common/run_layout.hpp"

namespace fs = std::filesystem;

namespace ulysses::prof {

using namespace detail;

void detail::finish_model(Builder& b, const LoadOptions& opts) {
  TraceModel& m = b.m;
  renumber_foreign_ranks(b);
  std::sort(m.ranks.begin(), m.ranks.end(), [](const RankInfo& x, const RankInfo& y) { return x.rank < y.rank; });
  build_lanes(b, opts.legacy ? -1 : opts.threads, opts.head_lanes);
  label_foreign_phases(m);
  if (opts.head_lanes) add_head_lanes(m, !opts.legacy, opts.threads);
  link_kernels_to_launchers(m, opts.legacy ? 1 : opts.threads);
  attribute_kernels_by_time(m);
  std::sort(m.runtime.begin(), m.runtime.end(), [](const RuntimeCall& x, const RuntimeCall& y) {
    return std::tie(x.rank, x.start_ns) < std::tie(y.rank, y.start_ns);
  });
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepInfo& x, const StepInfo& y) { return std::tie(x.rank, x.step) < std::tie(y.rank, y.step); });
  std::sort(m.memory.begin(), m.memory.end(), [](const MemoryPoint& x, const MemoryPoint& y) {
    return std::tie(x.rank, x.t_ns) < std::tie(y.rank, y.t_ns);
  });
  std::stable_sort(m.memory_categories.begin(), m.memory_categories.end(),
                   [](const MemoryCategorySample& x, const MemoryCategorySample& y) {
                     return std::tie(x.rank, x.t_ns) < std::tie(y.rank, y.t_ns);
                   });
  std::sort(m.documents.begin(), m.documents.end(), [](const DocumentShard& x, const DocumentShard& y) {
    return std::tie(x.step, x.sequence, x.rank, x.piece, x.begin) <
           std::tie(y.step, y.sequence, y.rank, y.piece, y.begin);
  });
  std::stable_sort(m.peak_tensors.begin(), m.peak_tensors.end(),
                   [](const PeakTensorSample& x, const PeakTensorSample& y) {
                     return std::tie(x.rank, x.step, x.ord) < std::tie(y.rank, y.step, y.ord);
                   });
  bool first = true;
  int32_t max_layer = -1;
  auto extend = [&](int64_t a, int64_t z) {
    if (first) {
      m.t_min = a;
      m.t_max = z;
      first = false;
    } else {
      m.t_min = std::min(m.t_min, a);
      m.t_max = std::max(m.t_max, z);
    }
  };
  // Per lane, on the loader's threads; head-range lanes hold copies of ranges counted already.
  struct Extent {
    bool any = false;
    int64_t lo = 0, hi = 0;
    int16_t layer = -1;
  };
  std::vector<Extent> ext(m.lanes.size());
  parallel_for(m.lanes.size(), opts.legacy ? 1 : opts.threads, [&](size_t l) {
    const Lane& lane = m.lanes[l];
    if (lane.kind == LaneKind::HeadRange) return;
    Extent& x = ext[l];
    for (int64_t i = lane.first; i < lane.first + lane.count; ++i) {
      const TraceRange& r = m.ranges.rows()[static_cast<size_t>(i)];
      x.lo = x.any ? std::min(x.lo, r.start_ns) : r.start_ns;
      x.hi = x.any ? std::max(x.hi, r.end_ns) : r.end_ns;
      x.any = true;
      x.layer = std::max(x.layer, r.layer);
    }
  });
  for (const Extent& x : ext) {
    if (x.any) extend(x.lo, x.hi);
    max_layer = std::max<int32_t>(max_layer, x.layer);
  }
  for (const auto& s : m.steps) extend(s.start_ns, s.end_ns);
  m.num_layers = max_layer + 1;
  if (!m.config_json.empty()) {
    auto j = nlohmann::json::parse(m.config_json, nullptr, false);
    if (j.is_object() && j.contains("model") && j["model"].is_object()) {
      const auto& md = j["model"];
      if (md.contains("num_attention_heads") && md["num_attention_heads"].is_number_integer())
        m.num_heads = md["num_attention_heads"].get<int32_t>();
      if (md.contains("num_hidden_layers") && md["num_hidden_layers"].is_number_integer())
        m.num_layers = std::max(m.num_layers, md["num_hidden_layers"].get<int32_t>());
    }
  }
  if (m.format != "ulysses") {
    m.sp_size = static_cast<int32_t>(std::max<size_t>(1, m.ranks.size()));
    m.dp_size = 1;
  }
}

// Moves what one file added (the rows from `since` on) onto rank 0's clock with the offsets
// that file stored (ULYSSES_CLOCK): t -> t - offset_at(t), for every time of every timed table
// (detail::for_each_timed_table).
void detail::align_to_rank0(TraceModel& m, const TimedMarks& since) {
  for (size_t c = since.clocks; c < m.clocks.size(); ++c) {
    ClockInfo& ck = m.clocks[c];
    if (ck.rank == 0 || (!ck.has_start && !ck.has_close)) continue;
    // Measurements no clock gives are left out with a note rather than applied: offsets past
    // +-2^61 ns overflowed every shifted time (a median skew of -9.2e12 ms), a negative error
    // is a row that was not a number, and a drift between the two past 1% (quartz drifts by tens
    // of ppm; a short run's measurement error by hundreds) is no clock's.
    const std::string who = "rank " + std::to_string(ck.rank) + "'s clock offset";
    auto usable = [&](int64_t off, int64_t err, int64_t at) {
      return off >= -kMaxClockOffsetNs && off <= kMaxClockOffsetNs && err >= 0 && err <= kMaxClockOffsetNs &&
             at >= -kMaxClockOffsetNs && at <= kMaxClockOffsetNs;
    };
    if (ck.has_start && !usable(ck.start_offset_ns, ck.start_error_ns, ck.start_at_ns)) {
      ck.has_start = false;
      m.notes.push_back(who + " measured at start is not usable (not a number, or beyond +-2^61 ns): left out");
    }
    if (ck.has_close && !usable(ck.close_offset_ns, ck.close_error_ns, ck.close_at_ns)) {
      ck.has_close = false;
      m.notes.push_back(who + " measured at close is not usable (not a number, or beyond +-2^61 ns): left out");
    }
    if (ck.has_start && ck.has_close && ck.close_at_ns > ck.start_at_ns) {
      const double drift = std::fabs(static_cast<double>(ck.close_offset_ns - ck.start_offset_ns)) /
                           static_cast<double>(ck.close_at_ns - ck.start_at_ns);
      if (drift > kMaxClockDrift) {
        ck.has_close = false;
        m.notes.push_back(who + " changed by " + std::to_string(static_cast<int64_t>(drift * 1e6)) +
                          " ppm between start and close, more than a clock drifts: the start offset is used alone");
      }
    }
    if (!ck.has_start && !ck.has_close) {
      m.notes.push_back("rank " + std::to_string(ck.rank) + " is left on its own clock (no usable offset to rank 0)");
      continue;
    }
    ck.applied = true;
    // Each time by the offset at that time: with drift, one offset per range (its start's) moved
    // a child's end past its parent's, and the loader split them over two lanes ("main #2").
    auto shift = [&](int64_t& t) {  // saturating: a stored time of INT64_MIN stays the earliest
      int64_t out = 0;
      if (__builtin_sub_overflow(t, ck.offset_at(t), &out)) out = t < 0 ? INT64_MIN : INT64_MAX;
      t = out;
    };
    size_t table = 0;
    detail::for_each_timed_table(m, [&](auto& rows, auto times) {
      for (size_t i = since.from(table); i < rows.size(); ++i)
        if (rows[i].rank == ck.rank) times(rows[i], shift);
      ++table;
    });
  }
}

namespace {

// Appends what one file's own Builder read (its strings, sources, ranks, ranges, steps, ...)
// to the run's Builder, as if the file had been read into it directly: strings and sources
// are interned in the order the file met them, so ids come out as the sequential reader's.
void merge_file(Builder& g, Builder& f) {
  TraceModel& m = g.m;
  TraceModel& x = f.m;
  check_same_run(g, f.run_id, f.world_size, f.run_id_file);
  std::vector<int32_t> sid(x.strings.size());
  for (size_t i = 0; i < x.strings.size(); ++i) sid[i] = g.intern(x.strings[i]);
  std::vector<int32_t> src(f.sources.size());
  for (size_t i = 0; i < f.sources.size(); ++i) {
    const SourceLane& s = f.sources[i];
    src[i] = g.source(s.rank, s.kind, s.id, s.name, s.order);
  }
  if (m.config_json.empty()) m.config_json = std::move(x.config_json);
  if (x.sp_size >= 0) m.sp_size = x.sp_size;  // the reader sets them only when the file has a ULYSSES_RUN row
  if (x.dp_size >= 0) m.dp_size = x.dp_size;
  m.from_nsys = x.from_nsys;
  m.notes.insert(m.notes.end(), x.notes.begin(), x.notes.end());
  m.ranks.insert(m.ranks.end(), x.ranks.begin(), x.ranks.end());
  const auto extra_base = static_cast<int32_t>(m.ranges.extras().size());
  m.ranges.extras().insert(m.ranges.extras().end(), x.ranges.extras().begin(), x.ranges.extras().end());
  for (auto& r : x.ranges.rows()) {  // in place: build_lanes takes the file's vector as it is
    r.name_id = sid[static_cast<size_t>(r.name_id)];
    r.lane = src[static_cast<size_t>(r.lane)];
    if (r.extra >= 0) r.extra += extra_base;
  }
  g.pending_ranges.push_back(std::move(x.ranges.rows()));
  m.steps.insert(m.steps.end(), x.steps.begin(), x.steps.end());
  for (auto p : x.memory) {
    p.label_id = sid[static_cast<size_t>(p.label_id)];
    m.memory.push_back(p);
  }
  m.memory_categories.insert(m.memory_categories.end(), x.memory_categories.begin(), x.memory_categories.end());
  m.peak_tensors.insert(m.peak_tensors.end(), x.peak_tensors.begin(), x.peak_tensors.end());
  for (auto c : x.runtime) {
    c.name_id = sid[static_cast<size_t>(c.name_id)];
    m.runtime.push_back(c);
  }
  m.clocks.insert(m.clocks.end(), x.clocks.begin(), x.clocks.end());
  m.documents.insert(m.documents.end(), x.documents.begin(), x.documents.end());
}

// Which rank files belong to the folder's run (every worker writes its run's id into
// ULYSSES_RUN.runId): the id most files carry, ties going to the lowest file (rank 0's). A file
// of another run (a copy, a rank of an earlier run left behind) is left out with a note instead
// of failing the whole folder. Files without an id (older traces) are kept.
std::vector<char> files_of_one_run(const std::vector<Builder>& per, const std::vector<std::string>& files,
                                   std::vector<std::string>* notes) {
  std::map<std::string, size_t> count;
  std::string run;
  size_t best = 0;
  for (const Builder& f : per)
    if (!f.run_id.empty() && ++count[f.run_id] > best) best = count[f.run_id], run = f.run_id;
  std::vector<char> keep(per.size(), 1);
  for (size_t i = 0; i < per.size(); ++i) {
    if (per[i].run_id.empty() || per[i].run_id == run) continue;
    keep[i] = 0;
    notes->push_back(describe(files[i]) + " is of run '" + per[i].run_id + "', " + std::to_string(best) +
                     " other rank file(s) of the folder of run '" + run + "': " + kLeftOutOfAnotherRun);
  }
  return keep;
}

// The rank files of a Ulysses run folder read at once, one Builder per file on up to
// opts.threads threads, then merged in file order. Returns false (b untouched) when a file
// turned out not to be a plain Ulysses rank file (an nsys export named rank0.sqlite, ...):
// the caller then reads the folder the sequential way, which handles every kind.
}  // namespace

bool detail::read_rank_files_parallel(Builder& b, const std::vector<std::string>& files, const LoadOptions& opts,
                                      std::map<int32_t, std::string>& claimed) {
  std::vector<Builder> per(files.size());
  std::vector<std::exception_ptr> err(files.size());
  std::vector<char> cached(files.size(), 0), written(files.size(), 0);
  parallel_for(files.size(), opts.threads, [&](size_t i) {
    try {
      // Probed before the file is read (a write after the read can tell whether it changed).
      const RankFileCacheProbe probe = probe_rank_file_cache(files[i], static_cast<int32_t>(i), opts);
      cached[i] = read_rank_file_cache(probe, &per[i]);
      if (cached[i]) per[i].run_id_file = files[i];  // the file its run id was read from
      if (!cached[i]) {
        per[i].m.sp_size = per[i].m.dp_size = -1;  // "not set by the file"
        read_file(per[i], files[i], static_cast<int32_t>(i), opts);
        order_file_ranges(per[i].m.ranges.rows());
        if (opts.write_file_caches) written[i] = write_rank_file_cache(probe, files[i], opts, per[i]);
      }
      if (opts.align_clocks) align_to_rank0(per[i].m);
    } catch (...) {
      err[i] = std::current_exception();
    }
  });
  for (size_t i = 0; i < files.size(); ++i) {
    if (err[i]) std::rethrow_exception(err[i]);  // the first failing file, as the sequential reader
    if (per[i].m.format != "ulysses" || !per[i].foreign.empty()) return false;
  }
  if (opts.stats) {
    for (size_t i = 0; i < files.size(); ++i) {
      opts.stats->from_file_cache += cached[i];
      opts.stats->file_caches_written += written[i];
    }
  }
  const std::vector<char> keep = files_of_one_run(per, files, &b.m.notes);
  for (size_t i = 0; i < files.size(); ++i)
    for (const auto& rk : per[i].m.ranks) {
      if (!keep[i]) break;
      auto [it, fresh] = claimed.emplace(rk.rank, files[i]);
      if (!fresh)
        throw TraceError("two trace files claim rank " + std::to_string(rk.rank) + ": " + it->second + " and " +
                         files[i] + "; remove the stray copy");
    }
  for (size_t i = 0; i < files.size(); ++i)
    if (keep[i]) merge_file(b, per[i]);
  return true;
}

TraceModel detail::model_of_file_builders(const std::vector<Builder*>& files, const LoadOptions& opts) {
  Builder g;
  for (Builder* f : files) {
    if (opts.align_clocks) align_to_rank0(f->m);
    merge_file(g, *f);
  }
  finish_model(g, opts);
  if (opts.seal) g.m.ranges.seal(opts.legacy ? 1 : opts.threads);
  return std::move(g.m);
}

}  // namespace ulysses::prof
