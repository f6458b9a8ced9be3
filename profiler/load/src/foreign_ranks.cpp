// Post-processing of foreign traces (Nsight Systems exports, PyTorch profiler JSON) once
// every file is read: final rank numbers from the hints the readers gathered, and the
// Ulysses pattern (all-to-all, attention, all-to-all) turned into the phases, layers and
// directions our own traces carry, so the per-layer tables work on DeepSpeed-Ulysses runs.
#include <algorithm>
#include <cctype>
#include <climits>
#include <numeric>
#include <regex>
#include <set>
#include <unordered_map>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/strfmt.hpp"

namespace ulysses::prof::detail {

namespace {

bool host_collective(const std::string& n) {
  return n.rfind("gloo:", 0) == 0 || n.rfind("nccl:", 0) == 0 || n.rfind("c10d::", 0) == 0 || n.rfind("mpi:", 0) == 0 ||
         n.rfind("ucc:", 0) == 0 || n == "record_param_comms";
}
bool all_to_all_name(const std::string& n) {
  return contains_ci(n, "alltoall") || contains_ci(n, "all_to_all") || contains_ci(n, "sendrecv") ||
         contains_ci(n, "send_recv");
}
bool attention_name(const std::string& n) {
  return !contains_ci(n, "nccl") && (contains_ci(n, "scaled_dot_product") || contains_ci(n, "flash") ||
                                     contains_ci(n, "fmha") || contains_ci(n, "attention") || contains_ci(n, "attn"));
}
bool backward_name(const std::string& n) { return contains_ci(n, "backward") || contains_ci(n, "bwd"); }
bool memop_name(const std::string& n) {
  return n.rfind("[CUDA mem", 0) == 0 || contains_ci(n, "memcpy") || contains_ci(n, "memset");
}

enum class Tok : uint8_t { A2A, Attn, Compute };
struct Token {
  int64_t start, end;
  Tok kind;
  int32_t index;  // into m.ranges.rows()
};

}  // namespace

int64_t rank_from_file_name(const std::string& fname) {
  static const std::regex re("rank[_-]?([0-9]+)", std::regex::icase);
  std::smatch mm;
  if (!std::regex_search(fname, mm, re)) return -1;
  const std::string digits = mm[1].str();
  if (digits.size() > 9) return -1;  // std::stoll threw on 99999999999999999999
  const int64_t r = std::stoll(digits);
  return r <= kMaxForeignRank ? r : -1;
}

void renumber_foreign_ranks(Builder& b) {
  auto& f = b.foreign;
  if (f.empty()) return;
  TraceModel& m = b.m;
  auto distinct = [&](int64_t ForeignRank::*field) {
    std::set<int64_t> seen;
    for (const auto& r : f)
      if (r.*field < 0 || r.*field > kMaxForeignRank || !seen.insert(r.*field).second) return false;
    return true;
  };
  std::vector<int64_t> final_rank(f.size());
  if (distinct(&ForeignRank::hint)) {
    for (size_t i = 0; i < f.size(); ++i) final_rank[i] = f[i].hint;
  } else if (distinct(&ForeignRank::name_hint)) {
    for (size_t i = 0; i < f.size(); ++i) final_rank[i] = f[i].name_hint;
  } else {
    bool some = false;
    for (const auto& r : f) some |= r.hint >= 0 || r.name_hint >= 0;
    if (some)
      m.notes.push_back("rank numbers in the trace(s) are incomplete, repeated or out of range (above " +
                        std::to_string(kMaxForeignRank) + "): ranks numbered by file, device, pid");
    std::vector<size_t> order(f.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return std::tie(f[x].file_index, f[x].device, f[x].pid) < std::tie(f[y].file_index, f[y].device, f[y].pid);
    });
    for (size_t k = 0; k < order.size(); ++k) final_rank[order[k]] = static_cast<int64_t>(k);
  }
  std::unordered_map<int32_t, int32_t> to;
  for (size_t i = 0; i < f.size(); ++i) to[f[i].provisional] = static_cast<int32_t>(final_rank[i]);
  auto map = [&](int32_t& r) {
    auto it = to.find(r);
    if (it != to.end()) r = it->second;
  };
  for (auto& r : m.ranks) map(r.rank);
  for (auto& r : m.ranges.rows()) map(r.rank);
  for (auto& s : b.sources) map(s.rank);
  for (auto& c : m.runtime) map(c.rank);
  for (auto& s : m.steps) map(s.rank);
  for (auto& p : m.memory) map(p.rank);
  for (auto& fr : f) map(fr.provisional);
}

