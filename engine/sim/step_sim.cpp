// Costs of ranges and collectives, and the replay of a step program (see step_sim.hpp).
#include "step_sim.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "documents_manifest.hpp"

namespace ulysses::sim {

using prof::Direction;
using prof::Phase;

StepShape StepShape::of(const RunConfig& cfg) {
  StepShape s;
  s.B = cfg.train.micro_batch_size;
  s.N = cfg.train.seq_length;
  s.P = cfg.parallel.sp_size;
  s.R = cfg.parallel.ring_size;
  s.dp = cfg.parallel.dp_size;
  s.world = cfg.parallel.world_size();
  s.n = s.N / std::max<int64_t>(1, s.P * s.R);
  s.d = cfg.model.hidden_size;
  s.H = cfg.model.num_attention_heads;
  s.Hkv = cfg.model.num_key_value_heads;
  s.dh = cfg.model.head_dim();
  s.F = cfg.model.intermediate_size;
  s.V = cfg.model.vocab_size;
  s.L = cfg.model.num_hidden_layers;
  s.params = cfg.model.num_parameters();
  s.zero_stage = cfg.train.zero_stage;
  s.bf16 = cfg.train.dtype == "bfloat16";
  s.elem = s.bf16 ? 2 : 4;
  s.attention_fraction = documents_attention_fraction(cfg);
  s.offload = cfg.train.offload_activations && cfg.train.activation_checkpointing == "layer";
  return s;
}

namespace {

std::string kind_of(const Op& op, bool outer) {
  const Phase ph = op.info.phase;
  if (ph == Phase::Step || ph == Phase::Backward || ph == Phase::Optimizer) return prof::phase_name(ph);
  std::string k = prof::phase_name(ph);
  k += op.info.dir == Direction::Backward ? "_bwd" : "_fwd";
  if (outer) k += "_outer";
  return k;
}

}  // namespace

Work nominal_work(const Op& op, const StepShape& s, bool outer) {
  Work w;
  w.kind = kind_of(op, outer);
  const double B = double(s.B), n = double(s.n), d = double(s.d), H = double(s.H), Hk = double(s.Hkv),
               dh = double(s.dh), F = double(s.F), V = double(s.V), L = double(s.L), e = s.elem;
  const double m = op.info.dir == Direction::Backward ? 2.0 : 1.0;  // a backward GEMM is two
  switch (op.info.phase) {
    case Phase::Embedding:
      w.bytes = 2 * B * n * d * e;
      break;
    case Phase::QkvProj:
      w.flops = m * 2 * B * n * d * (H + 2 * Hk) * dh;
      w.bytes = m * (d * (H + 2 * Hk) * dh * e + B * n * (d + (H + 2 * Hk) * dh) * e) + 4 * B * n * d * e;
      break;
    case Phase::OutProj:
      w.flops = m * 2 * B * n * H * dh * d;
      w.bytes = m * (H * dh * d * e + B * n * (H * dh + d) * e);
      break;
    case Phase::Mlp:
      if (outer) break;  // TiledMLP: the tiles carry it
      w.flops = m * 6 * B * n * d * F;
      w.bytes = m * (3 * d * F * e + B * n * (2 * d + 3 * F) * e);
      break;
    case Phase::Attention: {
      const double tokens = double(s.N) / double(std::max<int64_t>(1, s.R));  // after the all-to-all
      if (outer) {  // the all-to-alls' packing and unpacking around the chunks
        w.bytes = 3 * B * n * (H + 2 * Hk) * dh * e;
        break;
      }
      const double local = H / double(std::max<int64_t>(1, s.P));
      const double span = op.info.head_end - op.info.head_begin;
      const double heads = op.info.head_begin >= 0 && span > 0 && span <= local ? span : local;
      // causal: 4 N^2 dh per head halved, this rank's share of the ring's N^2; backward 2.5x
      // (flash); packed documents: the share of pairs the document mask keeps
      const double N = double(s.N);
      const double per_head = 2 * B * N * N * dh / double(std::max<int64_t>(1, s.R)) * s.attention_fraction;
      w.flops = heads * per_head * (op.info.dir == Direction::Backward ? 2.5 : 1.0);
      w.bytes = 4 * B * tokens * heads * dh * e * m;
      break;
    }
    case Phase::Norm:
      w.bytes = m * 3 * B * n * d * e;
      break;
    case Phase::LmHead:
      w.flops = m * 2 * B * n * d * V;
      w.bytes = m * (d * V * e + B * n * (d + V) * e);
      break;
    case Phase::Loss:
      w.flops = 5 * B * n * V;
      w.bytes = m * 3 * B * n * V * 4;
      break;
    case Phase::Optimizer: {
      const double shard = double(s.params) / double(s.zero_stage >= 1 ? std::max<int64_t>(1, s.world) : 1);
      w.flops = 12 * shard;
      w.bytes = 32 * shard;  // fp32 weight, gradient, m, v read; weight, m, v written
      break;
    }
    case Phase::Backward:  // elementwise backward outside the traced ranges (norms, residuals, RoPE, SiLU)
      w.bytes = 8 * L * B * n * d * e;
      break;
    case Phase::Step:  // the same in the forward, the loss reduction, the batch
      w.bytes = 6 * L * B * n * d * e;
      break;
    default:
      break;
  }
  return w;
}

CollectiveCost collective_cost(const Op& op, const StepShape& s, const Hardware& hw) {
  CollectiveCost c;
  const int64_t gpn = std::max<int64_t>(1, hw.gpus_per_node);
  switch (op.info.phase) {
    case Phase::A2ASeqToHead:
    case Phase::A2AHeadToSeq:
      c.group = "sp";
      // One latency, not P - 1: the P - 1 pairwise exchanges are posted together (Gloo's and
      // NCCL's all-to-all), unlike a ring all-reduce's 2 (W - 1) dependent steps. A latency
      // fitted at sp 2 (bench_whatif) scaled by P - 1 tripled sp 4's exchanges.
      c.steps = 1;
      c.network = s.P > gpn;
      break;
    case Phase::RingStep:
      c.group = op.lane == prof::Tracer::kRingGradLane ? "ring_grad" : "ring";
      c.steps = 1;
      c.network = s.P * s.R > gpn;
      break;
    default: {
      c.group = "world";
      const int64_t W1 = std::max<int64_t>(0, s.world - 1);
      const bool gather = op.info.dir == Direction::None;
      const bool scatter = op.lane == prof::Tracer::kZeroReduceLane || (op.lane == 0 && s.zero_stage >= 2);
      c.steps = gather || scatter ? W1 : 2 * W1;
      c.network = s.world > gpn;
      break;
    }
  }
  return c;
}

double compute_seconds(const Work& w, const StepShape& s, const Hardware& hw) {
  if (w.flops <= 0 && w.bytes <= 0) return 0;
  double peak = s.bf16 ? hw.peak_bf16 : hw.peak_fp32, bw = hw.memory_bandwidth;
  if (hw.shared_compute) {  // the node's cores, shared by the ranks on it
    // ... and by the machine's other runnable processes (background_load): fair shares of the cores
    const double share = double(std::max<int64_t>(1, std::min(s.world, hw.gpus_per_node))) + hw.background_load;
    peak /= share;
    bw /= share;
  }
  const auto mem = hw.efficiency.find("memory");
  const double mem_eff = mem == hw.efficiency.end() ? 1.0 : mem->second;
  const double roof = std::max(w.flops / peak, w.bytes / (bw * mem_eff));
  return hw.overhead_s + roof / hw.efficiency_of(w.kind);
}

double comm_seconds(const Op& op, const StepShape& s, const Hardware& hw) {
  const CollectiveCost c = collective_cost(op, s, hw);
  const Link& l = c.network ? hw.network : hw.node;
  const double bytes = double(std::max(op.info.bytes_sent, op.info.bytes_recv));
  if (bytes <= 0 && c.steps == 0) return 0;
  // A calibrated description may scale a group's collectives ("comm_sp", "comm_world"); only
  // an exact key counts (the compute kinds' fallbacks do not apply to links).
  const auto g = hw.efficiency.find("comm_" + c.group);
  const double eff = g == hw.efficiency.end() ? 1.0 : g->second;
  return (double(c.steps) * l.latency + bytes / (l.bandwidth * l.efficiency)) / eff;
}

std::vector<double> own_seconds(const StepProgram& prog, const StepShape& s, const Hardware& hw) {
  const size_t n = prog.ops.size();
  std::vector<int32_t> same_children(n, 0), leaves(n, 0), top(n, -1);
  auto same_phase_parent = [&](size_t i) {
    const Op& o = prog.ops[i];
    return o.parent >= 0 && !prog.ops[static_cast<size_t>(o.parent)].comm &&
           prog.ops[static_cast<size_t>(o.parent)].info.phase == o.info.phase;
  };
  for (size_t i = 0; i < n; ++i)
    if (!prog.ops[i].comm && same_phase_parent(i)) ++same_children[static_cast<size_t>(prog.ops[i].parent)];
  for (size_t i = 0; i < n; ++i) {
    if (prog.ops[i].comm || same_children[i] > 0) continue;
    size_t t = i;
    while (same_phase_parent(t)) t = static_cast<size_t>(prog.ops[t].parent);
    top[i] = static_cast<int32_t>(t);
    ++leaves[t];
  }
  std::vector<double> own(n, 0);
  // A phase whose backward runs inside autograd without a range of its own (attention at sp 1,
  // where no Ulysses function pushes one): its backward work goes to the backward ranges.
  std::map<int, int64_t> fwd_count, bwd_count;
  std::vector<size_t> backward_ops;
  for (size_t i = 0; i < n; ++i) {
    const Op& o = prog.ops[i];
    if (o.comm || same_phase_parent(i)) continue;
    if (o.info.phase == Phase::Backward) backward_ops.push_back(i);
    if (o.info.layer < 0 && o.info.phase != Phase::LmHead) continue;
    if (o.info.dir == Direction::Forward) ++fwd_count[static_cast<int>(o.info.phase)];
    if (o.info.dir == Direction::Backward) ++bwd_count[static_cast<int>(o.info.phase)];
  }
  double unranged = 0;
  for (const auto& [ph, f] : fwd_count) {
    const int64_t missing = f - bwd_count[ph];
    if (missing <= 0 || prof::phase_is_comm(static_cast<Phase>(ph))) continue;
    Op b;
    b.info.phase = static_cast<Phase>(ph);
    b.info.dir = Direction::Backward;
    unranged += double(missing) * compute_seconds(nominal_work(b, s, false), s, hw);
  }
  for (size_t i : backward_ops) own[i] += unranged / double(backward_ops.size());
  for (size_t i = 0; i < n; ++i) {
    const Op& o = prog.ops[i];
    if (o.comm) {
      own[i] = comm_seconds(o, s, hw);
    } else if (same_children[i] > 0) {
      own[i] += compute_seconds(nominal_work(o, s, true), s, hw);
    } else {
      const auto t = static_cast<size_t>(top[i]);
      Work w = nominal_work(prog.ops[t], s, false);
      w.flops /= leaves[t];
      w.bytes /= leaves[t];
      w.kind = nominal_work(o, s, false).kind;
      own[i] += compute_seconds(w, s, hw);
    }
  }
  return own;
}

bool is_slow_rank(int64_t r, const StepShape& s) { return s.P > 1 ? r % s.P == s.P - 1 : r == s.world - 1; }

double slow_share(const StepShape& s) {
  return s.P > 1 ? 1.0 / double(s.P) : 1.0 / double(std::max<int64_t>(1, s.world));
}

namespace {

using A2AKey = std::tuple<int, int, int32_t, int32_t>;  // phase, dir, layer, chunk

// A collective's group has a slowest member (rank skew) when it has more than one member.
bool mixed_group(const std::string& g, const StepShape& s) {
  if (g == "sp") return s.P > 1;
  if (g == "ring" || g == "ring_grad") return s.R > 1;
  return s.world > 1;
}

// The replay (step_sim.hpp): one compute-stream clock per rank class (0 the typical rank, 1 the
// slowest member when hw.rank_skew > 0), the groups' streams, the links' transfers in flight
// and the offload copies, advanced point by point in program order.
class Replay {
 public:
  Replay(const StepProgram& prog, const StepShape& s, const Hardware& hw)
      : prog_(prog), s_(s), hw_(hw), own_(own_seconds(prog, s, hw)) {
    const size_t n = prog.ops.size();
    const int classes = (hw.rank_skew > 0 || hw.arrival_jitter_s > 0) && s.world > 1 ? 2 : 1;
    k_.resize(static_cast<size_t>(classes));
    for (int c = 0; c < classes; ++c) {
      k_[static_cast<size_t>(c)].speed = c == 0 ? 1.0 : 1.0 + hw.rank_skew;
      k_[static_cast<size_t>(c)].start.assign(n, 0);
      k_[static_cast<size_t>(c)].end.assign(n, 0);
    }
    cost_.resize(n);
    xfer_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const Op& o = prog.ops[i];
      if (!o.comm) continue;
      cost_[i] = collective_cost(o, s, hw);
      const Link& l = cost_[i].network ? hw.network : hw.node;
      const auto g = hw.efficiency.find("comm_" + cost_[i].group);
      const double eff = g == hw.efficiency.end() ? 1.0 : g->second;
      xfer_[i] = double(std::max(o.info.bytes_sent, o.info.bytes_recv)) / (l.bandwidth * l.efficiency) / eff;
    }
    find_layers();
  }

