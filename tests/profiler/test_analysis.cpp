// Analysis on hand-built intervals with known answers (computed by hand in the comments):
// interval algebra, compute/comm/idle, HTA overlap (none, partial, full), leaf-only
// compute under nested parents, comm children, GPU kernels, layer/head tables, skew, memory.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/report.hpp"

using namespace ut;
using prof::Direction;
using prof::Interval;
using prof::LaneKind;
using prof::Phase;

TEST(Intervals, MergeLengthIntersectClip) {
  // [0,10) u [5,15) u [20,30) u [30,32) u [40,40) = [0,15) u [20,32): length 15 + 12 = 27.
  auto m = prof::merge_intervals({{20, 30}, {0, 10}, {5, 15}, {30, 32}, {40, 40}});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].start, 0);
  EXPECT_EQ(m[0].end, 15);
  EXPECT_EQ(m[1].end, 32);
  EXPECT_EQ(prof::total_length(m), 27);
  // with [10,25): [10,15) + [20,25) = 10.
  EXPECT_EQ(prof::intersection_length(m, {{10, 25}}), 10);
  // clip to [12, 21): [12,15) u [20,21) = 4.
  EXPECT_EQ(prof::total_length(prof::clip_intervals(m, 12, 21)), 4);
}

TEST(Overlap, NonePartialFullAsHta) {
  // compute [0,20) + [40,60) = 40; comm varies.
  std::vector<Interval> compute = {{0, 20}, {40, 60}};
  auto none = prof::compute_overlap(compute, {{20, 40}});  // back to back: 0 / 20
  EXPECT_EQ(none.overlap_ns, 0);
  EXPECT_DOUBLE_EQ(none.ratio, 0.0);
  EXPECT_EQ(none.busy_ns, 60);
  auto part = prof::compute_overlap(compute, {{50, 70}});  // [50,60) overlaps: 10 / 20
  EXPECT_EQ(part.overlap_ns, 10);
  EXPECT_DOUBLE_EQ(part.ratio, 0.5);
  EXPECT_EQ(part.busy_ns, 40 + 20 - 10);
  auto full = prof::compute_overlap(compute, {{42, 58}});  // inside attention: 16 / 16
  EXPECT_DOUBLE_EQ(full.ratio, 1.0);
  auto nocomm = prof::compute_overlap(compute, {});
  EXPECT_DOUBLE_EQ(nocomm.ratio, 0.0);
}

namespace {
// One rank, step [0,100): main lane step range [0,100) with leaves qkv [0,20) and
// attention [40,60); the comm lane holds one a2a interval given by the test.
prof::TraceModel one_step(int64_t c0, int64_t c1) {
  auto m = make_model({
      {0,
       LaneKind::HostThread,
       "main",
       {R(0, 100, Phase::Step), R(0, 20, Phase::QkvProj, 0, 0), R(40, 60, Phase::Attention, 0, 0)}},
      {0, LaneKind::Comm, "comm", {R(c0, c1, Phase::A2ASeqToHead, 0, 0)}},
  });
  add_step(m, 0, 0, 0, 100);
  return m;
}
}  // namespace

TEST(StepBreakdown, NoOverlapIdleGapsAndLeafOnlyCompute) {
  // compute = 20 + 20 = 40 (the step parent is not a leaf, so its 100 ns do not count);
  // comm [20,40) = 20; overlap 0; idle = 100 - (40 + 20) = 40 (gaps [60,100)).
  auto b = prof::step_breakdown(one_step(20, 40));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].wall_ns, 100);
  EXPECT_EQ(b[0].compute_ns, 40);
  EXPECT_EQ(b[0].comm_ns, 20);
  EXPECT_EQ(b[0].overlap_ns, 0);
  EXPECT_EQ(b[0].exposed_comm_ns, 20);
  EXPECT_EQ(b[0].idle_ns, 40);
  EXPECT_DOUBLE_EQ(b[0].overlap_ratio, 0.0);
  EXPECT_FALSE(b[0].gpu);
}

