// The step simulator without the engine: hardware descriptions (the shipped files, JSON round
// trip, bad input) and the replay of a step program recorded by hand in the engine's order
// (one layer, two head chunks), its times checked against values computed by hand.
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/documents_fixture.hpp"
#include "hardware.hpp"
#include "run_config.hpp"
#include "simulated_run.hpp"
#include "step_program.hpp"
#include "step_sim.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/trace_writer.hpp"

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
  EXPECT_EQ(sim::collective_cost(a2a, s, hw).steps, 1);      // its 3 pairwise exchanges posted together
}

// A program built op by op: `ops` in order, then the points.
struct Builder {
  sim::StepProgram p;
  int32_t op(Phase ph, Direction dir, int32_t layer, bool comm = false, int32_t lane = 0, int64_t bytes = 0) {
    sim::Op o;
    o.info = info(ph, layer, comm && ph != Phase::GradAllReduce ? 0 : -1, -1, -1, bytes);
    o.info.dir = dir;
    o.comm = comm;
    o.lane = lane;
    p.ops.push_back(o);
    return static_cast<int32_t>(p.ops.size() - 1);
  }
  void at(sim::Point::Kind k, int32_t i) { p.points.push_back({k, i}); }
  void compute(Phase ph, Direction dir, int32_t layer) {
    const int32_t i = op(ph, dir, layer);
    at(sim::Point::Begin, i);
    at(sim::Point::End, i);
  }
};

sim::SimRange range_of(const sim::SimResult& r, int32_t op, bool slow = false) {
  for (const auto& x : slow ? r.slow_ranges : r.ranges)
    if (x.op == op) return x;
  ADD_FAILURE() << "op " << op << " missing";
  return {};
}

// An SP all-to-all and a ZeRO-3 gather (the world group) issued together: alone each takes its
// latency + 1 MB / 1 GB/s; on one link they share the bandwidth, so each ends 1 ms later
// (fair sharing of two equal transfers); on different link levels neither slows.
TEST(StepSim, CollectivesSharingALinkShareItsBandwidth) {
  RunConfig cfg = tiny_cfg();
  cfg.parallel.dp_size = 2;  // world 4
  const sim::StepShape s = sim::StepShape::of(cfg);
  auto program = [](bool both) {
    Builder b;
    const int32_t step = b.op(Phase::Step, Direction::None, -1);
    const int32_t a2a = b.op(Phase::A2ASeqToHead, Direction::Forward, 0, true, prof::Tracer::kCommLane, 1'000'000);
    const int32_t gather =
        b.op(Phase::GradAllReduce, Direction::None, -1, true, prof::Tracer::kZeroGatherLane, 1'000'000);
    b.at(sim::Point::Begin, step);
    b.at(sim::Point::Issue, a2a);
    if (both) b.at(sim::Point::Issue, gather);
    b.at(sim::Point::Wait, a2a);
    if (both) b.at(sim::Point::Wait, gather);
    b.at(sim::Point::End, step);
    return b.p;
  };
  sim::Hardware hw = simple_hw();
  hw.gpus_per_node = 8;
  const sim::SimResult alone = sim::simulate(program(false), s, hw);
  EXPECT_NEAR(double(range_of(alone, 1).end_ns), 1'001'000, 1);  // 1 step x 1 us + 1 ms
  const sim::SimResult both = sim::simulate(program(true), s, hw);
  EXPECT_NEAR(double(range_of(both, 1).end_ns), 2'001'000, 1) << "the all-to-all shares the link for 1 ms";
  EXPECT_NEAR(double(range_of(both, 2).end_ns), 2'003'000, 1) << "the gather: 3 steps x 1 us + 1 ms + 1 ms shared";
  hw.gpus_per_node = 2;  // the SP pair inside a node, the world group between nodes
  const sim::SimResult apart = sim::simulate(program(true), s, hw);
  EXPECT_NEAR(double(range_of(apart, 1).end_ns), 1'001'000, 1) << "different link levels do not contend";
}

