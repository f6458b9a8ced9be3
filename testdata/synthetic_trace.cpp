// Generator of synthetic Ulysses traces.
#include "testdata/synthetic_trace.hpp"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace ulysses::testdata {

using prof::Direction;
using prof::Lane;
using prof::LaneKind;
using prof::Phase;
using prof::TraceModel;
using prof::TraceRange;

namespace {

struct Builder {
  TraceModel& m;
  std::vector<std::vector<TraceRange>> lane_ranges;
  int32_t str(const std::string& s) {
    for (size_t i = 0; i < m.strings.size(); ++i)
      if (m.strings[i] == s) return int32_t(i);
    m.strings.push_back(s);
    return int32_t(m.strings.size() - 1);
  }
  int32_t lane(int32_t rank, LaneKind k, const std::string& name, int32_t hb = -1, int32_t he = -1, int64_t tid = 0) {
    Lane l;
    l.rank = rank;
    l.kind = k;
    l.name = name;
    l.head_begin = hb;
    l.head_end = he;
    l.tid_or_stream = tid;
    m.lanes.push_back(l);
    lane_ranges.emplace_back();
    return int32_t(m.lanes.size() - 1);
  }
  void finish() {
    size_t total = 0;
    for (auto& v : lane_ranges) total += v.size();
    m.ranges.clear();
    m.ranges.reserve(total);
    for (size_t li = 0; li < lane_ranges.size(); ++li) {
      auto& v = lane_ranges[li];
      std::stable_sort(v.begin(), v.end(), [](const TraceRange& a, const TraceRange& b) {
        return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns > b.end_ns);
      });
      m.lanes[li].first = int64_t(m.ranges.size());
      m.lanes[li].count = int64_t(v.size());
      for (auto& r : v) {
        r.lane = int32_t(li);
        m.ranges.push_back(r);
      }
      std::vector<TraceRange>().swap(v);
    }
    bool any = false;
    for (const auto& r : m.ranges) {
      if (!any) {
        m.t_min = r.start_ns;
        m.t_max = r.end_ns;
        any = true;
      }
      m.t_min = std::min(m.t_min, r.start_ns);
      m.t_max = std::max(m.t_max, r.end_ns);
    }
  }
};

}  // namespace