namespace {

const std::string& range_name(const TraceModel& m, const TraceRange& r) {
  return m.strings[static_cast<size_t>(r.name_id)];
}

// Token streams per rank: GPU ranks use kernels, CPU ranks host ranges. Every host collective
// is given communication on the way (the Ulysses ones are relabelled later).
std::map<int32_t, std::vector<Token>> rank_tokens(TraceModel& m) {
  const size_t n = m.ranges.rows().size();
  std::vector<uint8_t> has_child(n, 0);
  for (const auto& r : m.ranges.rows())
    if (r.parent >= 0) has_child[static_cast<size_t>(r.parent)] = 1;
  std::map<int32_t, bool> gpu;
  for (const auto& l : m.lanes) {
    gpu.emplace(l.rank, false);
    if (l.kind == LaneKind::CudaStream && l.count > 0) gpu[l.rank] = true;
  }
  auto name = [&](const TraceRange& r) -> const std::string& { return range_name(m, r); };
  auto parent_name = [&](int32_t p) -> const std::string& { return name(m.ranges.rows()[static_cast<size_t>(p)]); };
  auto parent_of = [&](int32_t p) { return m.ranges.rows()[static_cast<size_t>(p)].parent; };
  std::map<int32_t, std::vector<Token>> toks;
  for (size_t i = 0; i < n; ++i) {
    TraceRange& r = m.ranges.rows()[i];
    const std::string& nm = name(r);
    const bool rank_gpu = gpu[r.rank];
    if (!r.is_kernel && host_collective(nm)) {
      // Every host collective counts as communication; the Ulysses ones are relabelled below.
      bool nested = r.parent >= 0 && host_collective(parent_name(r.parent));
      if (r.phase == Phase::Other) r.phase = Phase::GradAllReduce;
      if (!rank_gpu && !nested && all_to_all_name(nm))
        toks[r.rank].push_back({r.start_ns, r.end_ns, Tok::A2A, static_cast<int32_t>(i)});
      continue;
    }
    if (r.is_kernel != rank_gpu) continue;
    if (r.is_kernel) {
      if (contains_ci(nm, "nccl")) {
        if (all_to_all_name(nm)) toks[r.rank].push_back({r.start_ns, r.end_ns, Tok::A2A, static_cast<int32_t>(i)});
        continue;
      }
      if (memop_name(nm)) continue;
      toks[r.rank].push_back(
          {r.start_ns, r.end_ns, attention_name(nm) ? Tok::Attn : Tok::Compute, static_cast<int32_t>(i)});
      continue;
    }
    // CPU rank: outermost attention op, or a compute leaf.
    if (attention_name(nm)) {
      bool outer = true;
      for (int32_t p = r.parent; p >= 0 && outer; p = parent_of(p)) outer = !attention_name(parent_name(p));
      if (outer) toks[r.rank].push_back({r.start_ns, r.end_ns, Tok::Attn, static_cast<int32_t>(i)});
    } else if (!has_child[i] && r.phase != Phase::Step) {
      bool in_attention = false;
      for (int32_t p = r.parent; p >= 0 && !in_attention; p = parent_of(p))
        in_attention = attention_name(parent_name(p));
      if (!in_attention) toks[r.rank].push_back({r.start_ns, r.end_ns, Tok::Compute, static_cast<int32_t>(i)});
    }
  }
  return toks;
}

// Attention blocks: maximal runs of attention tokens with no all-to-all in between
// ([first, last] token index each).
std::vector<std::pair<size_t, size_t>> attention_blocks(const std::vector<Token>& t) {
  std::vector<std::pair<size_t, size_t>> blocks;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].kind != Tok::Attn) continue;
    if (!blocks.empty()) {
      bool a2a_between = false;
      for (size_t k = blocks.back().second + 1; k < i && !a2a_between; ++k) a2a_between = t[k].kind == Tok::A2A;
      if (!a2a_between) {
        blocks.back().second = i;
        continue;
      }
    }
    blocks.emplace_back(i, i);
  }
  return blocks;
}

