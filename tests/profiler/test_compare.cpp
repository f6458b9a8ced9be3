// Run comparison (profiler/compare.hpp) on two hand-built traces whose every phase and layer
// duration is known: medians over steps of the time per rank, warm-up step 0 left out, a
// phase present in one run only, GPU kernel time per phase, and `ulysses-trace compare`
// (exit codes, JSON keys and values) on two run folders written through TraceWriter.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/compare.hpp"
#include "ulysses/profiler/trace_writer.hpp"

using namespace ut;
using prof::CompareSection;
using prof::Direction;
using prof::LaneKind;
using prof::Phase;

namespace {

// Two ranks, steps 0..3, each step a window [s*20000, s*20000 + 10000) with, per direction
// (fwd, bwd) and layer (0, 1), one block on the main lane: qkv_proj 100, attention A,
// out_proj 50 (then, in run B, mlp 70 in forward blocks); on the comm lane the seq->head
// all-to-all (40) starts with qkv_proj (fully overlapped) and the head->seq one (80) with
// out_proj (50 overlapped, 30 exposed); the next block starts when it ends.
//   A(layer, dir, step, rank) = base + warm(step) + 10 * rank
//   base: layer 0 fwd 200, layer 1 fwd 300, layer 0 bwd 400, layer 1 bwd 600
//   warm: step 0 +1000 (warm-up, left out), step 1 0, step 2 +100, step 3 +20
// Run B ("slow") doubles layer 1's forward attention: 2 * (300 + warm + 10 * rank).
// Per step the mean over the two ranks adds 5 (2 * 5 in B's doubled one); the median of
// warm over steps 1..3 is 20 (mean would be 40).
constexpr int64_t kWall = 10000;
const int kWarm[] = {1000, 0, 100, 20};

int64_t attention_ns(int layer, Direction dir, int step, int rank, bool slow) {
  const int64_t base = dir == Direction::Forward ? (layer == 0 ? 200 : 300) : (layer == 0 ? 400 : 600);
  const int64_t a = base + kWarm[step] + 10 * rank;
  return slow && layer == 1 && dir == Direction::Forward ? 2 * a : a;
}

prof::TraceModel make_run(bool slow, const std::string& name) {
  std::vector<LaneSpec> lanes;
  for (int rank = 0; rank < 2; ++rank) {
    LaneSpec main{rank, LaneKind::HostThread, "main", {}};
    LaneSpec comm{rank, LaneKind::Comm, "comm", {}};
    for (int step = 0; step < 4; ++step) {
      const int64_t t0 = step * 20000;
      main.ranges.push_back(R(t0, t0 + kWall, Phase::Step, step));
      int64_t x = t0 + 10;
      for (Direction dir : {Direction::Forward, Direction::Backward}) {
        for (int layer = 0; layer < 2; ++layer) {
          const int64_t a = attention_ns(layer, dir, step, rank, slow);
          auto add = [&](LaneSpec& l, int64_t s, int64_t e, Phase p) {
            SpecRange r = R(s, e, p, step, layer);
            r.dir = dir;
            if (prof::phase_is_comm(p)) r.bytes_sent = 1000;
            l.ranges.push_back(r);
          };
          add(main, x, x + 100, Phase::QkvProj);
          add(comm, x, x + 40, Phase::A2ASeqToHead);
          add(main, x + 100, x + 100 + a, Phase::Attention);
          add(main, x + 100 + a, x + 150 + a, Phase::OutProj);
          add(comm, x + 100 + a, x + 180 + a, Phase::A2AHeadToSeq);
          x += 180 + a;
          if (slow && dir == Direction::Forward) {
            add(main, x, x + 70, Phase::Mlp);
            x += 70;
          }
        }
      }
    }
    lanes.push_back(main);
    lanes.push_back(comm);
  }
  auto m = make_model(lanes);
  m.source = name;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 4; ++step) {
      add_step(m, rank, step, step * 20000, step * 20000 + kWall);
      m.steps.back().tokens_per_s = slow ? 500 : 1000;
      m.steps.back().step_ms = 0.01;
    }
  }
  return m;
}

const prof::CompareRow& row(const prof::Comparison& c, CompareSection s, const std::string& key) {
  const prof::CompareRow* r = c.find(s, key);
  if (!r) {
    static prof::CompareRow none;
    ADD_FAILURE() << "no row " << key;
    return none;
  }
  return *r;
}