  SimResult run() {
    for (const Point& p : prog_.points) {
      const auto i = static_cast<size_t>(p.op);
      switch (p.kind) {
        case Point::Begin:
          begin(i);
          break;
        case Point::End:
          for (Klass& k : k_) {
            if (!prog_.ops[i].comm) k.end[i] = k.T + own_[i] * k.speed;
            k.T = k.end[i];
          }
          res_.own_compute_s += prog_.ops[i].comm ? 0.0 : own_[i];
          break;
        case Point::Issue:
          collective(i, false);
          order_.push_back(p.op);
          break;
        case Point::Wait:
          for (Klass& k : k_) k.T = std::max(k.T, k.end[i]);
          break;
      }
    }
    return finish();
  }

 private:
  struct Klass {
    double speed = 1, T = 0;
    std::vector<double> start, end;
    std::map<std::string, double> free;                // each group's stream: its last collective's end
    std::map<std::string, std::vector<size_t>> queue;  // each group's collectives, in issue order
    std::vector<size_t> inflight[2];                   // collectives on the node / network link
    std::map<int32_t, double> d2h_end, h2d_end;        // offload copies by layer
    double d2h_free = 0, h2d_free = 0;
  };
  const StepProgram& prog_;
  const StepShape& s_;
  const Hardware& hw_;
  std::vector<double> own_, xfer_;
  std::vector<CollectiveCost> cost_;
  std::vector<Klass> k_;
  std::map<A2AKey, size_t> issued_;                  // the latest all-to-all of each (phase, dir, layer, chunk)
  std::map<size_t, int32_t> fwd_first_, rec_first_;  // first forward / recompute range -> layer
  std::vector<int32_t> order_;
  SimResult res_;

