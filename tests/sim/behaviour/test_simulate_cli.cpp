// ulysses-run --simulate end to end: the step recorded from the engine's own Trainer::step on
// the meta device, replayed by engine/sim, written as a run folder. The simulated timelines keep
// the engine's dependencies (an all-to-all never starts before the range that makes its input;
// with head chunks, chunk c's attention overlaps chunk c+1's exchange; a ZeRO-3 gather is
// prefetched under the previous layer's compute), and the folder opens in every ulysses-trace
// command, the comparison with a measured run included.
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/e2e_util.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace {

using namespace ulysses;
using prof::Direction;
using prof::Phase;
using test::sh;

std::string q(const std::string& s) { return "'" + s + "'"; }

// Simulates `cfg` on `hw` into a fresh folder; the folder.
std::string simulate(const std::string& name, const nlohmann::json& cfg, const std::string& hw) {
  const std::string dir = test::scratch_path("sim", name);
  std::filesystem::remove_all(dir);
  const std::string cfg_path = test::write_json(dir + ".json", cfg);
  const auto p = sh(std::string(ULYSSES_RUN_BIN) + " " + q(cfg_path) + " --simulate " + hw + " --out " + q(dir) +
                        " --worker " + ULYSSES_WORKER_BIN,
                    "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  return dir;
}

std::vector<prof::TraceRange> ranges_of(const prof::TraceModel& m, int32_t rank, int64_t step) {
  std::vector<prof::TraceRange> out;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const prof::TraceRange r = m.ranges[i];
    const auto kind = m.lanes[static_cast<size_t>(r.lane)].kind;
    if (r.rank == rank && r.step == step && kind != prof::LaneKind::HeadRange) out.push_back(r);
  }
  return out;
}

bool is_leaf_attention(const prof::TraceModel& m, const prof::TraceRange& r) {
  return r.phase == Phase::Attention && r.chunk >= 0;
}

TEST(SimulateCli, ListAndBadInput) {
  const std::string run = ULYSSES_RUN_BIN, worker = std::string(" --worker ") + ULYSSES_WORKER_BIN;
  auto p = sh(run + " --simulate list" + worker, "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  for (const char* n : {"h100-sxm-x8", "h200-x8", "a100-sxm-x8", "h100-ib-cluster", "cpu-ranks"})
    EXPECT_NE(p.out.find(n), std::string::npos) << p.out;
  const std::string cfg =
      test::write_json(test::scratch_path("sim", "bad.json"), test::tiny_config(2, 2, ULYSSES_SOURCE_DIR));
  p = sh(run + " " + q(cfg) + " --simulate no-such-gpu --out " + q(test::scratch_path("sim", "bad")) + worker, "",
         true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("h200-x8"), std::string::npos) << "names what exists: " << p.out;
  p = sh(run + " " + q(cfg) + " --simulate h200-x8" + worker, "", true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("--out"), std::string::npos) << p.out;
  p = sh(run + " --simulate h200-x8 --out " + q(test::scratch_path("sim", "bad2")) + worker, "", true);
  EXPECT_EQ(p.code, 2) << p.out;
}

TEST(SimulateCli, AllToAllNeverBeforeItsInputs) {
  const std::string dir = simulate("sp2", test::tiny_config(2, 2, ULYSSES_SOURCE_DIR), "cpu-ranks");
  const prof::TraceModel m = prof::load_trace(dir);
  ASSERT_EQ(m.sp_size, 2);
  const auto rec = nlohmann::json::parse(test::slurp(dir + "/run.json"));
  EXPECT_EQ(rec["status"], "finished");
  EXPECT_EQ(rec["simulated"]["hardware"], "cpu-ranks");
  int checked = 0;
  for (int32_t rank : {0, 1}) {
    const auto rs = ranges_of(m, rank, 1);
    for (const auto& a : rs) {
      if (a.phase != Phase::A2ASeqToHead && a.phase != Phase::A2AHeadToSeq) continue;
      const bool fwd = a.dir == Direction::Forward;
      // What makes its input: forward seq->head the q/k/v projection, forward head->seq the
      // chunk's attention; backward head->seq (grad of the output) the output projection's
      // backward, backward seq->head (dq, dk, dv) the chunk's attention backward.
      const Phase input = a.phase == Phase::A2ASeqToHead ? (fwd ? Phase::QkvProj : Phase::Attention)
                                                         : (fwd ? Phase::Attention : Phase::OutProj);
      for (const auto& c : rs) {
        if (c.phase != input || c.layer != a.layer || c.dir != a.dir) continue;
        if (input == Phase::Attention && !(is_leaf_attention(m, c) && c.chunk == a.chunk)) continue;
        EXPECT_GE(a.start_ns, c.end_ns) << prof::phase_name(a.phase) << " " << prof::direction_name(a.dir) << " layer "
                                        << a.layer << " rank " << rank;
        ++checked;
      }
      // The attention that consumes it starts after it arrived.
      const bool feeds_attention = a.phase == (fwd ? Phase::A2ASeqToHead : Phase::A2AHeadToSeq);
      for (const auto& c : rs) {
        if (!feeds_attention || !is_leaf_attention(m, c) || c.layer != a.layer || c.dir != a.dir || c.chunk != a.chunk)
          continue;
        EXPECT_GE(c.start_ns, a.end_ns) << "attention before its all-to-all, layer " << a.layer;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 6);  // 2 ranks x 2 layers x (4 exchanges' inputs + 2 consumers)
}

TEST(SimulateCli, HeadChunksOverlapTheNextChunksExchange) {
  auto cfg = test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["parallel"]["head_chunks"] = 2;
  cfg["train"]["seq_length"] = 1024;
  const std::string dir = simulate("chunks", cfg, "h100-sxm-x8");
  const prof::TraceModel m = prof::load_trace(dir);
  const auto rs = ranges_of(m, 0, 1);
  int pairs = 0;
  for (const auto& att : rs) {
    if (!is_leaf_attention(m, att) || att.dir != Direction::Forward || att.chunk != 0) continue;
    for (const auto& x : rs) {
      if (x.phase != Phase::A2ASeqToHead || x.dir != Direction::Forward || x.layer != att.layer || x.chunk != 1)
        continue;
      EXPECT_LT(x.start_ns, att.end_ns) << "layer " << att.layer;
      EXPECT_GT(x.end_ns, att.start_ns) << "layer " << att.layer;
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 2);  // one per layer
}

TEST(SimulateCli, Zero3GatherPrefetchedUnderThePreviousLayer) {
  auto cfg = test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["parallel"]["dp_size"] = 2;
  cfg["train"]["zero_stage"] = 3;
  const std::string dir = simulate("zero3", cfg, "h100-sxm-x8");
  const prof::TraceModel m = prof::load_trace(dir);
  const auto rs = ranges_of(m, 0, 1);
  bool under = false;
  int prefetched = 0;
  for (const auto& g : rs) {
    if (g.phase != Phase::GradAllReduce || g.dir != Direction::None || g.chunk != 1 || g.layer < 1) continue;
    ++prefetched;
    for (const auto& c : rs)
      if (c.layer == g.layer - 1 && c.dir == Direction::Forward && !prof::phase_is_comm(c.phase) &&
          c.start_ns < g.end_ns && g.start_ns < c.end_ns)
        under = true;
  }
  EXPECT_GE(prefetched, 1);
  EXPECT_TRUE(under) << "no prefetched gather of layer l+1 ran while layer l computed";
}

TEST(SimulateCli, OpensInEveryTraceCommandAndComparesWithAMeasuredRun) {
  auto cfg = test::tiny_config(2, 3, ULYSSES_SOURCE_DIR);
  cfg["profile"] = {{"enabled", true}};
  const std::string sim = simulate("views", cfg, "cpu-ranks");
  const std::string measured = test::scratch_path("sim", "measured");
  std::filesystem::remove_all(measured);
  const std::string cfg_path = test::write_json(measured + ".json", cfg);
  auto p =
      sh(std::string(ULYSSES_RUN_BIN) + " " + q(cfg_path) + " --out " + q(measured) + " --worker " + ULYSSES_WORKER_BIN,
         "", true);
  ASSERT_EQ(p.code, 0) << p.out;
  const std::string tr = ULYSSES_TRACE_BIN;
  p = sh(tr + " summary " + q(sim), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("SIMULATED"), std::string::npos) << "the summary says it is simulated: " << p.out;
  p = sh(tr + " summary --json " + q(sim), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  p = sh(tr + " export --format chrome " + q(sim) + " " + q(sim + ".chrome.json"), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_TRUE(std::filesystem::file_size(sim + ".chrome.json") > 1000);
  p = sh(tr + " report " + q(sim) + " --html " + q(sim + ".html"), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  // prepare writes no cache beside a trace modified in the last 2 s (it may still be written):
  // on a fast machine the simulated run is younger than that here.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  p = sh(tr + " prepare " + q(sim), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  p = sh(tr + " compare " + q(measured) + " " + q(sim), "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("a2a_seq_to_head"), std::string::npos) << p.out;
  // The scalar collectives no caller traces (the loss sum and token count, the peak memory's
  // max): the ranks wait in them, so the simulated step has each where the measured one has it.
  auto collectives = [](const std::string& dir) {
    const prof::TraceModel m = prof::load_trace(dir);
    int n = 0;
    for (const auto& r : ranges_of(m, 0, 1)) n += r.phase == Phase::Collective ? 1 : 0;
    return n;
  };
  const int measured_collectives = collectives(measured);
  EXPECT_GE(measured_collectives, 2);
  EXPECT_EQ(collectives(sim), measured_collectives);
}

}  // namespace