void expect_row(const prof::Comparison& c, CompareSection s, const std::string& key, double a, double b) {
  const auto& r = row(c, s, key);
  EXPECT_TRUE(r.has_a && r.has_b) << key;
  EXPECT_DOUBLE_EQ(r.a, a) << key;
  EXPECT_DOUBLE_EQ(r.b, b) << key;
  EXPECT_DOUBLE_EQ(r.diff, b - a) << key;
  if (a != 0) {
    EXPECT_TRUE(r.has_ratio) << key;
    EXPECT_DOUBLE_EQ(r.ratio, b / a) << key;
    EXPECT_EQ(r.flagged, std::fabs(b / a - 1) > 0.10) << key;
  }
}

}  // namespace

TEST(Compare, PhaseAndLayerMediansEqualHandComputedTimes) {
  const auto a = make_run(false, "A"), b = make_run(true, "B");
  const auto c = prof::compare_summaries(a, prof::analyze(a), b, prof::analyze(b));
  EXPECT_EQ(c.a.source, "A");
  EXPECT_EQ(c.a.world_size, 2);
  EXPECT_EQ(c.a.steps, 4);
  EXPECT_EQ(c.a.counted, 3);  // step 0 left out

  // Layer rows: base + median warm (20) + mean over ranks (5); B's layer 1 fwd doubled.
  expect_row(c, CompareSection::Layer, "layer 0 attention fwd", 225, 225);
  expect_row(c, CompareSection::Layer, "layer 1 attention fwd", 325, 650);
  expect_row(c, CompareSection::Layer, "layer 0 attention bwd", 425, 425);
  expect_row(c, CompareSection::Layer, "layer 1 attention bwd", 625, 625);
  expect_row(c, CompareSection::Layer, "layer 1 qkv_proj fwd", 100, 100);
  expect_row(c, CompareSection::Layer, "layer 0 a2a_head_to_seq bwd", 80, 80);
  EXPECT_DOUBLE_EQ(row(c, CompareSection::Layer, "layer 1 attention fwd").ratio, 2.0);
  EXPECT_TRUE(row(c, CompareSection::Layer, "layer 1 attention fwd").flagged);
  EXPECT_FALSE(row(c, CompareSection::Layer, "layer 0 attention fwd").flagged);

  // Phase rows: the two layers' sums.
  expect_row(c, CompareSection::Phase, "attention fwd", 225 + 325, 225 + 650);
  expect_row(c, CompareSection::Phase, "attention bwd", 425 + 625, 425 + 625);
  expect_row(c, CompareSection::Phase, "qkv_proj fwd", 200, 200);
  expect_row(c, CompareSection::Phase, "out_proj bwd", 100, 100);
  expect_row(c, CompareSection::Phase, "a2a_seq_to_head fwd", 80, 80);
  expect_row(c, CompareSection::Phase, "a2a_head_to_seq fwd", 160, 160);

  // Headline: per rank per step, median over steps 1..3.
  //   compute = 4 * (100 + 50) + sum of attention (+ 2 * 70 mlp in B)
  //     A: 600 + (1500 + 4 * 20 + 4 * 5) = 2200;  B: 600 + 140 + (1800 + 5 * 20 + 25) = 2665
  //   comm = 4 * (40 + 80) = 480, exposed = 4 * 30 = 120; idle = 10000 - (compute + exposed)
  expect_row(c, CompareSection::Headline, "step_ns", kWall, kWall);
  expect_row(c, CompareSection::Headline, "compute_ns", 2200, 2665);
  expect_row(c, CompareSection::Headline, "comm_ns", 480, 480);
  expect_row(c, CompareSection::Headline, "exposed_comm_ns", 120, 120);
  expect_row(c, CompareSection::Headline, "idle_ns", kWall - 2320, kWall - 2785);
  expect_row(c, CompareSection::Headline, "overlap_ratio", 0.75, 0.75);  // 4 * 90 / 480
  expect_row(c, CompareSection::Headline, "tokens_per_s", 1000, 500);
  expect_row(c, CompareSection::Headline, "a2a_bytes_per_step", 8000, 8000);  // 8 ranges x 1000
  const auto& ar = row(c, CompareSection::Headline, "allreduce_bytes_per_step");
  EXPECT_TRUE(ar.has_a && ar.has_b);
  EXPECT_FALSE(ar.has_ratio);  // 0 / 0
  EXPECT_FALSE(ar.flagged);
  EXPECT_EQ(c.find(CompareSection::Headline, "peak_memory_bytes"), nullptr);  // no memory samples

  // Flagged at 10 %: compute (x1.21), tokens/s, attention fwd, layer 1 attention fwd; idle
  // (7215 / 7680 = 0.94) is not.
  EXPECT_FALSE(row(c, CompareSection::Headline, "idle_ns").flagged);
  EXPECT_EQ(c.flagged(), 4);
  // Order: headline, then phases, then layers.
  ASSERT_FALSE(c.rows.empty());
  EXPECT_EQ(c.rows.front().section, CompareSection::Headline);
  EXPECT_EQ(c.rows.back().section, CompareSection::Layer);
}