  // Offload copies (s.offload): the layer input leaves for host memory when its forward begins,
  // and comes back when the next layer's backward begins (the engine's prefetch) or, for the
  // last layer, when its own recompute begins; the recompute waits for it.
  void find_layers() {
    if (!s_.offload) return;
    std::map<int32_t, size_t> f, r;
    for (const Point& p : prog_.points) {
      const Op& o = prog_.ops[static_cast<size_t>(p.op)];
      if (p.kind != Point::Begin || o.comm || o.lane != 0 || o.info.layer < 0) continue;
      if (o.info.dir == Direction::Forward) f.emplace(o.info.layer, static_cast<size_t>(p.op));
      if (o.info.dir == Direction::Recompute) r.emplace(o.info.layer, static_cast<size_t>(p.op));
    }
    for (const auto& [l, i] : f) fwd_first_[i] = l;
    for (const auto& [l, i] : r) rec_first_[i] = l;
  }

  double copy_seconds() const {
    return hw_.host.latency + double(s_.B * s_.n * s_.d) * s_.elem / (hw_.host.bandwidth * hw_.host.efficiency);
  }

  void fetch(Klass& k, int32_t layer, bool record) {
    if (layer < 0 || k.h2d_end.count(layer)) return;
    const double t = std::max({k.T, k.h2d_free, k.d2h_end.count(layer) ? k.d2h_end[layer] : 0.0});
    k.h2d_free = k.h2d_end[layer] = t + copy_seconds();
    if (record) res_.copies.push_back({layer, false, std::llround(t * 1e9), std::llround(k.h2d_free * 1e9)});
  }

