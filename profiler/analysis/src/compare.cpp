// Run comparison: two analysed traces as one table (headline, per phase, per layer) with
// B - A and B / A. Definitions in compare.hpp.
#include "ulysses/profiler/compare.hpp"
#include "ulysses/common/step_stats.hpp"
#include "ulysses/profiler/strfmt.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace ulysses::prof {

const char* compare_section_name(CompareSection s) {
  switch (s) {
    case CompareSection::Phase:
      return "phase";
    case CompareSection::Layer:
      return "layer";
    default:
      return "headline";
  }
}

int64_t Comparison::flagged() const {
  return static_cast<int64_t>(std::count_if(rows.begin(), rows.end(), [](const CompareRow& r) { return r.flagged; }));
}

const CompareRow* Comparison::find(CompareSection s, const std::string& key) const {
  for (const auto& r : rows)
    if (r.section == s && r.key == key) return &r;
  return nullptr;
}

namespace {

// (layer, phase, dir): layer -1 = the phase in total.
using PhaseKey = std::tuple<int32_t, int, int>;

// One run reduced to medians over its counted steps.
struct Side {
  CompareSide info;
  std::map<int64_t, int64_t> ranks_in_step;  // step -> ranks that ran it
  std::vector<int64_t> counted;              // steps the medians are over
  std::map<std::string, double> headline;    // present headline rows
  std::map<PhaseKey, double> phases;         // present phase / layer rows
};

// Median over the counted steps of (sum over ranks in that step / ranks in that step).
double median_per_step(const Side& s, const std::map<int64_t, double>& sum_by_step) {
  std::vector<double> v;
  v.reserve(s.counted.size());
  for (int64_t step : s.counted) {
    auto it = sum_by_step.find(step);
    const double sum = it == sum_by_step.end() ? 0.0 : it->second;
    v.push_back(sum / static_cast<double>(std::max<int64_t>(1, s.ranks_in_step.at(step))));
  }
  return true_median(std::move(v));
}

Side reduce(const TraceModel& m, const Summary& s) {
  Side d;
  d.info.source = m.source;
  d.info.world_size = s.world_size;
  for (const auto& b : s.steps) d.ranks_in_step[b.step] += 1;
  d.info.steps = static_cast<int64_t>(d.ranks_in_step.size());
  d.info.no_step_records = d.ranks_in_step.size() == 1 && d.ranks_in_step.begin()->first < 0;
  const bool skip_warmup =
      std::any_of(d.ranks_in_step.begin(), d.ranks_in_step.end(), [](const auto& kv) { return kv.first != 0; });
  for (const auto& kv : d.ranks_in_step)
    if (!(skip_warmup && kv.first == 0)) d.counted.push_back(kv.first);
  d.info.counted = static_cast<int64_t>(d.counted.size());

  if (!d.counted.empty()) {
    std::map<int64_t, double> wall, compute, comm, exposed, idle;
    for (const auto& b : s.steps) {
      wall[b.step] += static_cast<double>(b.wall_ns);
      compute[b.step] += static_cast<double>(b.compute_ns);
      comm[b.step] += static_cast<double>(b.comm_ns);
      exposed[b.step] += static_cast<double>(b.exposed_comm_ns);
      idle[b.step] += static_cast<double>(b.idle_ns);
    }
    d.headline["step_ns"] = median_per_step(d, wall);
    d.headline["compute_ns"] = median_per_step(d, compute);
    d.headline["comm_ns"] = median_per_step(d, comm);
    d.headline["exposed_comm_ns"] = median_per_step(d, exposed);
    d.headline["idle_ns"] = median_per_step(d, idle);
    if (s.overall.comm_ns > 0) d.headline["overlap_ratio"] = s.overall.ratio;
    d.headline["a2a_bytes_per_step"] = static_cast<double>(s.headline.a2a_bytes_per_step);
    d.headline["allreduce_bytes_per_step"] = static_cast<double>(s.headline.allreduce_bytes_per_step);
  }
  if (s.headline.tokens_per_s > 0) d.headline["tokens_per_s"] = s.headline.tokens_per_s;
  if (s.headline.peak_memory_bytes > 0)
    d.headline["peak_memory_bytes"] = static_cast<double>(s.headline.peak_memory_bytes);

  // Phase and layer times of the window's steps (a trace without step records: one step -1).
  const bool whole_trace = d.ranks_in_step.size() == 1 && d.ranks_in_step.begin()->first < 0;
  std::map<PhaseKey, std::map<int64_t, double>> sums;
  for (const auto& t : phase_times(m)) {
    const int64_t step = whole_trace ? -1 : t.step;
    if (!d.ranks_in_step.count(step)) continue;
    sums[{t.layer, static_cast<int>(t.phase), static_cast<int>(t.dir)}][step] += static_cast<double>(t.ns);
  }
  for (const auto& [k, by_step] : sums) d.phases[k] = d.counted.empty() ? 0.0 : median_per_step(d, by_step);
  return d;
}

CompareRow make_row(CompareSection sec, std::string key, std::string unit, bool has_a, double a, bool has_b, double b,
                    double threshold) {
  CompareRow r;
  r.section = sec;
  r.key = std::move(key);
  r.unit = std::move(unit);
  r.has_a = has_a;
  r.has_b = has_b;
  r.a = has_a ? a : 0.0;
  r.b = has_b ? b : 0.0;
  if (has_a && has_b) {
    r.diff = b - a;
    r.has_ratio = a != 0;
    r.ratio = r.has_ratio ? b / a : 0.0;
    r.flagged = r.has_ratio ? std::fabs(r.ratio - 1.0) > threshold : b != 0;
  }
  return r;
}

std::string phase_key(Phase p, Direction d) {
  std::string k = phase_name(p);
  if (d != Direction::None) k += std::string(" ") + direction_name(d);
  return k;
}

struct HeadlineDef {
  const char* key;
  const char* unit;
  const char* label;  // text rendering
};
constexpr HeadlineDef kHeadline[] = {
    {"step_ns", "ns", "step ms"},
    {"compute_ns", "ns", "compute ms"},
    {"comm_ns", "ns", "comm ms"},
    {"exposed_comm_ns", "ns", "exposed comm ms"},
    {"idle_ns", "ns", "idle ms"},
    {"overlap_ratio", "ratio", "overlap ratio"},
    {"tokens_per_s", "tokens/s", "tokens/s"},
    {"a2a_bytes_per_step", "bytes", "all-to-all MiB/step"},
    {"allreduce_bytes_per_step", "bytes", "all-reduce MiB/step"},
    {"peak_memory_bytes", "bytes", "peak memory MiB"},
};

}  // namespace

