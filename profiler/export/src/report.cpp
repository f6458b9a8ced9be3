// Text and JSON renderings of a Summary (ulysses-trace summary; the studio can reuse them).
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/strfmt.hpp"

#include <cstdio>
#include <set>
#include <string>

namespace ulysses::prof {

namespace {

// Our own trace whose memory samples all come from CPU ranks: there a sample is the process's
// resident memory and its peak (Tracer::process_memory), not the tensors alone, so it says
// more than the planner's figure for the same config.
bool cpu_process_memory(const TraceModel& m) {
  if (m.format != "ulysses" || m.memory.empty()) return false;
  std::set<int32_t> with_memory;
  for (const auto& p : m.memory) with_memory.insert(p.rank);
  for (const auto& r : m.ranks)
    if (with_memory.count(r.rank) && r.device.rfind("cpu", 0) != 0) return false;
  return true;
}

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double msd(double ns) { return ns / 1e6; }

std::string mib(int64_t b) { return strfmt("%.1f", static_cast<double>(b) / (1024.0 * 1024.0)); }

// What the waiting analysis left out, for the notes (empty when nothing): said whether or not
// any collective paired, so a run whose ids all went unpaired (a rank's file missing from the
// folder) does not lose its straggler table without a word.
std::string waiting_note(const WaitingAnalysis& w) {
  if (w.incomplete == 0 && w.repeated == 0) return {};
  return "collective ids left out of the straggler table: " + std::to_string(w.incomplete) +
         " seen on only some ranks of their group, " + std::to_string(w.repeated) +
         " ranges repeating an id on one rank (only the earliest counted)";
}

// Ranks of the trace with no step record while others have some: the per-step and per-rank
// tables leave them out, which went unsaid.
std::string missing_steps_note(const TraceModel& m) {
  if (m.steps.empty()) return {};
  std::set<int32_t> with;
  for (const auto& st : m.steps) with.insert(st.rank);
  std::string list;
  int n = 0;
  for (const auto& ri : m.ranks)
    if (!with.count(ri.rank)) list += (n++ ? ", " : "") + std::to_string(ri.rank);
  if (n == 0) return {};
  return std::string(n == 1 ? "rank " : "ranks ") + list + (n == 1 ? " has" : " have") +
         " no step records (ULYSSES_STEPS: ended before its first step, or the file was cut): left out of the "
         "per-step and per-rank tables";
}
}  // namespace

namespace {
// Length of the well-formed UTF-8 sequence at p (n bytes left), 0 when there is none.
size_t utf8_sequence(const unsigned char* p, size_t n) {
  auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return k < n && p[k] >= lo && p[k] <= hi; };
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const bool ok1 = c == 0xE0 ? cont(1, 0xA0) : c == 0xED ? cont(1, 0x80, 0x9F) : cont(1);
    return ok1 && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const bool ok1 = c == 0xF0 ? cont(1, 0x90) : c == 0xF4 ? cont(1, 0x80, 0x8F) : cont(1);
    return ok1 && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string with_valid_utf8(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence(p + i, s.size() - i);
    if (len == 0) {
      o += "\xEF\xBF\xBD";
      ++i;
    } else {
      o.append(s, i, len);
      i += len;
    }
  }
  return o;
}

std::string empty_trace_reason(const std::string& source, int64_t ranges_and_kernels, size_t memory_samples) {
  if (ranges_and_kernels > 0 || memory_samples > 0) return {};
  return "the trace " + (source.empty() ? std::string("(in memory)") : source) +
         " is empty: it has no ranges and no memory samples. Was profiling enabled (profile.step_begin..step_end) "
         "and did the run reach a traced step?";
}

std::string empty_trace_reason(const TraceModel& m, int64_t ranges_and_kernels) {
  if (m.format == "ulysses" || m.format.empty())
    return empty_trace_reason(m.source, ranges_and_kernels, m.memory.size());
  if (ranges_and_kernels > 0 || !m.memory.empty()) return {};
  const std::string kind = m.format == "nsys" ? "Nsight Systems export" : "PyTorch profiler trace";
  std::string why;
  for (const auto& n : m.notes) why += (why.empty() ? "" : "; ") + n;
  return "the " + kind + " " + (m.source.empty() ? std::string("(in memory)") : m.source) +
         " has nothing to show: no kernel, range or memory sample was read from it" +
         (why.empty() ? std::string(" (it holds none)") : ". The importer's notes: " + with_valid_utf8(why));
}

namespace {
// Memory by category (docs/LONG_SEQUENCES.md) of one rank: the peak and what was alive then, beside the plan;
// null when the trace has no categories for it.
nlohmann::json rank_memory_json(const Summary& s, int32_t rank) {
  using nlohmann::json;
  for (const auto& mr : s.memory_by_rank) {
    if (mr.rank != rank || mr.peak_bytes < 0) continue;
    json at = json::object(), planned = json::object();
    for (int k = 0; k < kMemCategories; ++k) {
      at[kMemCategoryNames[k]] = mr.at_peak.bytes[k];
      planned[kMemCategoryNames[k]] = mr.planned.bytes[k];
    }
    json mem = {{"peak_bytes", mr.peak_bytes},
                {"peak_step", mr.peak_step},
                {"at_peak", at},
                {"planned_peak_bytes", mr.planned_peak_bytes >= 0 ? json(mr.planned_peak_bytes) : json()}};
    if (mr.planned_peak_bytes >= 0) mem["planned_at_peak"] = planned;
    json layers = json::array();  // each decoder layer's activations at that peak
    for (const auto& [layer, bytes] : mr.at_peak_layers) layers.push_back({{"layer", layer}, {"activations", bytes}});
    mem["at_peak_layers"] = layers;
    auto tensors = [](const std::vector<PeakTensor>& v) {
      json a = json::array();
      for (const auto& t : v)
        a.push_back({{"name", t.name},
                     {"category", t.category},
                     {"dtype", t.dtype},
                     {"shape", t.shape},
                     {"bytes", t.bytes},
                     {"blocks", t.blocks}});
      return a;
    };
    mem["at_peak_tensors"] = tensors(mr.at_peak_tensors);  // named groups alive at that peak, largest first
    mem["planned_tensors"] = tensors(mr.planned_tensors);  // the planner's, at its peak (rank 0's plan)
    return mem;
  }
  return json();
}
}  // namespace

namespace {
// The run: source, notes, shape, counts, kernel attribution, headline, overall overlap, the
// communication kinds and ZeRO's all-gathers.
void json_run_part(nlohmann::json& j, const TraceModel& m, const Summary& s) {
  using nlohmann::json;
  j["source"] = m.source;
  j["from_nsys"] = m.from_nsys;
  j["format"] = m.format;
  j["notes"] = m.notes;
  if (const std::string n = waiting_note(s.waiting); !n.empty()) j["notes"].push_back(n);
  if (const std::string n = missing_steps_note(m); !n.empty()) j["notes"].push_back(n);
  j["world_size"] = s.world_size;
  j["sp_size"] = m.sp_size;
  j["dp_size"] = m.dp_size;
  j["num_ranges"] = s.num_ranges;
  j["num_kernels"] = s.num_kernels;
  j["kernel_attribution"] = {
      {"by_launch", s.kernels_by_launch},
      {"by_time", s.kernels_by_time},
      {"none", s.num_kernels - s.kernels_by_launch - s.kernels_by_time},
      {"fraction",
       s.num_kernels > 0 ? static_cast<double>(s.kernels_by_launch + s.kernels_by_time) / s.num_kernels : 0.0}};
  j["headline"] = {{"steps", s.headline.steps},
                   {"tokens_per_s", s.headline.tokens_per_s},
                   {"step_ms", s.headline.step_ms},
                   {"a2a_bytes_per_step", s.headline.a2a_bytes_per_step},
                   {"allreduce_bytes_per_step", s.headline.allreduce_bytes_per_step},
                   {"peak_memory_bytes", s.headline.peak_memory_bytes}};
  j["overall"] = {{"compute_ns", s.overall.compute_ns},
                  {"comm_ns", s.overall.comm_ns},
                  {"overlap_ns", s.overall.overlap_ns},
                  {"busy_ns", s.overall.busy_ns},
                  {"overlap_ratio", s.overall.ratio}};
  j["comm_phases"] = json::array();
  for (const auto& c : s.comm_phases) {
    j["comm_phases"].push_back({{"phase", phase_name(c.phase)},
                                {"comm_ns", c.comm_ns},
                                {"overlap_ns", c.overlap_ns},
                                {"overlap_ratio", c.ratio},
                                {"ranges", c.ranges},
                                {"bytes_sent", c.bytes_sent}});
  }
  // ZeRO's parameter all-gathers (analysis.hpp, Summary::allgather): how much compute hides.
  j["allgather"] = {{"allgather_ns", s.allgather.comm_ns},
                    {"hidden_ns", s.allgather.overlap_ns},
                    {"exposed_ns", s.allgather.comm_ns - s.allgather.overlap_ns},
                    {"hidden_ratio", s.allgather.ratio}};
}

// Per rank and step, and per rank (with its memory by category).
void json_steps_ranks(nlohmann::json& j, const Summary& s) {
  using nlohmann::json;
  j["steps"] = json::array();
  for (const auto& b : s.steps) {
    j["steps"].push_back({{"rank", b.rank},
                          {"step", b.step},
                          {"start_ns", b.start_ns},
                          {"end_ns", b.end_ns},
                          {"wall_ns", b.wall_ns},
                          {"compute_ns", b.compute_ns},
                          {"comm_ns", b.comm_ns},
                          {"overlap_ns", b.overlap_ns},
                          {"exposed_comm_ns", b.exposed_comm_ns},
                          {"idle_ns", b.idle_ns},
                          {"overlap_ratio", b.overlap_ratio},
                          {"gpu", b.gpu}});
  }
  j["ranks"] = json::array();
  for (const auto& t : s.ranks) {
    j["ranks"].push_back({{"rank", t.rank},
                          {"steps", t.steps},
                          {"wall_ns", t.wall_ns},
                          {"compute_ns", t.compute_ns},
                          {"comm_ns", t.comm_ns},
                          {"overlap_ns", t.overlap_ns},
                          {"idle_ns", t.idle_ns},
                          {"idle_share", t.wall_ns > 0 ? double(t.idle_ns) / double(t.wall_ns) : 0.0},
                          {"overlap_ratio", t.overlap_ratio}});
    if (json mem = rank_memory_json(s, t.rank); !mem.is_null()) j["ranks"].back()["memory"] = std::move(mem);
  }
}

// Per layer and per head range.
void json_layers_heads(nlohmann::json& j, const Summary& s) {
  using nlohmann::json;
  j["layers"] = json::array();
  for (const auto& l : s.layers) {
    j["layers"].push_back({{"layer", l.layer},
                           {"direction", direction_name(l.dir)},
                           {"qkv_proj_ns", l.qkv_proj_ns},
                           {"a2a_seq_to_head_ns", l.a2a_seq_to_head_ns},
                           {"attention_ns", l.attention_ns},
                           {"a2a_head_to_seq_ns", l.a2a_head_to_seq_ns},
                           {"out_proj_ns", l.out_proj_ns},
                           {"a2a_bytes_sent", l.a2a_bytes_sent},
                           {"a2a_bytes_recv", l.a2a_bytes_recv},
                           {"samples", l.samples}});
  }
  j["heads"] = json::array();
  for (const auto& h : s.heads) {
    j["heads"].push_back({{"head_begin", h.head_begin},
                          {"head_end", h.head_end},
                          {"a2a_seq_to_head_ns", h.a2a_seq_to_head_ns},
                          {"attention_ns", h.attention_ns},
                          {"a2a_head_to_seq_ns", h.a2a_head_to_seq_ns},
                          {"count", h.count},
                          {"bytes_sent", h.bytes_sent}});
  }
}

// Rank skew, peak memory per label, and the top names.
void json_skew_memory_names(nlohmann::json& j, const Summary& s) {
  using nlohmann::json;
  j["skew"] = json::array();
  for (const auto& k : s.skew) {
    j["skew"].push_back({{"phase", phase_name(k.phase)},
                         {"slowest_rank", k.slowest_rank},
                         {"slowest_ns", k.slowest_ns},
                         {"fastest_rank", k.fastest_rank},
                         {"fastest_ns", k.fastest_ns},
                         {"ratio", k.ratio}});
  }
  j["memory"] = json::array();
  for (const auto& p : s.memory) {
    j["memory"].push_back({{"label", p.label},
                           {"rank", p.rank},
                           {"max_allocated", p.max_allocated},
                           {"max_reserved", p.max_reserved},
                           {"max_peak", p.max_peak},
                           {"samples", p.samples}});
  }
  j["names"] = json::array();
  for (const auto& n : s.names) {
    j["names"].push_back({{"name", n.name},
                          {"kind", n.is_kernel ? "gpu" : "nvtx"},
                          {"count", n.count},
                          {"total_ns", n.total_ns},
                          {"max_ns", n.max_ns}});
  }
}

// Waiting analysis: per rank, keyed by the rank number as a string.
void json_waiting(nlohmann::json& j, const Summary& s) {
  using nlohmann::json;
  const WaitingAnalysis& w = s.waiting;
  json last = json::object(), caused = json::object(), suffered = json::object();
  for (const auto& r : w.ranks) {
    const std::string k = std::to_string(r.rank);
    last[k] = r.last_arrivals;
    caused[k] = ms(r.wait_caused_ns);
    suffered[k] = ms(r.wait_suffered_ns);
  }
  j["collectives"] = {{"count", static_cast<int64_t>(w.instances.size())},
                      {"median_skew_ms", msd(w.median_skew_ns)},
                      {"last_arriver", last},
                      {"wait_caused_ms", caused},
                      {"wait_suffered_ms", suffered}};
}

// The time of the step windows that no range explains (idle: in no compute or communication
// range), over all ranks, and the rank with the largest share of its wall time.
std::string untraced_line(const Summary& s) {
  int64_t idle = 0, wall = 0;
  const RankTotals* worst = nullptr;
  auto share = [](const RankTotals& t) { return t.wall_ns > 0 ? double(t.idle_ns) / double(t.wall_ns) : 0.0; };
  for (const auto& t : s.ranks) {
    idle += t.idle_ns;
    wall += t.wall_ns;
    if (!worst || share(t) > share(*worst)) worst = &t;
  }
  if (!worst || wall <= 0) return {};
  return strfmt("Untraced (idle: in no range): %.3f ms, %.1f%% of the ranks' wall time (most: rank %d, %.1f%%)\n",
                ms(idle), 100.0 * double(idle) / double(wall), worst->rank, 100.0 * share(*worst));
}

// The trace, its notes and ranks, clocks, overlap (by kind), ZeRO's all-gathers and the
// per-step headline.
std::string text_header(const TraceModel& m, const Summary& s) {
  std::string o;
  o += strfmt("Trace: %s%s\n", m.source.c_str(),
              m.format == "nsys"     ? "  (Nsight Systems export)"
              : m.format == "kineto" ? "  (PyTorch profiler trace)"
                                     : "");
  for (const auto& n : m.notes) o += "Note: " + n + "\n";
  if (const std::string n = waiting_note(s.waiting); !n.empty()) o += "Note: " + n + "\n";
  if (const std::string n = missing_steps_note(m); !n.empty()) o += "Note: " + n + "\n";
  if (m.format != "ulysses")
    for (const auto& r : m.ranks)
      o += strfmt("Rank %d: pid %lld, %s\n", r.rank, static_cast<long long>(r.pid), r.device.c_str());
  o += strfmt("Ranks: %d (sp %d x dp %d)   host ranges: %lld   GPU activities: %lld\n", s.world_size, m.sp_size,
              m.dp_size, static_cast<long long>(s.num_ranges), static_cast<long long>(s.num_kernels));
  if (s.clock_error_ns >= 0)
    o += strfmt("Clocks: every rank aligned to rank 0 by measured offsets, error bound +-%.1f us\n",
                static_cast<double>(s.clock_error_ns) / 1e3);
  if (s.overall.comm_ns > 0)
    o += strfmt(
        "Overlap (HTA: comm time overlapped by compute / comm time): %.1f%%  "
        "(comm %.3f ms, overlapped %.3f ms)\n\n",
        100.0 * s.overall.ratio, ms(s.overall.comm_ns), ms(s.overall.overlap_ns));
  else  // a trace without communication (a foreign one, or one rank) has no overlap to speak of
    o += strfmt("Overlap: no communication traced, nothing to overlap (compute %.3f ms)\n\n", ms(s.overall.compute_ns));
  if (s.comm_phases.size() > 1) {  // by kind when there is more than one (all-to-alls and ring steps, ...)
    o.pop_back();
    o += "  by kind:";
    for (const auto& c : s.comm_phases)
      o += strfmt("  %s %.1f%% of %.3f ms", phase_name(c.phase), 100.0 * c.ratio, ms(c.comm_ns));
    o += "\n\n";
  }
  if (s.num_kernels > 0 && s.overall.busy_ns > 0) {  // the GPUs' figures (kernels: ours, Nsight's, PyTorch's)
    int64_t wall = 0;
    for (const auto& b : s.steps)
      if (b.gpu) wall += b.wall_ns;
    if (wall > 0)
      o.insert(o.size() - 1,
               strfmt("GPU: busy %.3f ms of %.3f ms (%.1f%%); NCCL kernels %.3f ms (%.1f%% of the busy "
                      "time); %lld kernels\n",
                      ms(s.overall.busy_ns), ms(wall), 100.0 * double(s.overall.busy_ns) / double(wall),
                      ms(s.overall.comm_ns), 100.0 * double(s.overall.comm_ns) / double(s.overall.busy_ns),
                      static_cast<long long>(s.num_kernels)));
  }
  if (const std::string u = untraced_line(s); !u.empty()) o.insert(o.size() - 1, u);
  if (s.allgather.comm_ns > 0)  // ZeRO's parameter all-gathers (stage 3 gathers each layer)
    o.insert(o.size() - 1, strfmt("Parameter all-gathers (ZeRO): %.3f ms, %.1f%% hidden behind compute (%.3f ms "
                                  "exposed)\n",
                                  ms(s.allgather.comm_ns), 100.0 * s.allgather.ratio,
                                  ms(s.allgather.comm_ns - s.allgather.overlap_ns)));
  if (s.headline.steps > 0)
    o += strfmt(
        "Per step (%lld %s): %.0f tokens/s, %.1f ms; per rank: all-to-all %.3f "
        "MiB sent, gradient all-reduce "
        "%.3f MiB sent; %s\n\n",
        static_cast<long long>(s.headline.steps),
        // One step is its own median, warm-up or not (it read "medians leave out warm-up step 0"
        // when step 0 was the one counted).
        s.headline.steps == 1 ? "step" : "steps; medians leave out warm-up step 0", s.headline.tokens_per_s,
        s.headline.step_ms, double(s.headline.a2a_bytes_per_step) / 1048576.0,
        double(s.headline.allreduce_bytes_per_step) / 1048576.0,
        // A trace without memory samples has no peak (it read "peak memory 0.0 MiB").
        m.memory.empty() ? "no memory samples"
                         : strfmt("peak memory %.1f MiB%s", double(s.headline.peak_memory_bytes) / 1048576.0,
                                  cpu_process_memory(m) ? " (CPU ranks: the process's peak resident memory, libtorch "
                                                          "included; --plan counts tensors only)"
                                                        : "")
                               .c_str());
  return o;
}

// Per rank and step (ms).
std::string text_steps(const Summary& s) {
  std::string o;
  o += "Per rank and step (ms)\n";
  o += strfmt("%5s %6s %10s %10s %10s %10s %10s %8s\n", "rank", "step", "wall", "compute", "comm", "exposed", "idle",
              "overlap");
  for (const auto& b : s.steps) {
    o += strfmt("%5d %6lld %10.3f %10.3f %10.3f %10.3f %10.3f %7.1f%%%s\n", b.rank, static_cast<long long>(b.step),
                ms(b.wall_ns), ms(b.compute_ns), ms(b.comm_ns), ms(b.exposed_comm_ns), ms(b.idle_ns),
                100.0 * b.overlap_ratio, b.gpu ? " gpu" : "");
  }
  return o;
}

// Per layer, per head range and rank skew.
std::string text_layers_heads_skew(const Summary& s) {
  std::string o;
  if (!s.layers.empty()) {
    o += "\nPer layer (ms, summed over ranks and steps)\n";
    o += strfmt("%5s %9s %9s %9s %9s %9s %9s %12s\n", "layer", "dir", "qkv", "a2a_s2h", "attn", "a2a_h2s", "out",
                "a2a MiB");
    for (const auto& l : s.layers) {
      o += strfmt("%5d %9s %9.3f %9.3f %9.3f %9.3f %9.3f %12s\n", l.layer, direction_name(l.dir), ms(l.qkv_proj_ns),
                  ms(l.a2a_seq_to_head_ns), ms(l.attention_ns), ms(l.a2a_head_to_seq_ns), ms(l.out_proj_ns),
                  mib(l.a2a_bytes_sent).c_str());
    }
  }
  if (!s.heads.empty()) {
    o += "\nPer head range (ms, summed)\n";
    o += strfmt("%9s %9s %9s %9s %7s\n", "heads", "a2a_s2h", "attn", "a2a_h2s", "ranges");
    for (const auto& h : s.heads) {
      std::string hr = std::to_string(h.head_begin) + "-" + std::to_string(h.head_end - 1);
      o += strfmt("%9s %9.3f %9.3f %9.3f %7lld\n", hr.c_str(), ms(h.a2a_seq_to_head_ns), ms(h.attention_ns),
                  ms(h.a2a_head_to_seq_ns), static_cast<long long>(h.count));
    }
  }
  if (!s.skew.empty()) {
    o += "\nRank skew (ms per step: slowest / fastest)\n";
    o += strfmt("%16s %14s %14s %7s\n", "phase", "slowest", "fastest", "ratio");
    for (const auto& k : s.skew) {
      std::string sl = strfmt("%.3f (r%d)", msd(k.slowest_ns), k.slowest_rank);
      std::string fa = strfmt("%.3f (r%d)", msd(k.fastest_ns), k.fastest_rank);
      o += strfmt("%16s %14s %14s %7.2f\n", phase_name(k.phase), sl.c_str(), fa.c_str(), k.ratio);
    }
  }
  return o;
}

// Stragglers: who arrived last at each collective, and who set each step's end.
std::string text_waiting(const Summary& s) {
  std::string o;
  if (!s.waiting.instances.empty()) {
    const WaitingAnalysis& w = s.waiting;
    o += strfmt(
        "\nStragglers: %lld collectives paired across ranks by (process group, sequence number); median "
        "arrival skew %.3f ms\n",
        static_cast<long long>(w.instances.size()), msd(w.median_skew_ns));
    o += strfmt("%5s %12s %14s %16s %18s\n", "rank", "collectives", "last arrivals", "wait caused ms",
                "wait suffered ms");
    for (const auto& r : w.ranks) {
      o += strfmt("%5d %12lld %14lld %16.3f %18.3f\n", r.rank, static_cast<long long>(r.collectives),
                  static_cast<long long>(r.last_arrivals), ms(r.wait_caused_ns), ms(r.wait_suffered_ns));
    }
    if (!w.steps.empty()) {
      o +=
          "Step end set by (last arriver at the step's last collective; * = no collective: the rank that ended last)\n";
      std::string line;
      for (const auto& st : w.steps) {
        line += strfmt(" s%lld:r%d%s", static_cast<long long>(st.step), st.rank, st.from_collective ? "" : "*");
        if (line.size() > 80) {
          o += line + "\n";
          line.clear();
        }
      }
      if (!line.empty()) o += line + "\n";
    }
  }
  return o;
}

// What was alive at each rank's measured peak, by name (the largest kPeakTextRows of each rank's
// peak table, as `ulysses-run --plan` prints the planned one).
constexpr size_t kPeakTextRows = 15;
std::string text_peak_tensors(const Summary& s) {
  std::string o;
  for (const auto& mr : s.memory_by_rank) {
    if (mr.at_peak_tensors.empty()) continue;
    o += strfmt("\nAlive at rank %d's measured peak (step %lld, %s MiB), largest first\n", mr.rank,
                static_cast<long long>(mr.peak_step), mib(mr.peak_bytes).c_str());
    o += strfmt("%10s  %-13s  %-28s  %s\n", "MiB", "category", "dtype (shape)", "name");
    for (size_t i = 0; i < mr.at_peak_tensors.size() && i < kPeakTextRows; ++i) {
      const PeakTensor& t = mr.at_peak_tensors[i];
      const std::string ds = t.dtype.empty() ? "-" : t.dtype + " " + t.shape;
      o += strfmt("%10s  %-13s  %-28s  %s\n", mib(t.bytes).c_str(), t.category.c_str(), ds.c_str(),
                  with_valid_utf8(t.name).c_str());
    }
    if (mr.at_peak_tensors.size() > kPeakTextRows)
      o += strfmt("%10s  (%zu more rows in summary --json)\n", "", mr.at_peak_tensors.size() - kPeakTextRows);
  }
  return o;
}

// Peak memory per phase label, and the top ranges and kernels by total time.
std::string text_memory_names(const Summary& s) {
  std::string o = text_peak_tensors(s);
  if (!s.memory.empty()) {
    o += "\nPeak memory per phase label (MiB)\n";
    o += strfmt("%20s %5s %10s %10s %10s\n", "label", "rank", "allocated", "reserved", "peak");
    for (const auto& p : s.memory) {
      o += strfmt("%20s %5d %10s %10s %10s\n", p.label.c_str(), p.rank, mib(p.max_allocated).c_str(),
                  mib(p.max_reserved).c_str(), mib(p.max_peak).c_str());
    }
  }
  if (!s.names.empty()) {
    o += "\nTop ranges and kernels by total time\n";
    o += strfmt("%-5s %10s %12s %10s  %s\n", "kind", "count", "total ms", "max ms", "name");
    for (const auto& n : s.names) {
      std::string name = n.name.size() > 80 ? n.name.substr(0, 77) + "..." : n.name;
      for (char& c : name)  // one row per name: a newline or tab in a name would break the table
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      o += strfmt("%-5s %10lld %12.3f %10.3f  %s\n", n.is_kernel ? "gpu" : "nvtx", static_cast<long long>(n.count),
                  ms(n.total_ns), ms(n.max_ns), name.c_str());
    }
  }
  return o;
}

// data.kind = "documents": every row of TraceModel::documents (document_shard.hpp).
void json_documents(nlohmann::json& j, const TraceModel& m) {
  if (m.documents.empty()) return;
  nlohmann::json a = nlohmann::json::array();
  for (const DocumentShard& d : m.documents)
    a.push_back({{"step", d.step},
                 {"sequence", d.sequence},
                 {"packed", d.packed},
                 {"rank", d.rank},
                 {"piece", d.piece},
                 {"shard", {d.shard_begin, d.shard_end}},
                 {"document", d.document},
                 {"doc_tokens", d.doc_tokens},
                 {"doc_offset", d.doc_offset},
                 {"range", {d.begin, d.end}},
                 {"held", {d.held_begin(), d.held_end()}}});
  j["documents"] = std::move(a);
}

// The first recorded step's documents, one line per (sequence, rank, piece).
std::string text_documents(const TraceModel& m) {
  if (m.documents.empty()) return {};
  const int64_t step = m.documents.front().step;
  std::set<int64_t> steps;
  for (const auto& d : m.documents) steps.insert(d.step);
  std::string o = strfmt(
      "\nDocuments per rank shard, step %lld (%zu step(s) recorded; --json has them all). Positions in the packed "
      "sequence; \"holds\": the part in this rank's shard\n",
      static_cast<long long>(step), steps.size());
  o += strfmt("%5s %7s %5s %5s %13s  %s\n", "seq", "packed", "rank", "piece", "shard", "documents");
  for (size_t i = 0; i < m.documents.size() && m.documents[i].step == step;) {
    const DocumentShard& h = m.documents[i];
    std::string docs;
    size_t k = i;
    for (; k < m.documents.size() && m.documents[k].step == step && m.documents[k].sequence == h.sequence &&
           m.documents[k].rank == h.rank && m.documents[k].piece == h.piece;
         ++k)
      docs += (k == i ? "" : "; ") + document_part_text(m.documents[k]);
    const std::string shard =
        strfmt("[%lld, %lld)", static_cast<long long>(h.shard_begin), static_cast<long long>(h.shard_end));
    o += strfmt("%5lld %7lld %5d %5d %13s  %s\n", static_cast<long long>(h.sequence), static_cast<long long>(h.packed),
                h.rank, h.piece, shard.c_str(), docs.c_str());
    i = k;
  }
  return o;
}

}  // namespace

nlohmann::json summary_to_json(const TraceModel& m, const Summary& s) {
  nlohmann::json j;
  json_run_part(j, m, s);
  json_steps_ranks(j, s);
  json_layers_heads(j, s);
  json_skew_memory_names(j, s);
  json_waiting(j, s);
  json_documents(j, m);
  return j;
}

// One document part as the text table and the studio write it: "#7 [20, 50) 30 tok, holds
// [32, 50)"; a part of a cut document says where it starts in the document ("#9 @128"); padding
// is "padding [60, 64)".
std::string document_part_text(const DocumentShard& d) {
  std::string o = d.document < 0
                      ? std::string("padding")
                      : "#" + std::to_string(d.document) +
                            (d.doc_offset > 0 || d.end - d.begin < d.doc_tokens
                                 ? " @" + std::to_string(d.doc_offset) + " of " + std::to_string(d.doc_tokens) + " tok"
                                 : "");
  o += strfmt(" [%lld, %lld)", static_cast<long long>(d.begin), static_cast<long long>(d.end));
  if (d.held_begin() != d.begin || d.held_end() != d.end)
    o += strfmt(" holds [%lld, %lld)", static_cast<long long>(d.held_begin()), static_cast<long long>(d.held_end()));
  return o;
}

std::string summary_to_text(const TraceModel& m, const Summary& s) {
  std::string o = text_header(m, s);
  o += text_steps(s);
  o += text_layers_heads_skew(s);
  o += text_waiting(s);
  o += text_memory_names(s);
  o += text_documents(m);
  return o;
}

}  // namespace ulysses::prof