TEST(Compare, PhaseInOneRunOnlyHasTheOtherSideEmpty) {
  const auto a = make_run(false, "A"), b = make_run(true, "B");
  const auto c = prof::compare_summaries(a, prof::analyze(a), b, prof::analyze(b));
  for (const auto& key : {std::string("mlp fwd"), std::string("layer 0 mlp fwd"), std::string("layer 1 mlp fwd")}) {
    const auto& r = row(c, key.rfind("layer", 0) == 0 ? CompareSection::Layer : CompareSection::Phase, key);
    EXPECT_FALSE(r.has_a) << key;
    EXPECT_TRUE(r.has_b) << key;
    EXPECT_FALSE(r.has_ratio) << key;
    EXPECT_FALSE(r.flagged) << key;
  }
  EXPECT_DOUBLE_EQ(row(c, CompareSection::Phase, "mlp fwd").b, 140);
  EXPECT_DOUBLE_EQ(row(c, CompareSection::Layer, "layer 1 mlp fwd").b, 70);
  // Swapped: A has it, B not.
  const auto d = prof::compare_summaries(b, prof::analyze(b), a, prof::analyze(a));
  EXPECT_TRUE(row(d, CompareSection::Phase, "mlp fwd").has_a);
  EXPECT_FALSE(row(d, CompareSection::Phase, "mlp fwd").has_b);
  EXPECT_DOUBLE_EQ(row(d, CompareSection::Layer, "layer 1 attention fwd").ratio, 0.5);

  const auto j = prof::comparison_to_json(c);
  bool seen = false;
  for (const auto& r : j["rows"]) {
    if (r["key"] != "mlp fwd") continue;
    seen = true;
    EXPECT_TRUE(r["a"].is_null());
    EXPECT_DOUBLE_EQ(r["b"].get<double>(), 140);
    EXPECT_TRUE(r["diff"].is_null());
    EXPECT_TRUE(r["ratio"].is_null());
    EXPECT_EQ(r["phase"], "mlp");
    EXPECT_EQ(r["direction"], "fwd");
  }
  EXPECT_TRUE(seen);
  const std::string text = prof::comparison_to_text(c);
  EXPECT_NE(text.find("mlp fwd ms"), std::string::npos) << text;
  EXPECT_NE(text.find("layer 1 attention fwd ms"), std::string::npos) << text;
}

TEST(Compare, SameRunTwiceFlagsNothing) {
  const auto a = make_run(false, "A");
  const auto s = prof::analyze(a);
  const auto c = prof::compare_summaries(a, s, a, s);
  EXPECT_EQ(c.flagged(), 0);
  for (const auto& r : c.rows) {
    EXPECT_TRUE(r.has_a && r.has_b) << r.key;
    EXPECT_DOUBLE_EQ(r.diff, 0) << r.key;
    if (r.has_ratio) {
      EXPECT_DOUBLE_EQ(r.ratio, 1) << r.key;
    }
  }
  // Threshold 0 still flags nothing here; against the slow run it adds idle to the four
  // rows flagged at 10 %.
  prof::CompareOptions o;
  o.threshold = 0;
  EXPECT_EQ(prof::compare_summaries(a, s, a, s, o).flagged(), 0);
  const auto b = make_run(true, "B");
  EXPECT_EQ(prof::compare_summaries(a, s, b, prof::analyze(b), o).flagged(), 5);
}

