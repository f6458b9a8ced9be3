// engine/launch/run_record: run.json written atomically and read back, bad fields refused.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <cstdio>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_record.hpp"
#include "launch_error.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// run.json

TEST(RunRecord, RoundTripsAndWritesAtomically) {
  TempDir tmp;
  RunRecord r;
  r.status = RunStatus::Failed;
  r.started_at = iso8601_utc(std::chrono::system_clock::now());
  r.world_size = 4;
  r.exit_code = 1;
  r.failed_rank = 3;
  r.steps_done = 7;
  r.message = "rank 3 exited with code 1";
  const fs::path p = tmp.path() / "run.json";
  write_run_record(p.string(), r);
  const json j = read_json(p);
  for (const char* k : {"status", "started_at", "ended_at", "duration_s", "world_size", "exit_code", "final_loss",
                        "steps_done", "failed_rank", "message"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["status"], "failed");
  EXPECT_TRUE(j["final_loss"].is_null());
  const RunRecord back = read_run_record(p.string());
  EXPECT_EQ(back.status, RunStatus::Failed);
  EXPECT_EQ(back.failed_rank.value_or(-1), 3);
  EXPECT_EQ(back.steps_done, 7);
  EXPECT_FALSE(back.final_loss.has_value());
  // Only run.json is left: the temporary file was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
  EXPECT_THROW(run_status_from_string("done"), std::invalid_argument);
  EXPECT_THROW(read_run_record((tmp.path() / "missing.json").string()), LaunchError);
}

// Integer fields that are no integer of their type are refused, naming the field: "pid": 1e234
// (found by fuzz_run_record under UBSan) made json's conversion to int64 undefined, and
// "failed_rank": 4294967297 wrapped to rank 1. A whole number written as a float still reads.
TEST(RunRecord, IntegerFieldsOutOfRangeAreRefusedNamingTheField) {
  TempDir tmp;
  const fs::path p = tmp.path() / "run.json";
  auto read_with = [&](const std::string& key, const std::string& value) {
    std::ofstream(p) << R"({"status": "running", ")" << key << "\": " << value << "}";
    return read_run_record(p.string());
  };
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"pid", "1e234"},
                                                        {"pid", "-1e300"},
                                                        {"steps_done", "2.5"},
                                                        {"world_size", "18446744073709551615"},
                                                        {"failed_rank", "4294967297"},
                                                        {"exit_code", "3e9"},
                                                        {"pid", "\"12\""}}) {
    SCOPED_TRACE(key + " = " + value);
    try {
      read_with(key, value);
      ADD_FAILURE() << "accepted";
    } catch (const LaunchError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_with("steps_done", "3.0").steps_done, 3);
  EXPECT_EQ(read_with("failed_rank", "-1").failed_rank.value_or(7), -1);
  EXPECT_EQ(read_with("pid", "9223372036854775807").pid, INT64_MAX);
}

TEST(RunRecord, TimestampsHaveTheExpectedShape) {
  const std::string iso = iso8601_utc(std::chrono::system_clock::time_point{} + std::chrono::milliseconds(86400123));
  EXPECT_EQ(iso, "1970-01-02T00:00:00.123Z");
  const std::string compact = compact_local_timestamp(std::chrono::system_clock::now());
  ASSERT_EQ(compact.size(), 15u);
  EXPECT_EQ(compact[8], '-');
}