TEST(StepBreakdown, PartialAndFullOverlapWithCommOnItsOwnLane) {
  // comm [50,70) against attention [40,60): overlap 10 of 20 -> 0.5; busy = 40+20-10 = 50; idle 50.
  auto p = prof::step_breakdown(one_step(50, 70));
  EXPECT_EQ(p[0].overlap_ns, 10);
  EXPECT_DOUBLE_EQ(p[0].overlap_ratio, 0.5);
  EXPECT_EQ(p[0].idle_ns, 50);
  // comm [42,58) entirely under attention: 16 / 16 -> 1.0; idle = 100 - 40 = 60.
  auto f = prof::step_breakdown(one_step(42, 58));
  EXPECT_DOUBLE_EQ(f[0].overlap_ratio, 1.0);
  EXPECT_EQ(f[0].exposed_comm_ns, 0);
  EXPECT_EQ(f[0].idle_ns, 60);
}

TEST(StepBreakdown, ChildrenOfCommRangesAreCommAndIntervalsClipToSteps) {
  // Main lane: step0 [0,100) { a2a [10,50) { pack [10,20) }, mlp [50,90) }, step1 [100,200) { mlp [100,250) }.
  // Step 0: compute = mlp 40 (pack is inside a2a -> comm), comm = 40, idle = 100 - 80 = 20.
  // Step 1 window [100,200): the mlp leaf is clipped to 100 ns of compute; idle 0.
  auto m = make_model({{0,
                        LaneKind::HostThread,
                        "main",
                        {R(0, 100, Phase::Step), R(10, 50, Phase::A2ASeqToHead), R(10, 20, Phase::Other),
                         R(50, 90, Phase::Mlp), R(100, 200, Phase::Step, 1), R(100, 250, Phase::Mlp, 1)}}});
  add_step(m, 0, 0, 0, 100);
  add_step(m, 0, 1, 100, 200);
  auto b = prof::step_breakdown(m);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].compute_ns, 40);
  EXPECT_EQ(b[0].comm_ns, 40);
  EXPECT_EQ(b[0].idle_ns, 20);
  EXPECT_EQ(b[1].compute_ns, 100);
  EXPECT_EQ(b[1].idle_ns, 0);
  // Step filter keeps only step 1.
  prof::AnalysisOptions o;
  o.step_begin = 1;
  auto only1 = prof::step_breakdown(m, o);
  ASSERT_EQ(only1.size(), 1u);
  EXPECT_EQ(only1[0].step, 1);
}

TEST(StepBreakdown, GpuKernelsReplaceHostRanges) {
  // Rank with kernels: gemm [0,50) on stream 7, ncclDevKernel_SendRecv [40,80) on stream 13,
  // memcpy [80,90) is neither. Host ranges are ignored. compute 50, comm 40, overlap 10 -> 0.25.
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(0, 100, Phase::Attention)}},
                       {0, LaneKind::CudaStream, "stream 7", {}},
                       {0, LaneKind::CudaStream, "stream 13", {}}});
  m.strings.push_back("gemm_kernel");
  m.strings.push_back("ncclDevKernel_SendRecv");
  m.strings.push_back("[CUDA memcpy]");
  auto kernel = [&](int64_t s, int64_t e, int name, int lane) {
    prof::TraceRange r = R(s, e, Phase::Other);
    r.is_kernel = true;
    r.name_id = static_cast<int32_t>(m.strings.size()) - 3 + name;
    r.lane = lane;
    return r;
  };
  // Rebuild the stream lanes with kernels (lanes 1 and 2).
  m.ranges.push_back(kernel(0, 50, 0, 1));
  m.ranges.push_back(kernel(80, 90, 2, 1));
  m.ranges.push_back(kernel(40, 80, 1, 2));
  m.lanes[1].first = 1;
  m.lanes[1].count = 2;
  m.lanes[2].first = 3;
  m.lanes[2].count = 1;
  add_step(m, 0, 0, 0, 100);
  auto b = prof::step_breakdown(m);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(b[0].gpu);
  EXPECT_EQ(b[0].compute_ns, 50);
  EXPECT_EQ(b[0].comm_ns, 40);
  EXPECT_EQ(b[0].overlap_ns, 10);
  EXPECT_DOUBLE_EQ(b[0].overlap_ratio, 0.25);
  EXPECT_EQ(b[0].idle_ns, 100 - 80);
}