// A run without step records against one with steps: its times are totals over the whole trace,
// the other's per-step medians. Said in the text (it compared the two unflagged) and in JSON.
TEST(Compare, ARunWithoutStepRecordsIsSaidNotCompared) {
  const auto a = make_run(false, "A");
  auto b = make_run(false, "B");
  b.steps.clear();
  const auto c = prof::compare_summaries(a, prof::analyze(a), b, prof::analyze(b));
  EXPECT_FALSE(c.a.no_step_records);
  EXPECT_TRUE(c.b.no_step_records);
  const std::string text = prof::comparison_to_text(c);
  EXPECT_NE(text.find("no step records: its times are over the whole trace"), std::string::npos) << text;
  EXPECT_NE(text.find("Note: B has no step records"), std::string::npos) << text;
  const auto j = prof::comparison_to_json(c);
  EXPECT_EQ(j["a"]["step_records"], true);
  EXPECT_EQ(j["b"]["step_records"], false);
  // Both without: said per side, no note (they compare like with like).
  const auto d = prof::compare_summaries(b, prof::analyze(b), b, prof::analyze(b));
  EXPECT_EQ(prof::comparison_to_text(d).find("Note:"), std::string::npos);
}

TEST(Compare, GpuRankPhaseTimeIsTheUnionOfItsKernels) {
  // One rank, step [0,1000): host attention range [0,900) (ignored on a GPU rank); kernels
  // launched from it on two streams [100,400) and [300,500): union 400; a memcpy [600,700)
  // does not count.
  auto host = R(0, 900, Phase::Attention, 0, 0);
  host.dir = Direction::Forward;
  auto k1 = R(100, 400, Phase::Attention, 0, 0), k2 = R(300, 500, Phase::Attention, 0, 0),
       cp = R(600, 700, Phase::Attention, 0, 0);
  for (auto* k : {&k1, &k2, &cp}) {
    k->is_kernel = true;
    k->dir = Direction::Forward;
  }
  auto m = make_model({{0, LaneKind::HostThread, "main", {R(0, 1000, Phase::Step), host}},
                       {0, LaneKind::CudaStream, "stream 7", {k1, cp}},
                       {0, LaneKind::CudaStream, "stream 8", {k2}}});
  m.strings.push_back("flash_fwd_kernel");
  m.strings.push_back("[CUDA memcpy HtoD]");
  for (auto& r : m.ranges.rows()) {
    if (!r.is_kernel) continue;
    r.name_id = static_cast<int32_t>(m.strings.size()) - (r.start_ns == 600 ? 1 : 2);
  }
  add_step(m, 0, 0, 0, 1000);
  const auto times = prof::phase_times(m);
  int64_t total = -1, layer0 = -1;
  for (const auto& t : times) {
    if (t.phase != Phase::Attention || t.dir != Direction::Forward) continue;
    (t.layer < 0 ? total : layer0) = t.ns;
  }
  EXPECT_EQ(total, 400);
  EXPECT_EQ(layer0, 400);
  const auto c = prof::compare_summaries(m, prof::analyze(m), m, prof::analyze(m));
  EXPECT_DOUBLE_EQ(row(c, CompareSection::Phase, "attention fwd").a, 400);
}

// ---- ulysses-trace compare ----------------------------------------------------------------

