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
      c.steps = std::max<int64_t>(1, s.P - 1);
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
    const double share = double(std::max<int64_t>(1, std::min(s.world, hw.gpus_per_node)));
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

namespace {

using A2AKey = std::tuple<int, int, int32_t, int32_t>;  // phase, dir, layer, chunk

}  // namespace

SimResult simulate(const StepProgram& prog, const StepShape& s, const Hardware& hw) {
  const std::vector<double> own = own_seconds(prog, s, hw);
  const size_t n = prog.ops.size();
  std::vector<double> start(n, 0), end(n, 0);
  std::map<std::string, double> free;  // each group's stream: when its last collective ends
  std::map<A2AKey, int32_t> issued;    // the latest all-to-all of each (phase, dir, layer, chunk)
  SimResult res;
  double T = 0;  // the compute stream's clock
  std::vector<int32_t> order;
  order.reserve(n);
  for (const Point& p : prog.points) {
    const auto i = static_cast<size_t>(p.op);
    const Op& o = prog.ops[i];
    switch (p.kind) {
      case Point::Begin:
        if (o.comm) {  // blocking collective on the compute stream: after the group's queue
          T = std::max(T, free[collective_cost(o, s, hw).group]);
        } else if (o.info.phase == Phase::Attention && o.info.chunk >= 0) {
          // a head chunk's attention waits for its own all-to-all (chunk c+1 keeps travelling)
          const bool bwd = o.info.dir == Direction::Backward;
          const A2AKey k{static_cast<int>(bwd ? Phase::A2AHeadToSeq : Phase::A2ASeqToHead),
                         static_cast<int>(o.info.dir), o.info.layer, o.info.chunk};
          if (auto it = issued.find(k); it != issued.end()) T = std::max(T, end[static_cast<size_t>(it->second)]);
        }
        start[i] = T;
        order.push_back(p.op);
        break;
      case Point::End:
        T += own[i];
        end[i] = T;
        if (o.comm) free[collective_cost(o, s, hw).group] = T;
        (o.comm ? res.comm_s : res.own_compute_s) += own[i];
        break;
      case Point::Issue: {
        double& f = free[collective_cost(o, s, hw).group];
        start[i] = std::max(T, f);
        end[i] = start[i] + own[i];
        f = end[i];
        res.comm_s += own[i];
        if (o.info.phase == Phase::A2ASeqToHead || o.info.phase == Phase::A2AHeadToSeq)
          issued[{static_cast<int>(o.info.phase), static_cast<int>(o.info.dir), o.info.layer, o.info.chunk}] = p.op;
        order.push_back(p.op);
        break;
      }
      case Point::Wait:
        T = std::max(T, end[i]);
        break;
    }
  }
  double last = T;
  for (size_t i = 0; i < n; ++i) last = std::max(last, end[i]);
  res.step_ns = std::llround(last * 1e9);
  res.ranges.reserve(order.size());
  for (int32_t i : order)
    res.ranges.push_back(
        {i, std::llround(start[static_cast<size_t>(i)] * 1e9), std::llround(end[static_cast<size_t>(i)] * 1e9)});
  return res;
}

}  // namespace ulysses::sim