std::shared_ptr<TraceModel> make_synthetic_trace(const SyntheticOptions& o) {
  auto model = std::make_shared<TraceModel>();
  TraceModel& m = *model;
  m.source = "synthetic";
  m.sp_size = o.ranks;
  m.dp_size = 1;
  m.num_heads = o.heads;
  m.num_layers = o.layers;
  Builder b{m, {}};
  const int32_t C = std::max(1, o.head_chunks);
  const int32_t hpr = std::max(1, o.heads / std::max(1, o.ranks));  // heads per rank
  const int32_t hpc = std::max(1, hpr / C);
  const int K = o.gpu ? std::max(0, o.kernels_per_range) : 0;

  int32_t steps = o.steps;
  if (o.target_ranges > 0) {
    // per rank per step: step + optimizer + allreduce + per layer and direction
    // main (qkv, C attention, out, mlp) + comm (2C) + head lanes (3C) + kernels K*(main+comm)
    const int64_t per_dir = (3 + C) + 2 * C + 3 * C + int64_t(K) * ((3 + C) + 2 * C);
    const int64_t per_step = 3 + 2 * int64_t(o.layers) * per_dir;
    steps = int32_t(std::max<int64_t>(1, (o.target_ranges + per_step * o.ranks - 1) / (per_step * o.ranks)));
  }
  const int32_t s_qkv = b.str("qkv_proj"), s_att = b.str("attention"), s_s2h = b.str("a2a_seq_to_head"),
                s_h2s = b.str("a2a_head_to_seq"), s_out = b.str("out_proj"), s_mlp = b.str("mlp"),
                s_step = b.str("step"), s_opt = b.str("optimizer"), s_ar = b.str("grad_allreduce");
  const int32_t k_gemm = b.str("sm90_xmma_gemm_bf16bf16_bf16f32"), k_flash = b.str("flash_fwd_kernel"),
                k_flash_b = b.str("flash_bwd_dq_dk_dv_loop_seqk_parallel"), k_nccl = b.str("ncclDevKernel_SendRecv"),
                k_ar = b.str("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
  const int32_t mem_labels[] = {b.str("after qkv_proj"), b.str("after attention"), b.str("after mlp")};

  for (int32_t r = 0; r < o.ranks; ++r) {
    prof::RankInfo ri;
    ri.rank = r;
    ri.sp_rank = r;
    ri.device = o.gpu ? "cuda:" + std::to_string(r) : "cpu";
    ri.hostname = "node0";
    ri.pid = 1000 + r;
    m.ranks.push_back(ri);
  }
  for (int32_t r = 0; r < o.ranks; ++r) {
    std::mt19937_64 rng(o.seed * 1000003 + uint64_t(r));
    std::uniform_real_distribution<double> jit(0.9, 1.1);
    const double skew = 1.0 + 0.03 * r;  // later ranks a little slower
    const int32_t main = b.lane(r, LaneKind::HostThread, "main", -1, -1, 1000 + r);
    const int32_t comm = b.lane(r, LaneKind::Comm, "comm");
    std::vector<int32_t> head_lane(static_cast<size_t>(C));
    for (int32_t c = 0; c < C; ++c) {
      const int32_t hb = r * hpr + c * hpc, he = std::min(r * hpr + (c + 1) * hpc, (r + 1) * hpr);
      head_lane[size_t(c)] =
          b.lane(r, LaneKind::HeadRange, "heads " + std::to_string(hb) + "-" + std::to_string(he - 1), hb, he);
    }
    int32_t s_comp = -1, s_nccl = -1;
    if (o.gpu) {
      s_comp = b.lane(r, LaneKind::CudaStream, "stream 7", -1, -1, 7);
      s_nccl = b.lane(r, LaneKind::CudaStream, "stream 13", -1, -1, 13);
    }
    int64_t t = 1'000'000;  // 1 ms
    int64_t mem = int64_t(2) << 30, peak = mem;
    int32_t seq = 0, coll = -1;  // collective identity of the all-to-alls (SP group pg 1), as Comm stamps it
    auto push = [&](int32_t lane, int64_t s, int64_t e, int32_t name, Phase ph, Direction d, int32_t step,
                    int32_t layer, int32_t hb, int32_t he, int32_t chunk, int64_t bytes, uint8_t depth, bool kernel) {
      TraceRange x;
      x.start_ns = s;
      x.end_ns = e;
      x.rank = r;
      x.name_id = name;
      x.step = step;
      x.layer = int16_t(layer);
      x.head_begin = int16_t(hb);
      x.head_end = int16_t(he);
      x.chunk = int16_t(chunk);
      if (bytes != 0) {
        prof::RangeExtra& xe = b.m.extra_for(x);
        xe.bytes_sent = bytes;
        xe.bytes_recv = bytes;
      }
      x.phase = ph;
      x.dir = d;
      x.depth = depth;
      x.is_kernel = kernel;
      if (coll >= 0 && !kernel) {
        prof::RangeExtra& xe = b.m.extra_for(x);
        xe.pg = 1;
        xe.seq = coll;
      }
      b.lane_ranges[size_t(lane)].push_back(x);
    };
    auto kernels = [&](int32_t stream, int64_t s, int64_t e, int32_t name, Phase ph, Direction d, int32_t step,
                       int32_t layer, int32_t hb, int32_t he, int32_t chunk) {
      if (!o.gpu || K == 0) return;
      const int64_t span = std::max<int64_t>(K, e - s);
      for (int k = 0; k < K; ++k) {
        const int64_t ks = s + span * k / K + 200, ke = s + span * (k + 1) / K;
        push(stream, ks, std::max(ks + 1, ke), name, ph, d, step, layer, hb, he, chunk, 0, 0, true);
      }
    };
    auto sample = [&](int32_t label, int64_t at, int64_t delta) {
      mem += delta;
      peak = std::max(peak, mem);
      m.memory.push_back(prof::MemoryPoint{r, at, mem, mem + (int64_t(512) << 20), peak, label});
    };
    for (int32_t st = 0; st < steps; ++st) {
      const int64_t step_start = t;
      for (int dir = 0; dir < 2; ++dir) {
        const Direction d = dir == 0 ? Direction::Forward : Direction::Backward;
        const double dm = dir == 0 ? 1.0 : 2.0;
        for (int32_t l = 0; l < o.layers; ++l) {
          const int32_t layer = dir == 0 ? l : o.layers - 1 - l;
          auto dur = [&](double us) { return int64_t(us * 1000 * jit(rng) * skew * dm); };
          int64_t q1 = t + dur(120);
          push(main, t, q1, s_qkv, Phase::QkvProj, d, st, layer, -1, -1, -1, 0, 1, false);
          kernels(s_comp, t, q1, k_gemm, Phase::QkvProj, d, st, layer, -1, -1, -1);
          sample(mem_labels[0], q1, dir == 0 ? (int64_t(64) << 20) : -(int64_t(32) << 20));
          // head chunks: the seq->head all-to-all of chunk c+1 runs while attention of chunk c
          // computes; head->seq of chunk c runs while attention of chunk c+1 computes.
          const int64_t bytes = int64_t(8) << 20;
          int64_t comm_free = q1, att_t = q1;
          std::vector<int64_t> s2h_end(static_cast<size_t>(C));
          auto heads_of = [&](int32_t c) {
            return std::pair<int32_t, int32_t>{r * hpr + c * hpc, std::min(r * hpr + (c + 1) * hpc, (r + 1) * hpr)};
          };
          for (int32_t c = 0; c < C; ++c) {
            auto [hb, he] = heads_of(c);
            const int64_t a0 = comm_free, a1 = a0 + dur(60);
            coll = seq++;
            push(comm, a0, a1, s_s2h, Phase::A2ASeqToHead, d, st, layer, hb, he, c, bytes, 0, false);
            push(head_lane[size_t(c)], a0, a1, s_s2h, Phase::A2ASeqToHead, d, st, layer, hb, he, c, bytes, 0, false);
            kernels(s_nccl, a0, a1, k_nccl, Phase::A2ASeqToHead, d, st, layer, hb, he, c);
            coll = -1;
            comm_free = s2h_end[size_t(c)] = a1;
          }
          for (int32_t c = 0; c < C; ++c) {
            auto [hb, he] = heads_of(c);
            const int64_t t0 = std::max(att_t, s2h_end[size_t(c)]), t1 = t0 + dur(150);
            push(main, t0, t1, s_att, Phase::Attention, d, st, layer, hb, he, c, 0, 1, false);
            push(head_lane[size_t(c)], t0, t1, s_att, Phase::Attention, d, st, layer, hb, he, c, 0, 0, false);
            kernels(s_comp, t0, t1, dir == 0 ? k_flash : k_flash_b, Phase::Attention, d, st, layer, hb, he, c);
            att_t = t1;
            const int64_t h0 = std::max(t1, comm_free), h1 = h0 + dur(55);
            coll = seq++;
            push(comm, h0, h1, s_h2s, Phase::A2AHeadToSeq, d, st, layer, hb, he, c, bytes, 0, false);
            push(head_lane[size_t(c)], h0, h1, s_h2s, Phase::A2AHeadToSeq, d, st, layer, hb, he, c, bytes, 0, false);
            kernels(s_nccl, h0, h1, k_nccl, Phase::A2AHeadToSeq, d, st, layer, hb, he, c);
            coll = -1;
            comm_free = h1;
          }
          const int64_t a2a_end = comm_free;
          sample(mem_labels[1], att_t, dir == 0 ? (int64_t(96) << 20) : -(int64_t(48) << 20));
          int64_t o0 = std::max(att_t, a2a_end), o1 = o0 + dur(80);
          push(main, o0, o1, s_out, Phase::OutProj, d, st, layer, -1, -1, -1, 0, 1, false);
          kernels(s_comp, o0, o1, k_gemm, Phase::OutProj, d, st, layer, -1, -1, -1);
          int64_t m1 = o1 + dur(200);
          push(main, o1, m1, s_mlp, Phase::Mlp, d, st, layer, -1, -1, -1, 0, 1, false);
          kernels(s_comp, o1, m1, k_gemm, Phase::Mlp, d, st, layer, -1, -1, -1);
          sample(mem_labels[2], m1, dir == 0 ? (int64_t(32) << 20) : -(int64_t(112) << 20));
          t = m1 + 5000;
        }
      }
      const int64_t ar0 = t, ar1 = t + int64_t(400000 * jit(rng));
      push(comm, ar0, ar1, s_ar, Phase::GradAllReduce, Direction::None, st, -1, -1, -1, -1, int64_t(64) << 20, 0,
           false);
      kernels(s_nccl, ar0, ar1, k_ar, Phase::GradAllReduce, Direction::None, st, -1, -1, -1, -1);
      const int64_t op1 = ar1 + int64_t(300000 * jit(rng));
      push(main, ar1, op1, s_opt, Phase::Optimizer, Direction::None, st, -1, -1, -1, -1, 0, 1, false);
      t = op1 + 20000;
      push(main, step_start, t, s_step, Phase::Step, Direction::None, st, -1, -1, -1, -1, 0, 0, false);
      prof::StepInfo si;
      si.rank = r;
      si.step = st;
      si.start_ns = step_start;
      si.end_ns = t;
      si.loss = 10.0 / (1 + st);
      si.step_ms = double(t - step_start) / 1e6;
      si.tokens = 65536;
      si.tokens_per_s = 65536 / (si.step_ms / 1e3);
      m.steps.push_back(si);
      t += 100000;
    }
  }
  b.finish();
  std::stable_sort(m.memory.begin(), m.memory.end(), [](const prof::MemoryPoint& a, const prof::MemoryPoint& c) {
    return a.rank < c.rank || (a.rank == c.rank && a.t_ns < c.t_ns);
  });
  return model;
}

std::shared_ptr<TraceModel> make_uniform_trace(const UniformOptions& o) {
  auto model = std::make_shared<TraceModel>();
  TraceModel& m = *model;
  m.source = "uniform";
  m.sp_size = o.ranks;
  Builder b{m, {}};
  const int32_t name = b.str("uniform");
  for (int32_t r = 0; r < o.ranks; ++r) {
    prof::RankInfo ri;
    ri.rank = r;
    ri.sp_rank = r;
    ri.device = "cpu";
    m.ranks.push_back(ri);
    for (int32_t l = 0; l < o.lanes_per_rank; ++l) {
      const int32_t lane =
          b.lane(r, l == 0 ? LaneKind::HostThread : LaneKind::Comm, l == 0 ? "main" : "lane " + std::to_string(l));
      auto& v = b.lane_ranges[size_t(lane)];
      v.reserve(size_t(o.n));
      for (int64_t i = 0; i < o.n; ++i) {
        int64_t s = i * o.period_ns;
        if (o.burst > 0) s += (i / o.burst) * o.burst_gap_ns;
        TraceRange x;
        x.start_ns = s;
        x.end_ns = s + o.width_ns;
        x.rank = r;
        x.name_id = name;
        x.phase = l == 0 ? Phase::Attention : Phase::A2ASeqToHead;
        v.push_back(x);
      }
    }
  }
  b.finish();
  return model;
}

}  // namespace ulysses::testdata