namespace {

// RUN/trace/rank0.sqlite: steps 0..2 of 10 us each; per step a forward attention range of
// layer 0 lasting `attn_ns` and a seq->head all-to-all of 1 us on the comm lane.
void write_run(const std::string& dir, int64_t attn_ns) {
  fs::create_directories(fs::path(dir) / "trace");
  prof::TracerOptions o = options_for((fs::path(dir) / "trace" / "rank0.sqlite").string(), 0, 1);
  prof::TraceWriter w(o, 4242);
  w.name_thread(100, "main");
  for (int s = 0; s < 3; ++s) {
    const int64_t t = 1'000'000 + s * 100'000;
    w.begin();
    prof::RangeRecord r;
    r.tid = 100;
    r.step = s;
    r.start_ns = t + 1000;
    r.end_ns = t + 1000 + attn_ns;
    r.info.phase = Phase::Attention;
    r.info.dir = Direction::Forward;
    r.info.layer = 0;
    w.write_range(r);
    prof::RangeRecord c = r;
    c.tid = prof::kCommTid;
    c.push_pop = false;
    c.start_ns = t + 100;
    c.end_ns = t + 1100;
    c.info.phase = Phase::A2ASeqToHead;
    c.info.bytes_sent = 4096;
    w.write_range(c);
    prof::StepRecord sr;
    sr.step = s;
    sr.tokens = 1024;
    sr.step_ms = 0.01;
    sr.tokens_per_s = 1024 / 1e-5;
    w.write_step(sr, t, t + 10'000);
    w.commit();
  }
  w.close();
}

int run_cli(const std::string& args, std::string* out = nullptr) {
#ifdef ULYSSES_TRACE_BIN
  std::FILE* p = ::popen((std::string(ULYSSES_TRACE_BIN) + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int st = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
#else
  (void)args;
  (void)out;
  return -2;
#endif
}

}  // namespace

TEST(CompareCli, ExitsTwoOnBadInputAndPrintsJsonKeys) {
#ifndef ULYSSES_TRACE_BIN
  GTEST_SKIP() << "ulysses-trace not built";
#endif
  TempDir tmp;
  const std::string a = tmp.path + "/a", b = tmp.path + "/b";
  write_run(a, 2000);
  write_run(b, 4000);
  { std::ofstream(tmp.path + "/text.sqlite") << "this is not a database, just some text that is long enough\n"; }
  fs::create_directories(tmp.path + "/emptyrun/trace");
  ASSERT_EQ(::mkfifo((tmp.path + "/fifo").c_str(), 0600), 0);
  for (const std::string& bad :
       {tmp.path + "/nope", tmp.path + "/text.sqlite", tmp.path + "/emptyrun", tmp.path + "/fifo"}) {
    EXPECT_EQ(run_cli("compare '" + a + "' '" + bad + "'"), 2) << bad;
    EXPECT_EQ(run_cli("compare '" + bad + "' '" + b + "' --json"), 2) << bad;
  }
  EXPECT_EQ(run_cli("compare '" + a + "'"), 2);  // RUN_B missing
  EXPECT_EQ(run_cli("compare '" + a + "' '" + b + "' --threshold -1"), 2);
  EXPECT_EQ(run_cli("compare '" + a + "' '" + b + "' --threshold 0x10"), 2);  // read as 16
  {  // the threshold printed as given (0.125 is not "12%")
    std::string t;
    ASSERT_EQ(run_cli("compare '" + a + "' '" + b + "' --threshold 0.125", &t), 0);
    EXPECT_NE(t.find("more than 12.5%"), std::string::npos) << t;
  }

  std::string text;
  ASSERT_EQ(run_cli("compare '" + a + "' '" + b + "'", &text), 0);
  EXPECT_NE(text.find("layer 0 attention fwd ms"), std::string::npos) << text;

  std::string out;
  ASSERT_EQ(run_cli("compare '" + a + "' '" + b + "' --json", &out), 0);
  const auto j = nlohmann::json::parse(out);
  for (const char* k : {"a", "b", "statistic", "threshold", "flagged", "rows"}) EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"source", "world_size", "steps", "counted_steps"}) EXPECT_TRUE(j["a"].contains(k)) << k;
  EXPECT_EQ(j["a"]["steps"], 3);
  EXPECT_EQ(j["a"]["counted_steps"], 2);
  bool layer_seen = false, phase_seen = false, step_seen = false;
  for (const auto& r : j["rows"]) {
    for (const char* k : {"section", "key", "unit", "a", "b", "diff", "ratio", "flagged"})
      EXPECT_TRUE(r.contains(k)) << k;
    if (r["key"] == "layer 0 attention fwd") {
      layer_seen = true;
      EXPECT_EQ(r["section"], "layer");
      EXPECT_EQ(r["layer"], 0);
      EXPECT_EQ(r["phase"], "attention");
      EXPECT_EQ(r["direction"], "fwd");
      EXPECT_EQ(r["unit"], "ns");
      EXPECT_DOUBLE_EQ(r["a"].get<double>(), 2000);
      EXPECT_DOUBLE_EQ(r["b"].get<double>(), 4000);
      EXPECT_DOUBLE_EQ(r["diff"].get<double>(), 2000);
      EXPECT_DOUBLE_EQ(r["ratio"].get<double>(), 2.0);
      EXPECT_EQ(r["flagged"], true);
    }
    if (r["key"] == "a2a_seq_to_head fwd") {
      phase_seen = true;
      EXPECT_DOUBLE_EQ(r["ratio"].get<double>(), 1.0);
      EXPECT_EQ(r["flagged"], false);
    }
    if (r["key"] == "step_ns") {
      step_seen = true;
      EXPECT_EQ(r["section"], "headline");
      EXPECT_DOUBLE_EQ(r["a"].get<double>(), 10000);
    }
  }
  EXPECT_TRUE(layer_seen && phase_seen && step_seen) << out;
}