// Two layers with offloaded checkpoints: each layer's input leaves at its forward (1 ms over the
// host link), comes back when the layer above begins its backward (layer 1's own input fetched
// then too), and the recompute that needs it waits for the copy.
TEST(StepSim, AnOffloadCopyDelaysItsConsumer) {
  RunConfig cfg = tiny_cfg();
  cfg.model.num_hidden_layers = 2;
  cfg.train.activation_checkpointing = "layer";
  cfg.train.offload_activations = true;
  Builder b;
  b.compute(Phase::QkvProj, Direction::Forward, 0);
  b.compute(Phase::QkvProj, Direction::Forward, 1);
  b.compute(Phase::QkvProj, Direction::Recompute, 1);
  b.compute(Phase::QkvProj, Direction::Backward, 1);
  b.compute(Phase::QkvProj, Direction::Recompute, 0);
  b.compute(Phase::QkvProj, Direction::Backward, 0);
  sim::Hardware hw = simple_hw();
  // A layer input: B n d x 4 bytes = 256 x 64 x 4 = 65,536 bytes: 1 ms at 65.536 MB/s.
  hw.host = {65.536e6, 0.0, 1.0};
  const sim::SimResult r = sim::simulate(b.p, sim::StepShape::of(cfg), hw);
  ASSERT_EQ(r.copies.size(), 4u);
  const int64_t ms = 1'000'000;
  EXPECT_EQ(r.copies[0].start_ns, 0);  // layer 0 out at its forward
  EXPECT_EQ(r.copies[1].start_ns, ms) << "layer 1 out queues behind layer 0 on the device->host copy";
  EXPECT_EQ(r.copies[2].start_ns, 2 * ms) << "layer 1 back only after it is out";
  EXPECT_EQ(r.copies[3].start_ns, 3 * ms) << "layer 0 prefetched behind it";
  EXPECT_EQ(range_of(r, 2).start_ns, 3 * ms) << "layer 1's recompute waits for its input";
  EXPECT_EQ(range_of(r, 4).start_ns, 4 * ms) << "layer 0's recompute waits for the prefetch";
  cfg.train.offload_activations = false;
  const sim::SimResult kept = sim::simulate(b.p, sim::StepShape::of(cfg), hw);
  EXPECT_TRUE(kept.copies.empty());
  EXPECT_LT(range_of(kept, 4).start_ns, 100'000) << "without offload nothing waits";
}

// Rank skew: the slowest SP member computes 1.5x slower; the all-to-all starts when it
// arrives, so the typical rank waits inside it and its o_proj starts later.
TEST(StepSim, ASkewedRankDelaysItsGroupsCollectives) {
  const sim::StepShape s = sim::StepShape::of(tiny_cfg());
  Builder b;
  b.compute(Phase::QkvProj, Direction::Forward, 0);
  const int32_t a2a = b.op(Phase::A2ASeqToHead, Direction::Forward, 0, true, prof::Tracer::kCommLane, 1'000'000);
  b.at(sim::Point::Issue, a2a);
  b.at(sim::Point::Wait, a2a);
  b.compute(Phase::OutProj, Direction::Forward, 0);
  sim::Hardware hw = simple_hw();
  const sim::SimResult even = sim::simulate(b.p, s, hw);
  EXPECT_TRUE(even.slow_ranges.empty());
  hw.rank_skew = 0.5;
  const sim::SimResult r = sim::simulate(b.p, s, hw);
  ASSERT_EQ(r.slow_ranges.size(), r.ranges.size());
  const int64_t qkv = 4194, x = 1'001'000;  // as in HeadChunksPipelineAsTheEngineWaits
  EXPECT_NEAR(double(range_of(r, a2a).start_ns), qkv, 1) << "the typical rank enters when it is ready";
  EXPECT_NEAR(double(range_of(r, a2a, true).start_ns), 1.5 * qkv, 1);
  EXPECT_NEAR(double(range_of(r, a2a).end_ns), 1.5 * qkv + x, 1) << "and leaves when the slow member is done";
  EXPECT_EQ(range_of(r, a2a).end_ns, range_of(r, a2a, true).end_ns);
  EXPECT_NEAR(r.wait_s * 1e9, 0.5 * qkv, 1);
  EXPECT_EQ(range_of(r, 2).start_ns, range_of(r, a2a).end_ns);
  EXPECT_GT(range_of(r, 2).start_ns, range_of(even, 2).start_ns);
  EXPECT_GT(r.step_ns, even.step_ns);
  EXPECT_FALSE(sim::is_slow_rank(0, s));
  EXPECT_TRUE(sim::is_slow_rank(1, s));  // the last of each SP pair
  EXPECT_TRUE(sim::is_slow_rank(3, s));
}

// Arrival jitter (CPU ranks on shared cores): the late SP member reaches the all-to-all 2 ms
// after it is ready, whatever the compute before it; the typical rank waits those 2 ms inside
// it. With twice the sequence (twice the QKV work) the wait stays 2 ms, where a rank skew would
// grow it with the compute.
TEST(StepSim, ArrivalJitterIsTheSameWaitWhateverTheCompute) {
  auto program = [] {
    Builder b;
    b.compute(Phase::QkvProj, Direction::Forward, 0);
    const int32_t a2a = b.op(Phase::A2ASeqToHead, Direction::Forward, 0, true, prof::Tracer::kCommLane, 1'000'000);
    b.at(sim::Point::Issue, a2a);
    b.at(sim::Point::Wait, a2a);
    b.compute(Phase::OutProj, Direction::Forward, 0);
    return b.p;
  };
  sim::Hardware hw = simple_hw();
  hw.arrival_jitter_s = 2e-3;
  const sim::StepShape s = sim::StepShape::of(tiny_cfg());
  const sim::SimResult r = sim::simulate(program(), s, hw);
  ASSERT_EQ(r.slow_ranges.size(), r.ranges.size());
  const int64_t qkv = 4194, x = 1'001'000;  // as in ASkewedRankDelaysItsGroupsCollectives
  EXPECT_NEAR(double(range_of(r, 1).start_ns), qkv, 1) << "the typical rank enters when it is ready";
  EXPECT_NEAR(double(range_of(r, 1, true).start_ns), qkv + 2e6, 1) << "the late member 2 ms after";
  EXPECT_NEAR(double(range_of(r, 1).end_ns), qkv + 2e6 + x, 1);
  EXPECT_NEAR(r.wait_s, 2e-3, 1e-9);
  EXPECT_EQ(range_of(r, 1, true).end_ns - range_of(r, 1, true).start_ns, x) << "the late member does not wait";
  RunConfig longer = tiny_cfg();
  longer.train.seq_length *= 2;
  const sim::SimResult r2 = sim::simulate(program(), sim::StepShape::of(longer), hw);
  EXPECT_GT(range_of(r2, 0).end_ns, range_of(r, 0).end_ns + qkv / 2) << "the compute grew";
  EXPECT_NEAR(r2.wait_s, 2e-3, 1e-9) << "the wait did not";
  const sim::Hardware back = sim::Hardware::from_json(hw.to_json());
  EXPECT_DOUBLE_EQ(back.arrival_jitter_s, 2e-3);
  nlohmann::json bad = hw.to_json();
  bad["arrival_jitter_s"] = -1;
  EXPECT_THROW(sim::Hardware::from_json(bad), std::runtime_error);
}

std::string query_text(const std::string& file, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out += (t ? reinterpret_cast<const char*>(t) : "NULL");
      out += '\n';
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// The simulated run folder of 16 ranks (sp 2 x dp 8, rank skew 0.5): every rank file written
// without WAL or fsync is the ordinary schema (the same tables and indexes, in rollback mode, as
// a file the tracer writes), holds its rank's ids and every step's ranges, and loads as one
// run; the slow member of each SP pair has the slow timeline.
TEST(SimulatedRun, EveryRankFileIsAnOrdinaryTrace) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "ulysses_sim_written";
  fs::remove_all(dir);
  sim::SimulatedRun run;
  run.cfg = tiny_cfg();
  run.cfg.parallel.dp_size = 8;
  run.hw = simple_hw();
  run.hw.rank_skew = 0.5;
  run.program = chunked_layer();
  const sim::WriteStats st = sim::write_simulated_run(dir.string(), run, 2);
  EXPECT_EQ(st.rank_files, 16);
  // A trace written the ordinary way (WAL while written, rollback mode once closed).
  const fs::path ref = dir.parent_path() / "ulysses_sim_reference.sqlite";
  {
    prof::TracerOptions o;
    o.path = ref.string();
    prof::TraceWriter w(o, 1);
    w.close();
  }
  const std::string schema_sql =
      "SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1";
  const std::string ref_schema = query_text(ref.string(), schema_sql);
  ASSERT_FALSE(ref_schema.empty());
  for (int r = 0; r < 16; ++r) {
    const std::string f = run_layout::rank_trace(dir.string(), r).string();
    ASSERT_TRUE(fs::is_regular_file(f)) << f;
    for (const char* side : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(f + side)) << f << side;
    EXPECT_EQ(query_text(f, "PRAGMA journal_mode"), "delete\n") << f;
    EXPECT_EQ(query_text(f, schema_sql), ref_schema) << f;
    EXPECT_EQ(query_text(f, "SELECT rank FROM ULYSSES_RANKS"), std::to_string(r) + "\n");
    EXPECT_EQ(query_text(f, "SELECT count(*) FROM NVTX_EVENTS"), std::to_string(2 * run.program.ops.size()) + "\n");
  }
  const prof::TraceModel m = prof::load_trace(dir.string());
  EXPECT_EQ(m.ranks.size(), 16u);
  // Chunk 0's seq->head exchange, step 0, on ranks 0 (typical) and 1 (the slow member).
  int64_t start[2] = {-1, -1}, end[2] = {-1, -1};
  for (const auto& x : m.ranges) {
    if (x.rank > 1 || x.step != 0 || x.phase != Phase::A2ASeqToHead || x.chunk != 0) continue;
    start[x.rank] = x.start_ns, end[x.rank] = x.end_ns;
  }
  EXPECT_GT(start[0], 0);
  EXPECT_GT(start[1], start[0]) << "the slow member enters the exchange later";
  EXPECT_EQ(end[0], end[1]) << "both leave it together";
  fs::remove_all(dir);
  fs::remove(ref);
}

// CPU ranks share the node's cores with each other and with the machine's other runnable
// processes: 2 ranks alone get half the node each; beside 2 background processes, a quarter.
TEST(StepSim, CpuRanksShareTheCoresWithTheBackgroundLoad) {
  sim::Hardware hw = simple_hw();
  hw.shared_compute = true;
  hw.gpus_per_node = 64;
  hw.memory_bandwidth = 1e18;
  sim::StepShape s = sim::StepShape::of(tiny_cfg());  // sp 2: 2 ranks
  sim::Work w;
  w.flops = 1e9;
  w.kind = "mlp_fwd";
  EXPECT_NEAR(sim::compute_seconds(w, s, hw), 2e-3, 1e-12);  // 1 GFLOP at 1/2 of 1 TFLOP/s
  hw.background_load = 2;
  EXPECT_NEAR(sim::compute_seconds(w, s, hw), 4e-3, 1e-12);  // at 1/4
  s.world = 4;
  EXPECT_NEAR(sim::compute_seconds(w, s, hw), 6e-3, 1e-12);  // 4 ranks + 2: at 1/6
  hw.shared_compute = false;
  EXPECT_NEAR(sim::compute_seconds(w, s, hw), 1e-3, 1e-12) << "a GPU is its rank's own";
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
