// Chrome trace export of a recorded run: valid JSON (nlohmann), HTA's distributedInfo,
// one process per rank with thread-name metadata, X events that nest per thread.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "ulysses/profiler/chrome_export.hpp"
#include "ulysses/profiler/trace_store.hpp"

using namespace ut;

TEST(ChromeExport, ValidJsonWithDistributedInfoAndNestedXEvents) {
  TempDir tmp;
  record_run(tmp.path);
  auto m = prof::load_trace(tmp.path);
  std::string out = tmp.path + "/trace.json";
  prof::export_chrome_trace(m, out);

  std::ifstream f(out);
  nlohmann::json j = nlohmann::json::parse(f);  // throws on invalid JSON
  EXPECT_EQ(j["distributedInfo"]["world_size"], 2);
  EXPECT_EQ(j["distributedInfo"]["rank"], 0);
  ASSERT_TRUE(j["traceEvents"].is_array());

  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> per_thread;
  std::set<std::pair<int, int>> named;
  std::set<int> pids;
  size_t x = 0;
  for (const auto& e : j["traceEvents"]) {
    int pid = e["pid"], tid = e["tid"];
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert({pid, tid});
    if (e["ph"] != "X") continue;
    ++x;
    pids.insert(pid);
    // ts/dur are microseconds with 3 decimals: back to integer ns.
    auto ns = [](const nlohmann::json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0)); };
    per_thread[{pid, tid}].push_back({ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
  }
  EXPECT_EQ(x, m.ranges.size());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  for (auto& [key, v] : per_thread) {
    EXPECT_TRUE(named.count(key)) << "thread without thread_name metadata";
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<int64_t> ends;
    for (const auto& [s, e] : v) {
      while (!ends.empty() && ends.back() <= s) ends.pop_back();
      if (!ends.empty()) {
        EXPECT_LE(e, ends.back()) << "X events overlap without nesting on pid/tid " << key.first << "/" << key.second;
      }
      ends.push_back(e);
    }
  }
  // A single-rank export (HTA reads one file per rank) names that rank.
  prof::ChromeExportOptions o;
  o.rank = 1;
  std::string out1 = tmp.path + "/rank1.json";
  prof::export_chrome_trace(m, out1, o);
  std::ifstream f1(out1);
  auto j1 = nlohmann::json::parse(f1);
  EXPECT_EQ(j1["distributedInfo"]["rank"], 1);
  for (const auto& e : j1["traceEvents"]) EXPECT_EQ(e["pid"], 1);
}