// The all-to-alls around each attention block: pre[k] precede block k (seq->head), post[k]
// follow it (head->seq).
struct BlockAllToAlls {
  std::vector<std::vector<size_t>> pre, post;
};

// Compute time starting in [x, y): splits the all-to-alls between two attentions into
// the head->seq of the first and the seq->head of the next at the largest compute gap.
BlockAllToAlls split_all_to_alls(const std::vector<Token>& t, const std::vector<std::pair<size_t, size_t>>& blocks) {
  std::vector<int64_t> starts(t.size()), prefix(t.size() + 1, 0);
  for (size_t k = 0; k < t.size(); ++k) {
    starts[k] = t[k].start;
    prefix[k + 1] = prefix[k] + (t[k].kind == Tok::Compute ? t[k].end - t[k].start : 0);
  }
  auto compute_in = [&](int64_t x, int64_t y) {
    auto at = [&](int64_t v) { return std::lower_bound(starts.begin(), starts.end(), v) - starts.begin(); };
    return y <= x ? int64_t{0} : prefix[static_cast<size_t>(at(y))] - prefix[static_cast<size_t>(at(x))];
  };
  BlockAllToAlls s;
  s.pre.resize(blocks.size());
  s.post.resize(blocks.size());
  for (size_t g = 0; g <= blocks.size(); ++g) {
    const size_t lo = g == 0 ? 0 : blocks[g - 1].second + 1;
    const size_t hi = g == blocks.size() ? t.size() : blocks[g].first;
    std::vector<size_t> a;
    for (size_t k = lo; k < hi; ++k)
      if (t[k].kind == Tok::A2A) a.push_back(k);
    if (a.empty()) continue;
    // Split position p: a[0..p) follow the previous block, a[p..) precede the next.
    const int64_t left = g == 0 ? INT64_MIN : t[blocks[g - 1].second].end;
    const int64_t right = g == blocks.size() ? INT64_MAX : t[blocks[g].first].start;
    size_t best_p = g == 0 ? 0 : g == blocks.size() ? a.size() : 0;
    if (g > 0 && g < blocks.size()) {
      int64_t best = -1;
      for (size_t p = 0; p <= a.size(); ++p) {
        const int64_t x = p == 0 ? left : t[a[p - 1]].end;
        const int64_t y = p == a.size() ? right : t[a[p]].start;
        const int64_t c = compute_in(x, y);
        if (c > best) best = c, best_p = p;
      }
    } else if (g == 0) {
      // Before the first attention: the run after the last big compute gap precedes it.
      int64_t best = -1;
      for (size_t p = 0; p < a.size(); ++p) {
        const int64_t c = compute_in(p == 0 ? INT64_MIN : t[a[p - 1]].end, t[a[p]].start);
        if (c > best) best = c, best_p = p;
      }
    } else {
      int64_t best = -1;
      for (size_t p = 1; p <= a.size(); ++p) {
        const int64_t c = compute_in(t[a[p - 1]].end, p == a.size() ? INT64_MAX : t[a[p]].start);
        if (c > best) best = c, best_p = p;
      }
    }
    if (g > 0)
      for (size_t p = 0; p < best_p; ++p) s.post[g - 1].push_back(a[p]);
    if (g < blocks.size())
      for (size_t p = best_p; p < a.size(); ++p) s.pre[g].push_back(a[p]);
  }
  return s;
}