Comparison compare_summaries(const TraceModel& a, const Summary& sa, const TraceModel& b, const Summary& sb,
                             const CompareOptions& o) {
  const Side da = reduce(a, sa), db = reduce(b, sb);
  Comparison c;
  c.a = da.info;
  c.b = db.info;
  c.threshold = o.threshold;
  for (const auto& h : kHeadline) {
    auto ia = da.headline.find(h.key), ib = db.headline.find(h.key);
    if (ia == da.headline.end() && ib == db.headline.end()) continue;
    c.rows.push_back(make_row(CompareSection::Headline, h.key, h.unit, ia != da.headline.end(),
                              ia != da.headline.end() ? ia->second : 0.0, ib != db.headline.end(),
                              ib != db.headline.end() ? ib->second : 0.0, o.threshold));
  }
  std::set<PhaseKey> keys;
  for (const auto& kv : da.phases) keys.insert(kv.first);
  for (const auto& kv : db.phases) keys.insert(kv.first);
  // Phase rows (layer -1) come first in the set's order, then layers by (layer, phase, dir).
  for (const auto& k : keys) {
    const auto [layer, p, d] = k;
    const Phase phase = static_cast<Phase>(p);
    const Direction dir = static_cast<Direction>(d);
    auto ia = da.phases.find(k), ib = db.phases.find(k);
    const bool layer_row = layer >= 0;
    std::string key = phase_key(phase, dir);
    if (layer_row) key = "layer " + std::to_string(layer) + " " + key;
    CompareRow r = make_row(layer_row ? CompareSection::Layer : CompareSection::Phase, key, "ns", ia != da.phases.end(),
                            ia != da.phases.end() ? ia->second : 0.0, ib != db.phases.end(),
                            ib != db.phases.end() ? ib->second : 0.0, o.threshold);
    r.phase = phase;
    r.dir = dir;
    r.layer = layer;
    c.rows.push_back(std::move(r));
  }
  return c;
}

