// The step simulator without the engine: hardware descriptions (the shipped files, JSON round
// trip, bad input) and the replay of a step program recorded by hand in the engine's order
// (one layer, two head chunks), its times checked against values computed by hand.
#include <algorithm>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/documents_fixture.hpp"
#include "hardware.hpp"
#include "run_config.hpp"
#include "step_program.hpp"
#include "step_sim.hpp"

namespace {

using namespace ulysses;
using prof::Direction;
using prof::Phase;

struct HardwareDir : ::testing::Environment {
  void SetUp() override { setenv("ULYSSES_HARDWARE_DIR", ULYSSES_SOURCE_DIR "/resources/hardware", 1); }
};
[[maybe_unused]] const auto* g_env = ::testing::AddGlobalTestEnvironment(new HardwareDir);

TEST(Hardware, ShippedDescriptionsLoadWithTheirDataSheetFigures) {
  const auto names = sim::shipped_hardware();
  for (const char* n : {"h100-sxm-x8", "h200-x8", "a100-sxm-x8", "h100-ib-cluster", "cpu-ranks"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  const sim::Hardware h100 = sim::load_hardware("h100-sxm-x8");
  EXPECT_DOUBLE_EQ(h100.peak_bf16, 989e12);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.node.bandwidth, 450e9);  // NVLink 4: 900 GB/s both directions
  EXPECT_EQ(h100.gpus_per_node, 8);
  const sim::Hardware h200 = sim::load_hardware("h200-x8");
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(sim::load_hardware("a100-sxm-x8").peak_bf16, 312e12);
  EXPECT_DOUBLE_EQ(sim::load_hardware("h100-ib-cluster").network.bandwidth, 50e9);
  EXPECT_TRUE(sim::load_hardware("cpu-ranks").shared_compute);
  for (const auto& n : names)
    EXPECT_FALSE(sim::load_hardware(n).source.empty()) << n << " says where its figures come from";
}

TEST(Hardware, JsonRoundTripAndEfficiencyByPrefix) {
  sim::Hardware h = sim::load_hardware("h100-sxm-x8");
  h.efficiency["attention_bwd"] = 0.5;
  h.calibrated_from = "runs/x";
  const sim::Hardware back = sim::Hardware::from_json(h.to_json());
  EXPECT_EQ(back.to_json(), h.to_json());
  EXPECT_DOUBLE_EQ(back.efficiency_of("attention_bwd"), 0.5);
  EXPECT_DOUBLE_EQ(back.efficiency_of("attention_fwd_outer"), 0.58);  // -> attention
  EXPECT_DOUBLE_EQ(back.efficiency_of("mlp_fwd"), 0.7);               // -> default
}

TEST(Hardware, BadNamesAndFilesSayWhatExists) {
  try {
    sim::load_hardware("no-such-gpu");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h200-x8"), std::string::npos) << e.what();
  }
  nlohmann::json j = sim::load_hardware("h200-x8").to_json();
  j["links"].erase("node");
  EXPECT_THROW(sim::Hardware::from_json(j), std::runtime_error);
  j = sim::load_hardware("h200-x8").to_json();
  j["peak_flops"]["bfloat16"] = -1;
  EXPECT_THROW(sim::Hardware::from_json(j), std::runtime_error);
}

prof::RangeInfo info(Phase ph, int32_t layer, int32_t chunk = -1, int32_t h0 = -1, int32_t h1 = -1, int64_t bytes = 0) {
  prof::RangeInfo r;
  r.phase = ph;
  r.dir = Direction::Forward;
  r.layer = layer;
  r.chunk = chunk;
  r.head_begin = h0;
  r.head_end = h1;
  r.bytes_sent = r.bytes_recv = bytes;
  return r;
}

// One decoder layer's forward as ulysses_attention.cpp calls the tracer with two head chunks:
// both seq->head exchanges issued up front, each chunk's attention, its head->seq issued after
// it, every exchange recorded at the flush.
sim::StepProgram chunked_layer() {
  sim::RecordingTracer t;
  t.on = true;
  t.push(info(Phase::Step, -1));
  t.push(info(Phase::QkvProj, 0));
  t.pop();
  t.push(info(Phase::Attention, 0, -1, 0, 4));
  const int64_t a2a = 1'000'000;
  t.push_correlation(info(Phase::A2ASeqToHead, 0, 0, 0, 1, a2a));
  t.push_correlation(info(Phase::A2ASeqToHead, 0, 1, 1, 2, a2a));
  t.push(info(Phase::Attention, 0, 0, 0, 1));
  t.pop();
  t.push_correlation(info(Phase::A2AHeadToSeq, 0, 0, 0, 1, a2a));
  t.push(info(Phase::Attention, 0, 1, 1, 2));
  t.pop();
  t.push_correlation(info(Phase::A2AHeadToSeq, 0, 1, 1, 2, a2a));
  const int64_t now = prof::Tracer::now_ns();
  t.record_range(info(Phase::A2ASeqToHead, 0, 0, 0, 1, a2a), now, now, prof::Tracer::kCommLane);
  t.record_range(info(Phase::A2ASeqToHead, 0, 1, 1, 2, a2a), now, now, prof::Tracer::kCommLane);
  t.record_range(info(Phase::A2AHeadToSeq, 0, 0, 0, 1, a2a), now, now, prof::Tracer::kCommLane);
  t.record_range(info(Phase::A2AHeadToSeq, 0, 1, 1, 2, a2a), now, now, prof::Tracer::kCommLane);
  t.pop();
  t.push(info(Phase::OutProj, 0));
  t.pop();
  t.pop();
  return t.build();
}

sim::Hardware simple_hw() {
  sim::Hardware h;
  h.peak_bf16 = h.peak_fp32 = 1e12;  // 1 TFLOP/s
  h.memory_bandwidth = 1e18;         // memory never the bound here
  h.overhead_s = 0;
  h.node.bandwidth = 1e9;  // 1 GB/s, 1 us per step
  h.node.latency = 1e-6;
  h.efficiency["default"] = 1.0;
  return h;
}

RunConfig tiny_cfg() {
  RunConfig c;  // defaults: hidden 64, 4 heads, 4 kv heads (overridden), ffn 176, vocab 256
  c.model.num_hidden_layers = 1;
  c.model.num_key_value_heads = 2;
  c.parallel.sp_size = 2;
  c.parallel.head_chunks = 2;
  c.train.seq_length = 512;
  c.train.dtype = "float32";
  return c;
}

TEST(StepProgram, RecordedStreamBecomesOrderedPoints) {
  const sim::StepProgram p = chunked_layer();
  EXPECT_EQ(p.ops.size(), 10u);  // step, qkv, attention, its 2 chunks, out_proj; 4 exchanges
  EXPECT_EQ(p.count(sim::Point::Issue), 4);
  EXPECT_EQ(p.count(sim::Point::Wait), 4);
  // Every issue comes before its wait, and the first seq->head before the first chunk begins.
  for (size_t i = 0; i < p.ops.size(); ++i) {
    int issue = -1, wait = -1;
    for (size_t k = 0; k < p.points.size(); ++k) {
      if (p.points[k].op != static_cast<int32_t>(i)) continue;
      if (p.points[k].kind == sim::Point::Issue) issue = static_cast<int>(k);
      if (p.points[k].kind == sim::Point::Wait) wait = static_cast<int>(k);
    }
    if (p.ops[i].comm) {
      EXPECT_GE(issue, 0) << i;
      EXPECT_LT(issue, wait) << i;
    }
  }
}

TEST(StepSim, HeadChunksPipelineAsTheEngineWaits) {
  const sim::StepProgram p = chunked_layer();
  const RunConfig cfg = tiny_cfg();
  const sim::StepShape s = sim::StepShape::of(cfg);
  const sim::Hardware hw = simple_hw();
  const sim::SimResult r = sim::simulate(p, s, hw);
  auto find = [&](Phase ph, int32_t chunk) {
    for (const auto& x : r.ranges) {
      const auto& o = p.ops[static_cast<size_t>(x.op)];
      if (o.info.phase == ph && o.info.chunk == chunk) return x;
    }
    ADD_FAILURE() << prof::phase_name(ph) << " chunk " << chunk << " missing";
    return sim::SimRange{};
  };
  // Hand-computed: qkv = 2 B n d (H + 2 Hkv) dh = 2 x 256 x 64 x 8 x 16 FLOPs at 1 TFLOP/s;
  // a chunk's attention = 2 B N^2 dh x 1 head = 2 x 512^2 x 16 FLOPs; an exchange = 1 us + 1 MB / 1 GB/s.
  const int64_t qkv = 4194, att = 8389, x = 1001000;
  const auto q = find(Phase::QkvProj, -1);
  EXPECT_NEAR(double(q.end_ns - q.start_ns), qkv, 1);
  const auto s0 = find(Phase::A2ASeqToHead, 0), s1 = find(Phase::A2ASeqToHead, 1);
  const auto a0 = find(Phase::Attention, 0), a1 = find(Phase::Attention, 1);
  const auto o0 = find(Phase::A2AHeadToSeq, 0), o1 = find(Phase::A2AHeadToSeq, 1);
  EXPECT_EQ(s0.start_ns, q.end_ns) << "the all-to-all starts when its inputs exist, not before";
  EXPECT_NEAR(double(s0.end_ns - s0.start_ns), x, 1);
  EXPECT_EQ(a0.start_ns, s0.end_ns) << "chunk 0's attention waits for chunk 0's exchange";
  EXPECT_NEAR(double(a0.end_ns - a0.start_ns), att, 1);
  EXPECT_EQ(s1.start_ns, s0.end_ns) << "one collective at a time on the SP group's stream";
  EXPECT_LT(s1.start_ns, a0.end_ns);  // chunk 1's exchange travels while chunk 0 computes
  EXPECT_GT(s1.end_ns, a0.start_ns);
  EXPECT_EQ(a1.start_ns, s1.end_ns);
  EXPECT_EQ(o0.start_ns, s1.end_ns) << "chunk 0's head->seq queues behind chunk 1's seq->head";
  EXPECT_EQ(o1.start_ns, std::max(o0.end_ns, a1.end_ns));
  const auto out = find(Phase::OutProj, -1);
  EXPECT_EQ(out.start_ns, o1.end_ns) << "o_proj waits for every exchange (the flush)";
  EXPECT_GE(r.step_ns, out.end_ns);
}

TEST(StepSim, LinkLevelFollowsTheGroupSpan) {
  RunConfig cfg = tiny_cfg();
  cfg.parallel.sp_size = 4;
  cfg.parallel.dp_size = 4;
  sim::Hardware hw = simple_hw();
  hw.gpus_per_node = 8;
  sim::Op a2a;
  a2a.comm = true;
  a2a.info = info(Phase::A2ASeqToHead, 0, 0, 0, 1, 1000);
  sim::Op ar;
  ar.comm = true;
  ar.info = info(Phase::GradAllReduce, -1, -1, -1, -1, 1000);
  ar.info.dir = Direction::Backward;
  const sim::StepShape s = sim::StepShape::of(cfg);
  EXPECT_FALSE(sim::collective_cost(a2a, s, hw).network);    // 4 consecutive ranks: one node
  EXPECT_TRUE(sim::collective_cost(ar, s, hw).network);      // 16 ranks: two nodes
  EXPECT_EQ(sim::collective_cost(ar, s, hw).steps, 2 * 15);  // ring all-reduce
  EXPECT_EQ(sim::collective_cost(a2a, s, hw).steps, 3);
}

}  // namespace

// Packed documents: the simulator counts attention's work for the (query, key) pairs the
// document mask keeps, as the cost model does. Documents 5, 3, 20, 4, 7 at N = 8 pack as
// [5 3] [8] [8] [4 4] [7 + padding]: 142 of 180 causal pairs (diagonal included) are kept.
TEST(StepSim, PackedDocumentsScaleAttentionWork) {
  char tmpl[] = "/tmp/ulysses_sim_docs_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<std::vector<int64_t>> docs;
  for (const int64_t n : {5, 3, 20, 4, 7}) docs.push_back(std::vector<int64_t>(static_cast<size_t>(n), 1));
  test::write_documents_folder(dir, docs, 64);
  RunConfig cfg = tiny_cfg();
  cfg.train.seq_length = 8;
  const sim::StepShape whole = sim::StepShape::of(cfg);
  cfg.data.kind = "documents";
  cfg.data.path = dir;
  const sim::StepShape packed = sim::StepShape::of(cfg);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(whole.attention_fraction, 1.0);
  EXPECT_NEAR(packed.attention_fraction, 142.0 / 180.0, 1e-12);
  for (const Direction dir_ : {Direction::Forward, Direction::Backward}) {
    sim::Op op;
    op.info.phase = Phase::Attention;
    op.info.dir = dir_;
    const double a = sim::nominal_work(op, whole, false).flops, b = sim::nominal_work(op, packed, false).flops;
    EXPECT_GT(a, 0);
    EXPECT_NEAR(b, a * 142.0 / 180.0, 1e-9 * a);
    op.info.phase = Phase::QkvProj;  // dense work is not masked
    EXPECT_EQ(sim::nominal_work(op, packed, false).flops, sim::nominal_work(op, whole, false).flops);
  }
}