// Attentions labelled with the Ulysses pattern, and those of them past kMaxTraceLayers.
struct PatternCounts {
  int64_t labelled = 0, past_layers = 0;
};

// Layers: forward blocks 0, 1, ... in order; backward blocks counted down. Each block with
// all-to-alls before and after is labelled: attention, seq->head, head->seq, its layer,
// direction and step.
void label_layers(TraceModel& m, const std::vector<Token>& t, const std::vector<std::pair<size_t, size_t>>& blocks,
                  const BlockAllToAlls& s, int64_t step, PatternCounts& counts) {
  std::vector<bool> bwd(blocks.size());
  int n_bwd = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    bwd[k] = backward_name(range_name(m, m.ranges.rows()[static_cast<size_t>(t[blocks[k].first].index)]));
    n_bwd += bwd[k];
  }
  int fwd_seen = 0, bwd_seen = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    int32_t layer = bwd[k] ? n_bwd - 1 - bwd_seen++ : fwd_seen++;
    if (s.pre[k].empty() || s.post[k].empty()) continue;  // not the Ulysses pattern
    if (layer >= kMaxTraceLayers) {                       // no model has that many: labelled, but without a layer
      layer = -1;
      ++counts.past_layers;
    }
    const Direction dir = bwd[k] ? Direction::Backward : Direction::Forward;
    auto label = [&](size_t ti, Phase p) {
      TraceRange& r = m.ranges.rows()[static_cast<size_t>(t[ti].index)];
      r.phase = p;
      r.layer = static_cast<int16_t>(layer);
      r.dir = dir;
      r.step = static_cast<int32_t>(step);
    };
    for (size_t ti = blocks[k].first; ti <= blocks[k].second; ++ti)
      if (t[ti].kind == Tok::Attn) label(ti, Phase::Attention);
    for (size_t ti : s.pre[k]) label(ti, Phase::A2ASeqToHead);
    for (size_t ti : s.post[k]) label(ti, Phase::A2AHeadToSeq);
    ++counts.labelled;
  }
}

}  // namespace

void label_foreign_phases(TraceModel& m) {
  if (m.format == "ulysses") return;
  std::map<int32_t, std::vector<Token>> toks = rank_tokens(m);
  PatternCounts counts;
  for (auto& [rank, v] : toks) {
    std::sort(v.begin(), v.end(), [](const Token& x, const Token& y) { return x.start < y.start; });
    // Step windows of this rank (ProfilerStep#N), else the whole trace.
    std::vector<std::pair<int64_t, int64_t>> windows;
    std::vector<int64_t> window_step;
    for (const auto& s : m.steps)
      if (s.rank == rank) {
        windows.emplace_back(s.start_ns, s.end_ns);
        window_step.push_back(s.step);
      }
    if (windows.empty()) {
      windows.emplace_back(INT64_MIN, INT64_MAX);
      window_step.push_back(-1);
    }
    for (size_t w = 0; w < windows.size(); ++w) {
      std::vector<Token> t;
      for (const auto& x : v)
        if (x.start >= windows[w].first && x.start < windows[w].second) t.push_back(x);
      const auto blocks = attention_blocks(t);
      if (blocks.empty()) continue;
      label_layers(m, t, blocks, split_all_to_alls(t, blocks), window_step[w], counts);
    }
  }
  if (counts.labelled > 0)
    m.notes.push_back("Ulysses pattern found: " + std::to_string(counts.labelled) +
                      " attention(s) with an all-to-all before and after, labelled seq->head / head->seq by layer");
  if (counts.past_layers > 0)
    m.notes.push_back(std::to_string(counts.past_layers) + " of them past layer " +
                      std::to_string(kMaxTraceLayers - 1) + " of their step: labelled without a layer");
}

}  // namespace ulysses::prof::detail