  void offload(size_t i) {
    if (auto f = fwd_first_.find(i); f != fwd_first_.end()) {
      for (size_t c = 0; c < k_.size(); ++c) {
        Klass& k = k_[c];
        const double t = std::max(k.T, k.d2h_free);
        k.d2h_free = k.d2h_end[f->second] = t + copy_seconds();
        if (c == 0) res_.copies.push_back({f->second, true, std::llround(t * 1e9), std::llround(k.d2h_free * 1e9)});
      }
    }
    if (auto r = rec_first_.find(i); r != rec_first_.end()) {
      for (size_t c = 0; c < k_.size(); ++c) {
        Klass& k = k_[c];
        fetch(k, r->second, c == 0);      // not prefetched (the last layer): fetched now
        fetch(k, r->second - 1, c == 0);  // the engine's prefetch of the layer below
        k.T = std::max(k.T, k.h2d_end[r->second]);
      }
    }
  }

  void begin(size_t i) {
    const Op& o = prog_.ops[i];
    order_.push_back(static_cast<int32_t>(i));
    if (o.comm) {  // blocking collective on the compute stream
      collective(i, true);
      return;
    }
    offload(i);
    for (Klass& k : k_) {
      if (o.info.phase == Phase::Attention && o.info.chunk >= 0) {
        // a head chunk's attention waits for its own all-to-all (chunk c+1 keeps travelling)
        const bool bwd = o.info.dir == Direction::Backward;
        const A2AKey key{static_cast<int>(bwd ? Phase::A2AHeadToSeq : Phase::A2ASeqToHead),
                         static_cast<int>(o.info.dir), o.info.layer, o.info.chunk};
        if (auto it = issued_.find(key); it != issued_.end()) k.T = std::max(k.T, k.end[it->second]);
      }
      k.start[i] = k.T;
    }
  }

