// The named peak table of a measured CPU run (docs/LONG_SEQUENCES.md "What is alive at the peak"):
// the worker records, at each step's peak, the named tensor groups alive then
// (ULYSSES_PEAK_TENSORS); `ulysses-trace summary` prints them and `summary --json` gives them
// per rank. A run built so that one tensor group dominates (as MemoryPlan.PeakTableNamesTheDominant
// TensorFirst builds it for the plan): one decoder layer with a 4096-wide MLP over 512 tokens and
// a 96-token vocabulary. Its MLP forward keeps two (512, 4096) fp32 tensors (gate and up: SwiGLU
// saves no more) for its backward, and the peak is in the MLP's backward, where the incoming
// gradient and the two made from it (three more (512, 4096) fp32 tensors) are alive beside them.
// And the same model with a 32000-token vocabulary, where the logits and their gradient dominate
// instead (so a table whose first row is always the MLP's fails).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "common/sqlite_rows.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string run_model(const std::string& name, int64_t vocab) {
  json cfg = ulysses::test::tiny_config(1, 2, ULYSSES_SOURCE_DIR);
  cfg["model"]["vocab_size"] = vocab;
  cfg["model"]["num_hidden_layers"] = 1;
  cfg["model"]["intermediate_size"] = 4096;
  cfg["model"]["max_position_embeddings"] = 1024;
  cfg["train"]["seq_length"] = 512;
  cfg["data"] = {{"kind", "synthetic"}};
  cfg["profile"] = {{"enabled", true}, {"memory", true}};
  const std::string path = ulysses::test::scratch_path("peaktable", name + ".json"),
                    out = ulysses::test::scratch_path("peaktable", name + "-run");
  fs::remove_all(out);
  ulysses::test::write_json(path, cfg);
  const auto r = ulysses::test::sh(
      std::string(ULYSSES_RUN_BIN) + " " + path + " --worker " + ULYSSES_WORKER_BIN + " --out " + out, "", true);
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

// Rank 0's memory object of `summary --json`.
json rank0_memory(const std::string& run) {
  const auto r = ulysses::test::sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + run);
  EXPECT_EQ(r.code, 0) << r.out;
  const json s = json::parse(r.out);
  EXPECT_EQ(s["ranks"].size(), 1u);
  return s["ranks"][0].value("memory", json());
}

}  // namespace

// The MLP-dominated run: the first row is the MLP backward's (512, 4096) fp32 group, its three
// tensors, the second layer 0's MLP forward (gate and up); the rows add up to the measured peak
// (the table keeps every byte: the largest 63 groups and one row for the rest; tolerance 0); the
// text summary prints the table.
TEST(PeakTable, MeasuredRunNamesTheDominantTensorFirstAndAddsUpToThePeak) {
  const std::string run = run_model("mlp", 96);
  const json m = rank0_memory(run);
  ASSERT_TRUE(m.contains("at_peak_tensors")) << m.dump();
  const json& rows = m["at_peak_tensors"];
  ASSERT_FALSE(rows.empty());
  for (size_t i = 0; i < rows.size() && i < 6; ++i)
    std::printf("%12lld  %-13s  %-6s %-16s  %s\n", rows[i]["bytes"].get<long long>(),
                rows[i]["category"].get<std::string>().c_str(), rows[i]["dtype"].get<std::string>().c_str(),
                rows[i]["shape"].get<std::string>().c_str(), rows[i]["name"].get<std::string>().c_str());
  ASSERT_GE(rows.size(), 2u);
  const json &top = rows[0], &second = rows[1];
  const int64_t t = int64_t{512} * 4096 * 4;  // one (512, 4096) fp32 tensor
  EXPECT_NE(top["name"].get<std::string>().find("backward"), std::string::npos) << top.dump();
  EXPECT_EQ(top["dtype"], "fp32");
  EXPECT_EQ(top["shape"], "(512, 4096)");
  EXPECT_GE(top["bytes"].get<int64_t>(), 3 * t);
  EXPECT_LT(top["bytes"].get<int64_t>(), 4 * t);
  EXPECT_EQ(second["name"], "layer 0 forward, MLP");
  EXPECT_EQ(second["category"], "activations");
  EXPECT_EQ(second["shape"], "(512, 4096)");
  EXPECT_GE(second["bytes"].get<int64_t>(), 2 * t);
  EXPECT_LT(second["bytes"].get<int64_t>(), 3 * t);
  int64_t sum = 0, prev = INT64_MAX;
  for (const auto& r : rows) {
    EXPECT_LE(r["bytes"].get<int64_t>(), prev) << r.dump();  // largest first
    prev = r["bytes"].get<int64_t>();
    sum += prev;
  }
  const int64_t peak = m["peak_bytes"].get<int64_t>();
  std::printf("rows %zu, sum %lld, measured peak %lld (step %lld)\n", rows.size(), (long long)sum, (long long)peak,
              m["peak_step"].get<long long>());
  EXPECT_EQ(sum, peak);
  // The trace's own rows, read with this test's SQL: one table per step, each adding up to its Peak row.
  const auto per_step = ulysses::test::sql_rows(
      run + "/trace/rank0.sqlite",
      "SELECT p.step, sum(p.bytes), (SELECT parameters + gradients + optimizer + activations + logits + communication "
      "+ other FROM ULYSSES_MEMORY_CATEGORIES c WHERE c.edge = 2 AND c.step = p.step) FROM ULYSSES_PEAK_TENSORS p "
      "WHERE p.step >= 0 GROUP BY p.step ORDER BY p.step");
  ASSERT_EQ(per_step.size(), 2u);
  for (const auto& r : per_step) EXPECT_EQ(r[1], r[2]) << "step " << r[0];
  // Rank 0 also wrote the plan's table (step -1): it names the same dominant group first.
  ASSERT_FALSE(m["planned_tensors"].empty()) << m.dump();
  EXPECT_EQ(m["planned_tensors"][0]["name"], "layer 0 forward, MLP");
  const auto text = ulysses::test::sh(std::string(ULYSSES_TRACE_BIN) + " summary " + run);
  EXPECT_NE(text.out.find("Alive at rank 0's measured peak"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("layer 0 forward, MLP"), std::string::npos) << text.out;
}

// The logits-dominated run: the first row is no longer the MLP's but a (512, 32000) tensor's group.
TEST(PeakTable, MeasuredRunFollowsWhatDominates) {
  const json m = rank0_memory(run_model("logits", 32000));
  ASSERT_TRUE(m.contains("at_peak_tensors")) << m.dump();
  const json& top = m["at_peak_tensors"][0];
  std::printf("top: %s %s %s %lld\n", top["name"].get<std::string>().c_str(), top["dtype"].get<std::string>().c_str(),
              top["shape"].get<std::string>().c_str(), top["bytes"].get<long long>());
  EXPECT_NE(top["name"], "layer 0 forward, MLP");
  EXPECT_EQ(top["shape"], "(512, 32000)") << top.dump();
}
