// engine/launch/line_splitter: chunks joined into lines, overlong lines cut.
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

#include "line_splitter.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

TEST(LineSplitter, JoinsChunksAndSplitsOnNewlines) {
  LineSplitter s;
  EXPECT_TRUE(s.feed("hel").empty());
  auto a = s.feed("lo\nwor");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0], "hello");
  auto b = s.feed("ld\r\n\nlast");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], "world");  // '\r' dropped
  EXPECT_EQ(b[1], "");
  EXPECT_EQ(s.finish().value_or("<none>"), "last");
  EXPECT_FALSE(s.finish().has_value());
}

TEST(LineSplitter, CutsOverlongLines) {
  LineSplitter s(4);
  auto a = s.feed("abcdefghij\nxy\n");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0], "abcd");
  EXPECT_EQ(a[1], "efgh");
  EXPECT_EQ(a[2], "ij");
  EXPECT_EQ(a[3], "xy");
  // Exactly max_line bytes then newline: one line, no empty extra line.
  auto b = s.feed("wxyz\n");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], "wxyz");
}
