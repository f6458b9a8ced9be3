// End to end through ulysses-run and real workers (sp 4, Gloo, CPU): faults.slow_rank /
// faults.delay_ms make a straggler, and the waiting analysis must name it. Rank 2's trace
// clock is also moved 1000 s ahead (ULYSSES_TEST_CLOCK_OFFSET), so the analysis only finds
// the straggler if the measured clock offsets align the ranks: checked against the injected
// offset and the reported error bound. Without faults the median arrival skew is small.
// With dp 2 x sp 2 and a straggler, the ranks of the other SP group wait for it only at the
// world collectives (the loss and token all-reduce first): every blocking call is a range, so
// the waiting analysis sees their wait and no rank's time goes unexplained.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "common/e2e_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
namespace prof = ulysses::prof;

namespace {
constexpr double kDelayMs = 50;
constexpr int64_t kInjectedOffsetNs = 1000LL * 1000000000LL;  // rank 2's clock: 1000 s ahead

using ulysses::test::sh;

std::string tmp(const std::string& name) { return ulysses::test::scratch_path("straggler", name); }

// Tiny GQA model (H 4, Hkv 2 replicated to 4), sp 4, one message per all-to-all (fused q/k/v).
std::string config_file() {
  json c = ulysses::test::tiny_config(4, 3, ULYSSES_SOURCE_DIR);
  c["parallel"]["fused_qkv"] = true;
  c["profile"] = {{"memory", false}};
  return ulysses::test::write_json(tmp("config.json"), c);
}

prof::TraceModel run(const std::string& name, const std::string& sets, const std::string& env = "") {
  const std::string out = tmp(name);
  fs::remove_all(out);
  auto r = sh(env + " " + std::string(ULYSSES_RUN_BIN) + " " + config_file() + " " + sets + " --worker " +
              ULYSSES_WORKER_BIN + " --out " + out + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  return prof::load_trace(out);
}

bool is_a2a(const prof::CollectiveInstance& c) {
  return c.phase == prof::Phase::A2ASeqToHead || c.phase == prof::Phase::A2AHeadToSeq;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

TEST(Straggler, SlowRankIsTheLastArriverOnAlignedClocks) {
  const auto m = run("slow", "--set faults.slow_rank=1 --set faults.delay_ms=50",
                     "ULYSSES_TEST_CLOCK_OFFSET=2:" + std::to_string(kInjectedOffsetNs));
  // One clock: rank 2's measured offset matches the injected one within its error bound.
  const prof::ClockInfo* c2 = nullptr;
  for (const auto& c : m.clocks)
    if (c.rank == 2) c2 = &c;
  ASSERT_NE(c2, nullptr) << "no ULYSSES_CLOCK rows for rank 2";
  ASSERT_TRUE(c2->has_start && c2->has_close);
  EXPECT_LE(std::llabs(c2->start_offset_ns - kInjectedOffsetNs), c2->start_error_ns);
  EXPECT_LE(std::llabs(c2->close_offset_ns - kInjectedOffsetNs), c2->close_error_ns);
  EXPECT_TRUE(c2->applied);
  EXPECT_GT(m.clock_error_ns(), 0);
  EXPECT_LT(m.clock_error_ns(), 20000000) << "a loopback store round trip is far below 40 ms";
  std::printf(
      "[ figures ] clock: rank 2 offset %lld ns (injected %lld), error bound +-%lld ns; max error over ranks %lld ns\n",
      static_cast<long long>(c2->start_offset_ns), static_cast<long long>(kInjectedOffsetNs),
      static_cast<long long>(c2->start_error_ns), static_cast<long long>(m.clock_error_ns()));

  // Stragglers on the aligned clock.
  const prof::WaitingAnalysis w = prof::waiting_analysis(m);
  std::vector<const prof::CollectiveInstance*> a2a;
  for (const auto& c : w.instances)
    if (is_a2a(c)) a2a.push_back(&c);
  // 3 steps x 2 layers x (2 forward + 2 backward) all-to-alls.
  ASSERT_EQ(a2a.size(), 24u);
  EXPECT_EQ(w.incomplete, 0);
  int last1 = 0;
  std::vector<double> others_wait_ms;
  for (const auto* c : a2a) {
    ASSERT_EQ(c->arrivals.size(), 4u);
    last1 += c->last_arriver == 1;
    for (const auto& a : c->arrivals)
      if (a.rank != 1) others_wait_ms.push_back(double(c->last_arrival_ns - a.arrive_ns) / 1e6);
  }
  const double frac = double(last1) / double(a2a.size());
  const double med_wait = median(others_wait_ms);
  std::printf(
      "[ figures ] faults.slow_rank=1 delay 50 ms: rank 1 last in %d/%zu all-to-alls (%.0f%%), others' wait per "
      "collective median %.1f ms, median skew %.1f ms\n",
      last1, a2a.size(), 100 * frac, med_wait, w.median_skew_ns / 1e6);
  EXPECT_GE(frac, 0.9);
  // Each other rank waits about the injected delay per collective: median within 50 +- 25 ms
  // (measured 57 ms on the loaded 2-core VM: the slow rank's own compute adds to its sleep).
  EXPECT_NEAR(med_wait, kDelayMs, 25.0);
  // Rank 1 caused (nearly) all the waiting and suffered little of it.
  ASSERT_EQ(w.ranks.size(), 4u);
  for (const auto& r : w.ranks)
    if (r.rank != 1) {
      EXPECT_LT(r.wait_caused_ns, w.ranks[1].wait_caused_ns / 5) << "rank " << r.rank;
    }
  EXPECT_LT(w.ranks[1].wait_suffered_ns, w.ranks[0].wait_suffered_ns / 5);
  // Every step's end is set by rank 1.
  for (const auto& s : w.steps) EXPECT_EQ(s.rank, 1) << "step " << s.step;

  // The same through `ulysses-trace summary --json`.
  auto j = sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + tmp("slow"));
  ASSERT_EQ(j.code, 0) << j.out;
  const json s = json::parse(j.out);
  const json& c = s.at("collectives");
  EXPECT_EQ(c.size(), 5u);
  EXPECT_GE(c.at("last_arriver").at("1").get<int64_t>(), static_cast<int64_t>(0.9 * c.at("count").get<double>()));
  EXPECT_NEAR(c.at("median_skew_ms").get<double>(), kDelayMs, 25.0);

  // Without alignment rank 2 would look 1000 s late in every collective.
  prof::LoadOptions raw;
  raw.align_clocks = false;
  const auto wr = prof::waiting_analysis(prof::load_trace(tmp("slow"), raw));
  ASSERT_FALSE(wr.instances.empty());
  EXPECT_EQ(wr.instances[0].last_arriver, 2);
  EXPECT_GT(wr.median_skew_ns, 0.9 * double(kInjectedOffsetNs));
}

TEST(Straggler, WithoutFaultsTheMedianSkewIsSmall) {
  const auto m = run("even", "");
  const prof::WaitingAnalysis w = prof::waiting_analysis(m);
  std::vector<double> skew;
  for (const auto& c : w.instances)
    if (is_a2a(c)) skew.push_back(double(c.skew_ns) / 1e6);
  ASSERT_EQ(skew.size(), 24u);
  const double med = median(skew);
  std::printf("[ figures ] no faults: median all-to-all arrival skew %.2f ms (all collectives %.2f ms)\n", med,
              w.median_skew_ns / 1e6);
  // Small next to the 50 ms straggler: under a quarter of it even with 4 ranks sharing 2 cores
  // (measured 5.6 ms for tiny.json at seq 512 on the loaded VM).
  EXPECT_LT(med, kDelayMs / 4);
}

// dp 2 x sp 2, rank 1 slow by 40 ms before each collective. Ranks 2 and 3 share no SP group
// with it: they wait at the world collectives, above all the loss / valid-token all-reduce
// (global_token_mean), which the engine's Comm traces with its (pg, seq). Without that range
// their wait was "idle" (14.3 s of 16.3 s in the run) and the waiting analysis
// attributed 11% of their non-compute time.
TEST(Straggler, DpBySpEveryBlockingCallIsARangeAndTheWaitIsAttributed) {
  json cfg = ulysses::test::tiny_config(2, 3, ULYSSES_SOURCE_DIR);
  cfg["parallel"]["dp_size"] = 2;
  cfg["profile"] = {{"memory", false}};
  cfg["faults"] = {{"slow_rank", 1}, {"delay_ms", 40}};
  const std::string out = tmp("dpsp");
  fs::remove_all(out);
  auto r = sh(std::string(ULYSSES_RUN_BIN) + " " + ulysses::test::write_json(tmp("dpsp.json"), cfg) + " --worker " +
              ULYSSES_WORKER_BIN + " --out " + out + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const prof::TraceModel m = prof::load_trace(out);
  const prof::Summary s = prof::analyze(m);

  // The loss all-reduce is a collective range on every rank, paired across the world group:
  // one per step before the gradient all-reduce, and the straggler's sleeps are ranges too.
  int64_t loss_reduces = 0, delays = 0;
  for (const auto& c : s.waiting.instances)
    if (c.phase == prof::Phase::Collective && c.pg == 0 && c.arrivals.size() == 4u) ++loss_reduces;
  for (const auto& x : m.ranges)
    if (x.phase == prof::Phase::FaultDelay) {
      EXPECT_EQ(x.rank, 1) << "only the slow rank sleeps";
      EXPECT_GE(x.end_ns - x.start_ns, 39000000) << "the injected 40 ms";
      ++delays;
    }
  EXPECT_GE(loss_reduces, 2 * 3) << "the loss / token all-reduce and the peak-memory max of each of 3 steps";
  EXPECT_GT(delays, 0);

  ASSERT_EQ(s.ranks.size(), 4u);
  std::map<int32_t, int64_t> suffered;
  for (const auto& w : s.waiting.ranks) suffered[w.rank] = w.wait_suffered_ns;
  for (const auto& t : s.ranks) {
    const double idle = double(t.idle_ns) / double(t.wall_ns), other = double(t.wall_ns - t.compute_ns);
    const double covered = double(suffered[t.rank]) / std::max(1.0, other);
    std::printf(
        "[ figures ] dp 2 x sp 2, rank 1 slow by 40 ms: rank %d wall %.1f ms, compute %.1f ms, untraced (idle) %.1f ms "
        "(%.2f%%), wait suffered %.1f ms = %.0f%% of its non-compute time\n",
        t.rank, t.wall_ns / 1e6, t.compute_ns / 1e6, t.idle_ns / 1e6, 100 * idle, suffered[t.rank] / 1e6,
        100 * covered);
    EXPECT_LT(idle, 0.03) << "rank " << t.rank << ": time in no range";
    if (t.rank >= 2) {
      EXPECT_GE(covered, 0.75) << "rank " << t.rank << ": its wait for rank 1 is attributed";
    }
  }

  // The same figure through `ulysses-trace summary --json`: ranks[].idle_ns.
  auto j = sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + out);
  ASSERT_EQ(j.code, 0) << j.out;
  const json sj = json::parse(j.out);
  ASSERT_EQ(sj.at("ranks").size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(sj["ranks"][i].at("idle_ns").get<int64_t>(), s.ranks[i].idle_ns);
}

// The demo run itself (`./ulysses demo`: resources/configs/tiny.json, sp 2, 20 steps, memory
// sampling on) leaves under 3% of every rank's wall time in no range. Before, 7.5-8.6% was
// untraced: the all-to-alls' packing and assembling on the rank's own thread, the thread's
// wake-up after a blocking wait, and the backward of the norms, RoPE, the loss and the embedding,
// which lay between the backward markers' ranges (docs/TRACES.md "Every blocking call is a range").
// A timing figure on a shared machine: a run whose worst rank is at or over 3% is run once more
// (the 2-core VM under a parallel ctest measured up to 3.3% once; alone 0.8-2.5%); the worker
// without these ranges measured 5.4% and 10.4%.
TEST(Untraced, DemoRunLeavesUnderThreePercentOfEveryRankInNoRange) {
  json cfg = json::parse(ulysses::test::slurp(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/tiny.json"));
  cfg["data"]["path"] = std::string(ULYSSES_SOURCE_DIR) + "/" + cfg["data"]["path"].get<std::string>();
  double worst = 1;
  for (int attempt = 0; attempt < 2 && worst >= 0.03; ++attempt) {
    const std::string out = tmp("demo");
    fs::remove_all(out);
    auto r = sh(std::string(ULYSSES_RUN_BIN) + " " + ulysses::test::write_json(tmp("demo.json"), cfg) + " --worker " +
                ULYSSES_WORKER_BIN + " --out " + out + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + out);
    ASSERT_EQ(j.code, 0) << j.out;
    const json sj = json::parse(j.out);
    ASSERT_EQ(sj.at("ranks").size(), 2u);
    worst = 0;
    for (const auto& t : sj["ranks"]) {
      const double share = t.at("idle_share").get<double>();
      std::printf(
          "[ figures ] demo (tiny.json, sp 2, 20 steps), run %d: rank %d wall %.1f ms, untraced %.1f ms (%.2f%%)\n",
          attempt + 1, t.at("rank").get<int>(), t.at("wall_ns").get<double>() / 1e6,
          t.at("idle_ns").get<double>() / 1e6, 100 * share);
      EXPECT_GT(t.at("wall_ns").get<int64_t>(), 0);
      worst = std::max(worst, share);
    }
  }
  EXPECT_LT(worst, 0.03) << "time in no range, worst rank";
}
