// engine/launch/metric_line: METRIC lines parsed, progress text formatted.
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

#include "metric_line.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// METRIC and progress

TEST(MetricLine, ParsesObjectsOnlyAfterThePrefix) {
  auto m = parse_metric_line(R"(METRIC  {"step": 3, "loss": 2.5}  )");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->value["step"], 3);
  EXPECT_EQ(m->raw, R"({"step": 3, "loss": 2.5})");
  EXPECT_FALSE(parse_metric_line(R"(METRICS {"step": 3})").has_value());
  EXPECT_FALSE(parse_metric_line(R"(info METRIC {"step": 3})").has_value());
  EXPECT_FALSE(parse_metric_line("METRIC {not json").has_value());
  EXPECT_FALSE(parse_metric_line("METRIC [1, 2]").has_value());
}

TEST(Progress, FormatsAllFieldsWithOneBasedStepAndEta) {
  json m{{"step", 2}, {"steps", 20}, {"loss", 5.43214}, {"tokens_per_s", 12345.0}, {"step_ms", 45.2}};
  // ETA: 17 remaining steps x 45.2 ms = 0.77 s -> 0:01
  EXPECT_EQ(format_progress(m), "step 3/20  loss 5.4321  12.3K tok/s  45 ms/step  ETA 0:01");
  json slow{{"step", 0}, {"steps", 101}, {"step_ms", 1000}};
  EXPECT_EQ(format_progress(slow), "step 1/101  1000 ms/step  ETA 1:40");
  EXPECT_EQ(format_progress(json{{"loss", 1.0}}), "loss 1.0000");
}

// A step count beyond int64 cast to long long is undefined behaviour (on x86 it prints
// -9223372036854775808; fuzz_metric_line finds it). Such numbers are printed as they are.
TEST(Progress, StepCountsBeyondInt64ArePrintedNotCast) {
  json m{{"step", 3}, {"steps", 3e29}, {"step_ms", 45.2}};
  EXPECT_EQ(format_progress(m), "step 4/3e+29  45 ms/step  ETA ?");
  EXPECT_EQ(format_progress(json{{"step", -1e300}}), "step -1e+300");
  EXPECT_EQ(format_eta(1e300), "?");
}

TEST(Progress, SiAndEtaFormatting) {
  EXPECT_EQ(format_si(950), "950");
  EXPECT_EQ(format_si(999.7), "1.00K");
  EXPECT_EQ(format_si(12345), "12.3K");
  EXPECT_EQ(format_si(123456), "123K");
  EXPECT_EQ(format_si(1.5e6), "1.50M");
  EXPECT_EQ(format_eta(7), "0:07");
  EXPECT_EQ(format_eta(754), "12:34");
  EXPECT_EQ(format_eta(3723), "1:02:03");
  EXPECT_EQ(format_eta(-1), "?");
}