TEST(Tables, LayerHeadSkewMemory) {
  // Two ranks, one step each. Rank 0 step [0,100), rank 1 step [0,150).
  // Rank 0: attention layer 0 fwd [10,30) (20) holding chunk ranges heads 0-1 [10,20), 2-3 [20,30)
  //         a2a s2h layer 0 fwd on comm [0,10) bytes 100, heads 0-3.
  // Rank 1: attention layer 0 fwd [10,40) (30) with no chunks; a2a s2h [0,10) bytes 200, heads 4-7.
  auto attn_chunk = [](int64_t s, int64_t e, int h0, int h1) {
    auto r = R(s, e, Phase::Attention, 0, 0);
    r.dir = Direction::Forward;
    r.head_begin = h0;
    r.head_end = h1;
    return r;
  };
  auto attn = R(10, 30, Phase::Attention, 0, 0);
  attn.dir = Direction::Forward;
  auto attn1 = attn;
  attn1.end_ns = 40;
  auto a2a = [](int bytes, int h0) {
    auto r = R(0, 10, Phase::A2ASeqToHead, 0, 0);
    r.dir = Direction::Forward;
    r.bytes_sent = bytes;
    r.head_begin = h0;
    r.head_end = h0 + 4;
    return r;
  };
  auto m = make_model({
      {0,
       LaneKind::HostThread,
       "main",
       {R(0, 100, Phase::Step), attn, attn_chunk(10, 20, 0, 2), attn_chunk(20, 30, 2, 4)}},
      {0, LaneKind::Comm, "comm", {a2a(100, 0)}},
      {1, LaneKind::HostThread, "main", {R(0, 150, Phase::Step), attn1}},
      {1, LaneKind::Comm, "comm", {a2a(200, 4)}},
  });
  add_step(m, 0, 0, 0, 100);
  add_step(m, 1, 0, 0, 150);
  m.strings.push_back("after_forward");
  for (int rank : {0, 1}) {
    for (int64_t alloc : {10, 30, 20}) {
      prof::MemoryPoint p;
      p.rank = rank;
      p.allocated = alloc * (rank + 1);
      p.peak = alloc * 2;
      p.label_id = static_cast<int32_t>(m.strings.size() - 1);
      p.step = 0;
      m.memory.push_back(p);
    }
  }

  auto layers = prof::layer_table(m);
  ASSERT_EQ(layers.size(), 1u);
  // attention: 20 (rank 0 parent; chunks nested in the same phase not re-counted) + 30 = 50.
  EXPECT_EQ(layers[0].attention_ns, 50);
  EXPECT_EQ(layers[0].a2a_seq_to_head_ns, 20);
  EXPECT_EQ(layers[0].a2a_bytes_sent, 300);
  EXPECT_EQ(layers[0].samples, 2);

  auto heads = prof::head_range_table(m);
  // Rows: 0-1 attention 10; 0-3 a2a 10; 2-3 attention 10; 4-7 a2a 10.
  ASSERT_EQ(heads.size(), 4u);
  EXPECT_EQ(heads[0].head_begin, 0);
  EXPECT_EQ(heads[0].head_end, 2);
  EXPECT_EQ(heads[0].attention_ns, 10);
  EXPECT_EQ(heads[1].head_end, 4);
  EXPECT_EQ(heads[1].a2a_seq_to_head_ns, 10);
  EXPECT_EQ(heads[3].head_begin, 4);
  EXPECT_EQ(heads[3].bytes_sent, 200);

  auto skew = prof::rank_skew(m);
  ASSERT_GE(skew.size(), 2u);
  EXPECT_EQ(skew[0].phase, Phase::Step);  // 150 on rank 1 vs 100 on rank 0 -> 1.5
  EXPECT_EQ(skew[0].slowest_rank, 1);
  EXPECT_EQ(skew[0].fastest_rank, 0);
  EXPECT_DOUBLE_EQ(skew[0].ratio, 1.5);
  bool found = false;
  for (const auto& k : skew) {
    if (k.phase != Phase::Attention) continue;
    found = true;  // 30 vs 20 -> 1.5, slowest rank 1
    EXPECT_EQ(k.slowest_rank, 1);
    EXPECT_DOUBLE_EQ(k.slowest_ns, 30);
    EXPECT_DOUBLE_EQ(k.fastest_ns, 20);
  }
  EXPECT_TRUE(found);

  auto mem = prof::peak_memory(m);
  ASSERT_EQ(mem.size(), 2u);
  EXPECT_EQ(mem[0].label, "after_forward");
  EXPECT_EQ(mem[0].max_allocated, 30);  // max(10, 30, 20) on rank 0
  EXPECT_EQ(mem[1].max_allocated, 60);  // doubled on rank 1
  EXPECT_EQ(mem[1].max_peak, 60);
  EXPECT_EQ(mem[1].samples, 3);

  auto s = prof::analyze(m);
  EXPECT_EQ(s.world_size, 2);
  ASSERT_EQ(s.ranks.size(), 2u);
  // Rank 0: compute = leaves 0-1 and 2-3 chunks [10,30) = 20; comm [0,10) = 10; idle 70.
  EXPECT_EQ(s.ranks[0].compute_ns, 20);
  EXPECT_EQ(s.ranks[0].idle_ns, 70);
  // Rank 1: compute [10,40) = 30, comm 10, idle 150 - 40 = 110.
  EXPECT_EQ(s.ranks[1].idle_ns, 110);
  EXPECT_EQ(s.overall.comm_ns, 20);
}