  // Two transfers of different groups on one link share its bandwidth: while both move, each
  // gets half, so both take `overlap` longer (the later ones queued on that group follow).
  double contend(Klass& k, size_t i, double start) {
    const int link = cost_[i].network ? 1 : 0;
    auto& fl = k.inflight[link];
    fl.erase(std::remove_if(fl.begin(), fl.end(), [&](size_t j) { return k.end[j] <= start; }), fl.end());
    double extra = 0;
    for (size_t j : fl) {
      if (cost_[j].group == cost_[i].group) continue;
      const double overlap = std::min(k.end[j] - start, xfer_[i]);
      if (overlap <= 0) continue;
      extra += overlap;
      for (size_t q : k.queue[cost_[j].group]) {  // j and what queued behind it on its stream
        if (q != j && k.start[q] < k.end[j]) continue;
        k.start[q] += q == j ? 0.0 : overlap;
        k.end[q] += overlap;
      }
      k.free[cost_[j].group] += overlap;
    }
    fl.push_back(i);
    return extra;
  }

  void collective(size_t i, bool blocking) {
    const std::string& g = cost_[i].group;
    std::vector<double> ready(k_.size());
    double latest = 0;
    const bool mixed = mixed_group(g, s_);
    for (size_t c = 0; c < k_.size(); ++c) {
      ready[c] = std::max(k_[c].T, k_[c].free[g]);
      if (c == 1 && mixed) ready[c] = std::max(k_[c].T + hw_.arrival_jitter_s, k_[c].free[g]);  // arrives late
      latest = std::max(latest, ready[c]);
    }
    double end = 0;
    for (size_t c = 0; c < k_.size(); ++c) {
      Klass& k = k_[c];
      const double begin = mixed ? latest : ready[c];  // a collective starts when all its members are in
      k.start[i] = ready[c];
      k.end[i] = begin + own_[i];
      k.end[i] += contend(k, i, begin);
      end = std::max(end, k.end[i]);
      if (c == 0) res_.wait_s += begin - ready[c];
    }
    for (Klass& k : k_) {
      if (mixed) k.end[i] = end;  // the members finish together
      k.free[g] = k.end[i];
      k.queue[g].push_back(i);
    }
    res_.comm_s += own_[i];
    const Op& o = prog_.ops[i];
    if (!blocking && (o.info.phase == Phase::A2ASeqToHead || o.info.phase == Phase::A2AHeadToSeq))
      issued_[{static_cast<int>(o.info.phase), static_cast<int>(o.info.dir), o.info.layer, o.info.chunk}] = i;
  }

  SimResult finish() {
    double last = 0;
    for (const Klass& k : k_) {
      last = std::max(last, k.T);
      for (double e : k.end) last = std::max(last, e);
    }
    res_.step_ns = std::llround(last * 1e9);
    for (size_t c = 0; c < k_.size(); ++c) {
      auto& out = c == 0 ? res_.ranges : res_.slow_ranges;
      out.reserve(order_.size());
      for (int32_t i : order_)
        out.push_back({i, std::llround(k_[c].start[static_cast<size_t>(i)] * 1e9),
                       std::llround(k_[c].end[static_cast<size_t>(i)] * 1e9)});
    }
    return std::move(res_);
  }
};

}  // namespace

SimResult simulate(const StepProgram& prog, const StepShape& s, const Hardware& hw) {
  return Replay(prog, s, hw).run();
}

}  // namespace ulysses::sim