std::string compare_value_text(const CompareRow& r, double v) {
  if (r.unit == "ns") return strfmt("%.3f", v / 1e6);
  if (r.unit == "bytes") return strfmt("%.3f", v / 1048576.0);
  if (r.unit == "tokens/s") return strfmt("%.0f", v);
  return strfmt("%.3f", v);
}

std::string compare_row_label(const CompareRow& r) {
  if (r.section == CompareSection::Headline) {
    for (const auto& h : kHeadline)
      if (r.key == h.key) return h.label;
  }
  return r.key + " ms";
}

namespace {

std::string side_text(const CompareSide& s) {
  if (s.no_step_records)
    return strfmt("%s (%d ranks, no step records: its times are over the whole trace)", s.source.c_str(), s.world_size);
  return strfmt("%s (%d ranks, %lld steps, medians over %lld)", s.source.c_str(), s.world_size,
                static_cast<long long>(s.steps), static_cast<long long>(s.counted));
}

}  // namespace

std::string comparison_to_text(const Comparison& c) {
  std::string o;
  o += "A: " + side_text(c.a) + "\n";
  o += "B: " + side_text(c.b) + "\n";
  if (c.a.no_step_records != c.b.no_step_records)
    o += std::string("Note: ") + (c.a.no_step_records ? "A" : "B") +
         " has no step records, so its times are totals over its whole trace and the other's are per step: the "
         "time rows do not compare (B/A is meaningless there)\n";
  o += strfmt(
      "Times: median over steps of ms per rank and step (step 0 left out when later steps exist); "
      "* = B/A off 1 by more than %g%%\n",
      100.0 * c.threshold);
  const char* titles[] = {"Headline", "Per phase", "Per layer"};
  int section = -1;
  for (const auto& r : c.rows) {
    if (static_cast<int>(r.section) != section) {
      section = static_cast<int>(r.section);
      o += strfmt("\n%s\n%-36s %12s %12s %12s %8s\n", titles[section], "", "A", "B", "B-A", "B/A");
    }
    const std::string a = r.has_a ? compare_value_text(r, r.a) : "-";
    const std::string b = r.has_b ? compare_value_text(r, r.b) : "-";
    const std::string d = r.has_a && r.has_b ? compare_value_text(r, r.diff) : "";
    const std::string q = r.has_ratio ? strfmt("%.3f", r.ratio) : "";
    o += strfmt("%-36s %12s %12s %12s %8s%s\n", compare_row_label(r).c_str(), a.c_str(), b.c_str(), d.c_str(),
                q.c_str(), r.flagged ? " *" : "");
  }
  o += strfmt("\n%lld of %zu rows differ by more than %g%%\n", static_cast<long long>(c.flagged()), c.rows.size(),
              100.0 * c.threshold);
  return o;
}

nlohmann::json comparison_to_json(const Comparison& c) {
  using nlohmann::json;
  auto side = [](const CompareSide& s) {
    return json{{"source", s.source},
                {"world_size", s.world_size},
                {"steps", s.steps},
                {"counted_steps", s.counted},
                {"step_records", !s.no_step_records}};
  };
  json j;
  j["a"] = side(c.a);
  j["b"] = side(c.b);
  j["statistic"] = "median over steps of ns per rank and step, step 0 left out when later steps exist";
  j["threshold"] = c.threshold;
  j["flagged"] = c.flagged();
  j["rows"] = json::array();
  for (const auto& r : c.rows) {
    json row = {{"section", compare_section_name(r.section)},
                {"key", r.key},
                {"unit", r.unit},
                {"a", r.has_a ? json(r.a) : json(nullptr)},
                {"b", r.has_b ? json(r.b) : json(nullptr)},
                {"diff", r.has_a && r.has_b ? json(r.diff) : json(nullptr)},
                {"ratio", r.has_ratio ? json(r.ratio) : json(nullptr)},
                {"flagged", r.flagged}};
    if (r.section != CompareSection::Headline) {
      row["phase"] = phase_name(r.phase);
      row["direction"] = direction_name(r.dir);
    }
    if (r.section == CompareSection::Layer) row["layer"] = r.layer;
    j["rows"].push_back(std::move(row));
  }
  return j;
}

}  // namespace ulysses::prof