TEST(Headline, MediansBytesPerRankStepAndPeakMemory) {
  // Two ranks, steps 0..2. Rank 0 reports tokens/s 100, 300, 200 and step ms 10, 30, 20
  // (steady-state medians without warm-up step 0: (300+200)/2 = 250 and (30+20)/2 = 25). Each rank sends 1000 + 3000
  // all-to-all bytes and 500 all-reduce bytes per step: 6 rank-steps -> 4000 and 500 per rank per step. Peak memory
  // 7000 on rank 1.
  std::vector<SpecRange> r0, r1;
  for (int step = 0; step < 3; ++step) {
    for (auto* v : {&r0, &r1}) {
      auto a = R(step * 100 + 10, step * 100 + 20, Phase::A2ASeqToHead, step, 0);
      a.bytes_sent = 1000;
      auto b = R(step * 100 + 30, step * 100 + 40, Phase::A2AHeadToSeq, step, 0);
      b.bytes_sent = 3000;
      auto c = R(step * 100 + 50, step * 100 + 60, Phase::GradAllReduce, step);
      c.bytes_sent = 500;
      v->insert(v->end(), {a, b, c});
    }
  }
  auto m = make_model({{0, prof::LaneKind::HostThread, "main", r0}, {1, prof::LaneKind::HostThread, "main", r1}});
  const double tps[3] = {100, 300, 200}, sms[3] = {10, 30, 20};
  for (int rank = 0; rank < 2; ++rank)
    for (int step = 0; step < 3; ++step) {
      add_step(m, rank, step, step * 100, step * 100 + 90);
      m.steps.back().tokens_per_s = rank == 0 ? tps[step] : 1e9;  // rank 0's view is the run's
      m.steps.back().step_ms = rank == 0 ? sms[step] : 1e9;
    }
  for (int64_t peak : {5000, 7000, 6000}) {
    prof::MemoryPoint p;
    p.rank = peak == 7000 ? 1 : 0;
    p.step = 1;
    p.peak = peak;
    m.memory.push_back(p);
  }
  auto h = prof::headline(m);
  EXPECT_EQ(h.steps, 3);
  EXPECT_DOUBLE_EQ(h.tokens_per_s, 250);
  EXPECT_DOUBLE_EQ(h.step_ms, 25);
  EXPECT_EQ(h.a2a_bytes_per_step, 4000);
  EXPECT_EQ(h.allreduce_bytes_per_step, 500);
  EXPECT_EQ(h.peak_memory_bytes, 7000);
  // Window steps 1..1: one step, same per-step bytes, medians of that step alone.
  prof::AnalysisOptions o;
  o.step_begin = 1;
  o.step_end = 1;
  auto w = prof::headline(m, o);
  EXPECT_EQ(w.steps, 1);
  EXPECT_DOUBLE_EQ(w.tokens_per_s, 300);
  EXPECT_EQ(w.a2a_bytes_per_step, 4000);
  EXPECT_EQ(prof::analyze(m).headline.a2a_bytes_per_step, 4000);
}

