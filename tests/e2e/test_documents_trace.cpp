// Which documents each rank's shard holds (data.kind = documents, docs/DATA.md#documents-in-the-trace):
// real 2-rank runs through ulysses-run on small prepared folders whose packing is known by hand.
// The ULYSSES_DOCUMENTS rows of every rank file (read with this test's own SQL) equal the
// hand-computed documents, ranges and pieces, at sp 2 and with a zigzag ring of 2 (a rank holding
// two pieces, a document cut at seq_length); `ulysses-trace summary --json` gives the same rows and
// the text summary prints them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/documents_fixture.hpp"
#include "common/e2e_util.hpp"
#include "common/sqlite_rows.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kRun = ULYSSES_RUN_BIN;
const std::string kWorker = ULYSSES_WORKER_BIN;
const std::string kTrace = ULYSSES_TRACE_BIN;

std::string tmp(const std::string& name) { return ulysses::test::scratch_path("doctrace", name); }

// One expected row: (rank, piece, shard begin, shard end, document, doc tokens, doc offset, begin, end).
using Row = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// Documents of these lengths, ids below 256.
std::string make_folder(const std::string& name, const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int64_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int64_t> doc;
    for (int64_t i = 0; i < lengths[d]; ++i) doc.push_back((static_cast<int64_t>(d) * 31 + i * 7) % 256);
    docs.push_back(doc);
  }
  const std::string dir = tmp(name);
  ulysses::test::write_documents_folder(dir, docs, 256);
  return dir;
}

// Runs 2 steps of the tiny model (N = 64) on `folder` with `sets`; returns the run folder.
std::string run(const std::string& name, const std::string& folder, const std::string& sets) {
  auto cfg = ulysses::test::tiny_config(2, 2, ULYSSES_SOURCE_DIR);
  cfg["data"] = {{"kind", "documents"}, {"path", folder}};
  const std::string out = tmp(name);
  const auto r = ulysses::test::sh(kRun + " " + ulysses::test::write_json(tmp(name + ".json"), cfg) + sets +
                                   " --worker " + kWorker + " --out " + out + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

// Every ULYSSES_DOCUMENTS row of the run, per (step, sequence, packed): the sorted rows.
std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Row>> recorded(const std::string& out) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Row>> m;
  for (int r = 0; r < 2; ++r)
    for (const auto& v : ulysses::test::sql_rows(out + "/trace/rank" + std::to_string(r) + ".sqlite",
                                                 "SELECT step, sequence, packed, rank, piece, shardBegin, shardEnd, "
                                                 "document, docTokens, docOffset, begin, end FROM ULYSSES_DOCUMENTS"))
      m[{v[0], v[1], v[2]}].emplace_back(v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]);
  for (auto& [k, rows] : m) std::sort(rows.begin(), rows.end());
  return m;
}

// The steps every rank file recorded (ULYSSES_STEPS).
std::set<int64_t> recorded_steps(const std::string& out) {
  std::set<int64_t> s;
  for (int r = 0; r < 2; ++r)
    for (const auto& v :
         ulysses::test::sql_rows(out + "/trace/rank" + std::to_string(r) + ".sqlite", "SELECT step FROM ULYSSES_STEPS"))
      s.insert(v[0]);
  return s;
}

// The summary's "documents" rows in the same shape.
std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Row>> summarized(const std::string& out) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Row>> m;
  const auto r = ulysses::test::sh(kTrace + " summary " + out + " --json --no-cache");
  EXPECT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("documents")) {
    ADD_FAILURE() << "no documents in the summary: " << r.out.substr(0, 2000);
    return m;
  }
  for (const auto& d : j["documents"]) {
    m[{d["step"].get<int64_t>(), d["sequence"].get<int64_t>(), d["packed"].get<int64_t>()}].emplace_back(
        d["rank"].get<int64_t>(), d["piece"].get<int64_t>(), d["shard"][0].get<int64_t>(), d["shard"][1].get<int64_t>(),
        d["document"].get<int64_t>(), d["doc_tokens"].get<int64_t>(), d["doc_offset"].get<int64_t>(),
        d["range"][0].get<int64_t>(), d["range"][1].get<int64_t>());
    const auto held = d["held"];
    EXPECT_EQ(held[0].get<int64_t>(), std::max(d["range"][0].get<int64_t>(), d["shard"][0].get<int64_t>()));
    EXPECT_EQ(held[1].get<int64_t>(), std::min(d["range"][1].get<int64_t>(), d["shard"][1].get<int64_t>()));
  }
  for (auto& [k, rows] : m) std::sort(rows.begin(), rows.end());
  return m;
}

}  // namespace