// Found by a sweep against hand-computed answers; each figure below is worked out by hand.

// One rank whose only main-lane range is the step [0,10) and whose all-to-all [2,4) is on the
// comm lane: nothing was traced as compute, so compute 0, overlap 0, exposed 2, idle 8. The
// childless step counted as compute, and the comm read 100% hidden.
TEST(StepBreakdown, AStepRangeWithoutChildrenIsNeverCompute) {
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(0, 10, Phase::Step)}},
                       {0, LaneKind::Comm, "comm", {R(2, 4, Phase::A2ASeqToHead, 0, 0)}}});
  add_step(m, 0, 0, 0, 10);
  const auto b = prof::step_breakdown(m);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].compute_ns, 0);
  EXPECT_EQ(b[0].comm_ns, 2);
  EXPECT_EQ(b[0].overlap_ns, 0);
  EXPECT_EQ(b[0].exposed_comm_ns, 2);
  EXPECT_EQ(b[0].idle_ns, 8);
  EXPECT_DOUBLE_EQ(b[0].overlap_ratio, 0.0);
}

// No step records (a rank file cut before its first step record, a foreign trace), ranges that
// carry steps 0 and 1: per rank qkv [0,4) + a2a [4,6) in step 0, qkv [10,14) + a2a [14,16) in
// step 1. A window of step 1 gives step 1 alone: wall [10,16) = 6, compute 4, comm 2 (not
// the whole trace, compute 8, as "step -1"); all steps keep the whole-trace row; a window no
// range carries gives no row.
TEST(StepBreakdown, AStepWindowWithoutStepRecordsUsesTheStepsTheRangesCarry) {
  std::vector<LaneSpec> lanes;
  for (int32_t rank = 0; rank < 2; ++rank) {
    lanes.push_back({rank, LaneKind::HostThread, "main", {R(0, 4, Phase::QkvProj, 0), R(10, 14, Phase::QkvProj, 1)}});
    lanes.push_back(
        {rank, LaneKind::Comm, "comm", {R(4, 6, Phase::A2ASeqToHead, 0, 0), R(14, 16, Phase::A2ASeqToHead, 1, 0)}});
  }
  const auto m = make_model(lanes);
  prof::AnalysisOptions one;
  one.step_begin = 1;
  one.step_end = 1;
  const auto b = prof::step_breakdown(m, one);
  ASSERT_EQ(b.size(), 2u);
  for (const auto& x : b) {
    EXPECT_EQ(x.step, 1);
    EXPECT_EQ(x.start_ns, 10);
    EXPECT_EQ(x.wall_ns, 6);
    EXPECT_EQ(x.compute_ns, 4);
    EXPECT_EQ(x.comm_ns, 2);
  }
  const auto all = prof::step_breakdown(m);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, -1);
  EXPECT_EQ(all[0].compute_ns, 8);
  prof::AnalysisOptions none;
  none.step_begin = 5;
  EXPECT_TRUE(prof::step_breakdown(m, none).empty());
}

// Rank 0 has steps 0-1, rank 1 steps 0-3 (step ms 10, 20, 30, 50); window from step 2: the
// medians are rank 1's, (30 + 50) / 2 = 40 ms over 2 steps (they read 0: the lowest rank of the
// whole trace has no step there). Bytes: rank 1 sends one all-to-all of 1000 bytes per step,
// traced with its two messages (400 + 600) nested in it; rank 2 sends 1000 in step 2 but has no
// step record. Per rank and step: 1000 (not 2000 for the nested messages, nor 3000 / 2 with
// rank 2's bytes over rank 1's records).
TEST(Headline, LowestRankInTheWindowAndEachByteCountedOncePerStepRecord) {
  std::vector<SpecRange> r1, r2;
  for (int step = 0; step < 4; ++step) {
    auto a = R(step * 100 + 10, step * 100 + 40, Phase::A2ASeqToHead, step, 0);
    a.bytes_sent = 1000;
    auto m1 = R(step * 100 + 10, step * 100 + 20, Phase::A2ASeqToHead, step, 0);
    m1.bytes_sent = 400;
    auto m2 = R(step * 100 + 20, step * 100 + 40, Phase::A2ASeqToHead, step, 0);
    m2.bytes_sent = 600;
    r1.insert(r1.end(), {a, m1, m2});
  }
  auto extra = R(210, 240, Phase::A2ASeqToHead, 2, 0);
  extra.bytes_sent = 1000;
  r2.push_back(extra);
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(0, 90, Phase::QkvProj, 0), R(100, 190, Phase::QkvProj, 1)}},
                       {1, LaneKind::Comm, "comm", r1},
                       {2, LaneKind::Comm, "comm", r2}});
  for (int step = 0; step < 2; ++step) add_step(m, 0, step, step * 100, step * 100 + 90);
  const double sms[4] = {10, 20, 30, 50};
  for (int step = 0; step < 4; ++step) {
    add_step(m, 1, step, step * 100, step * 100 + 90);
    m.steps.back().step_ms = sms[step];
    m.steps.back().tokens_per_s = 1000.0 / sms[step];
  }
  prof::AnalysisOptions o;
  o.step_begin = 2;
  const auto h = prof::headline(m, o);
  EXPECT_EQ(h.steps, 2);
  EXPECT_DOUBLE_EQ(h.step_ms, 40);
  EXPECT_EQ(h.a2a_bytes_per_step, 1000);
  // Whole run: rank 0 is the lowest; its two steps, step 0 left out: 0 ms (no figure given).
  // Bytes: rank 1's 4 x 1000 over 6 records.
  EXPECT_EQ(prof::headline(m).a2a_bytes_per_step, 4000 / 6);
}

// The names table follows the step window like every other table: 2 ranks x 5 steps of one
// 1 ns all-to-all each; steps 2-3 hold 4 of them (it counted all 10).
TEST(Tables, NamesFollowTheStepWindow) {
  std::vector<SpecRange> v;
  for (int step = 0; step < 5; ++step) v.push_back(R(step * 10, step * 10 + 1, Phase::A2ASeqToHead, step, 0));
  auto m = make_model({{0, LaneKind::Comm, "comm", v}, {1, LaneKind::Comm, "comm", v}});
  for (int32_t rank = 0; rank < 2; ++rank)
    for (int step = 0; step < 5; ++step) add_step(m, rank, step, step * 10, step * 10 + 9);
  prof::AnalysisOptions o;
  o.step_begin = 2;
  o.step_end = 3;
  const auto n = prof::name_totals(m, o);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].count, 4);
  EXPECT_EQ(n[0].total_ns, 4);
  EXPECT_EQ(prof::name_totals(m, 20)[0].count, 10);
  EXPECT_EQ(prof::analyze(m, o).names[0].count, 4);
}

// Sums past int64 saturate instead of wrapping: two ranks whose one step spans nearly the whole
// int64 range, all of it compute: each rank's compute is 2^63 - 2, the sum over ranks
// INT64_MAX (it wrapped negative).
TEST(StepBreakdown, SumsPastInt64SaturateInsteadOfWrapping) {
  const int64_t lo = -(int64_t{1} << 62) + 1, hi = (int64_t{1} << 62) - 1;
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(lo, hi, Phase::Mlp)}},
                       {1, LaneKind::HostThread, "main", {R(lo, hi, Phase::Mlp)}}});
  add_step(m, 0, 0, lo, hi);
  add_step(m, 1, 0, lo, hi);
  const auto s = prof::analyze(m);
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[0].compute_ns, hi - lo);
  EXPECT_EQ(s.steps[0].idle_ns, 0);
  EXPECT_EQ(s.overall.compute_ns, INT64_MAX);
  EXPECT_EQ(s.overall.busy_ns, INT64_MAX);
  ASSERT_FALSE(s.names.empty());
  EXPECT_EQ(s.names[0].total_ns, INT64_MAX);
}