// Documents of 20, 30 and 10 tokens pack into one sequence of 64: [0, 20), [20, 50), [50, 60)
// and 4 tokens of padding. At sp 2 rank 0 holds [0, 32) (document 0 whole, document 1's first
// 12 tokens) and rank 1 [32, 64) (document 1's last 18, document 2, the padding).
TEST(DocumentsTrace, EachRankShardsDocumentsAtSp2AreTheHandComputedOnes) {
  const std::string folder = make_folder("sp2_docs", {20, 30, 10});
  const std::string out = run("sp2_run", folder, "");
  const std::vector<Row> want = {{0, 0, 0, 32, 0, 20, 0, 0, 20},     // rank 0: document 0 whole
                                 {0, 0, 0, 32, 1, 30, 0, 20, 50},    //         document 1, holds [20, 32)
                                 {1, 0, 32, 64, -1, 4, 0, 60, 64},   // rank 1: the padding
                                 {1, 0, 32, 64, 1, 30, 0, 20, 50},   //         document 1, holds [32, 50)
                                 {1, 0, 32, 64, 2, 10, 0, 50, 60}};  //         document 2 whole
  const auto got = recorded(out);
  const auto steps = recorded_steps(out);
  ASSERT_FALSE(steps.empty());
  std::set<int64_t> steps_with_rows;
  for (const auto& [key, rows] : got) {
    const auto [step, sequence, packed] = key;
    steps_with_rows.insert(step);
    EXPECT_EQ(packed, 0) << "one packed sequence only";
    EXPECT_EQ(rows, want) << "step " << step << " sequence " << sequence;
  }
  EXPECT_EQ(steps_with_rows, steps) << "a documents row set for every recorded step";
  EXPECT_EQ(summarized(out), got);
  const auto text = ulysses::test::sh(kTrace + " summary " + out + " --no-cache");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("Documents per rank shard"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("#0 [0, 20); #1 [20, 50) holds [20, 32)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("#1 [20, 50) holds [32, 50); #2 [50, 60); padding [60, 64)"), std::string::npos) << text.out;
}

// Documents of 70 and 20 tokens at N = 64: the first is cut, so sequence 0 is its first 64
// tokens and sequence 1 its last 6, document 1 and 38 tokens of padding. With a zigzag ring of 2
// (sp 1) the sequence's quarters are [0, 16) [16, 32) [32, 48) [48, 64); rank 0 holds the
// first and the last (two pieces), rank 1 the middle two (one piece, merged).
TEST(DocumentsTrace, ZigzagRingPiecesAndACutDocumentAreTheHandComputedOnes) {
  const std::string folder = make_folder("ring_docs", {70, 20});
  const std::string out =
      run("ring_run", folder, " --set parallel.sp_size=1 --set parallel.ring_size=2 --set parallel.ring_zigzag=true");
  const std::map<int64_t, std::vector<Row>> want = {
      {0,
       {{0, 0, 0, 16, 0, 70, 0, 0, 64},     // rank 0, piece [0, 16): document 0's first 64 tokens
        {0, 1, 48, 64, 0, 70, 0, 0, 64},    //         piece [48, 64): the same
        {1, 0, 16, 48, 0, 70, 0, 0, 64}}},  // rank 1, [16, 48)
      {1,
       {{0, 0, 0, 16, 0, 70, 64, 0, 6},      // rank 0, [0, 16): document 0 from token 64
        {0, 0, 0, 16, 1, 20, 0, 6, 26},      //         document 1, holds [6, 16)
        {0, 1, 48, 64, -1, 38, 0, 26, 64},   //         [48, 64): padding
        {1, 0, 16, 48, -1, 38, 0, 26, 64},   // rank 1, [16, 48): padding, holds [26, 48)
        {1, 0, 16, 48, 1, 20, 0, 6, 26}}}};  //         document 1, holds [16, 26)
  const auto got = recorded(out);
  ASSERT_FALSE(got.empty()) << "no ULYSSES_DOCUMENTS rows in " << out;
  for (const auto& [key, rows] : got) {
    const auto [step, sequence, packed] = key;
    ASSERT_TRUE(want.count(packed)) << "packed sequence " << packed << " (two exist)";
    EXPECT_EQ(rows, want.at(packed)) << "step " << step << " sequence " << sequence << " packed " << packed;
  }
  EXPECT_EQ(summarized(out), got);
}