// Rank skew: a phase only rank 0 ran (rank 1 trained the step too) has rank 1 as the fastest
// at 0 ns (not rank 0 at both ends, ratio 1.00); on a GPU rank a phase's time is its kernels'
// union, 3 ns here, not the 10 ns host range that launched them (as in the layer table).
TEST(Tables, SkewCountsEveryTrainingRankAndKernelTimeOnGpuRanks) {
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(0, 10, Phase::OutProj), R(10, 20, Phase::Mlp)}},
                       {1, LaneKind::HostThread, "main", {R(0, 12, Phase::Mlp)}}});
  add_step(m, 0, 0, 0, 20);
  add_step(m, 1, 0, 0, 20);
  auto row_of = [](const std::vector<prof::SkewRow>& rows, Phase p) {
    for (const auto& r : rows)
      if (r.phase == p) return r;
    return prof::SkewRow{};
  };
  const auto out = row_of(prof::rank_skew(m), Phase::OutProj);
  EXPECT_EQ(out.slowest_rank, 0);
  EXPECT_EQ(out.fastest_rank, 1);
  EXPECT_DOUBLE_EQ(out.fastest_ns, 0.0);
  const auto mlp = row_of(prof::rank_skew(m), Phase::Mlp);
  EXPECT_EQ(mlp.slowest_rank, 1);
  EXPECT_DOUBLE_EQ(mlp.slowest_ns, 12.0);
  EXPECT_DOUBLE_EQ(mlp.ratio, 1.2);

  auto g = make_model({{0, LaneKind::HostThread, "main", {R(0, 10, Phase::Attention)}},
                       {0, LaneKind::CudaStream, "stream 7", {}},
                       {0, LaneKind::CudaStream, "stream 8", {}}});
  g.strings.push_back("flash_fwd_kernel");
  auto kernel = [&](int64_t s, int64_t e, int32_t lane) {
    prof::TraceRange r = R(s, e, Phase::Attention);
    r.is_kernel = true;
    r.name_id = static_cast<int32_t>(g.strings.size()) - 1;
    r.lane = lane;
    return r;
  };
  g.ranges.push_back(kernel(2, 4, 1));  // [2,4) and [3,5) on two streams: union 3
  g.ranges.push_back(kernel(3, 5, 2));
  g.lanes[1].first = 1;
  g.lanes[1].count = 1;
  g.lanes[2].first = 2;
  g.lanes[2].count = 1;
  add_step(g, 0, 0, 0, 10);
  const auto att = row_of(prof::rank_skew(g), Phase::Attention);
  EXPECT_EQ(att.slowest_rank, 0);
  EXPECT_DOUBLE_EQ(att.slowest_ns, 3.0);
}

// On CPU ranks a memory sample is the process's resident memory (libtorch included), not the
// tensors the planner counts: the text summary says so beside the peak (a demo read 184 MiB
// where --plan said 5.8), and only there (GPU ranks, foreign traces: the allocator's figure).
TEST(Summary, CpuPeakMemoryIsSaidToBeTheProcesssResidentMemory) {
  prof::TraceModel m;
  for (int32_t r : {0, 1}) {
    prof::RankInfo ri;
    ri.rank = r;
    ri.device = "cpu";
    m.ranks.push_back(ri);
    prof::StepInfo st;
    st.rank = r;
    st.step = 0;
    st.end_ns = 1000;
    st.step_ms = 0.001;
    m.steps.push_back(st);
    m.memory.push_back(prof::MemoryPoint{r, 500, 1 << 20, 2 << 20, 3 << 20, 0});
  }
  m.strings.push_back("after_forward");
  const std::string said =
      "(CPU ranks: the process's peak resident memory, libtorch included; --plan counts tensors only)";
  std::string text = prof::summary_to_text(m, prof::analyze(m));
  EXPECT_NE(text.find("peak memory 3.0 MiB " + said), std::string::npos) << text;
  m.ranks[1].device = "cuda:0";
  text = prof::summary_to_text(m, prof::analyze(m));
  EXPECT_NE(text.find("peak memory 3.0 MiB\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(said), std::string::npos) << text;
  m.ranks[1].device = "cpu";
  m.format = "kineto";
  EXPECT_EQ(prof::summary_to_text(m, prof::analyze(m)).find(said), std::string::npos);
}
