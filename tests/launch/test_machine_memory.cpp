// engine/launch/machine_memory: MemAvailable and the cgroup's limit.
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

#include "machine_memory.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// The memory check counts on what the machine can give now (MemAvailable), not its physical
// size, and on what is left under a cgroup v2 limit (its reclaimable file cache counted free).
TEST(MachineMemory, AvailableIsMemAvailableOrWhatTheCgroupLimitLeaves) {
  const std::string meminfo =
      "MemTotal:       24683772 kB\nMemFree:         1000000 kB\n"
      "MemAvailable:   15307636 kB\nBuffers:          100 kB\n";
  const int64_t physical = int64_t{24683772} * 1024;
  EXPECT_EQ(available_memory_bytes(meminfo, "", "", "", physical), int64_t{15307636} * 1024);
  EXPECT_EQ(available_memory_bytes(meminfo, "max\n", "123\n", "", physical), int64_t{15307636} * 1024);
  // 8 GiB limit, 6 GiB used of which 1 GiB is inactive file cache: 3 GiB left.
  EXPECT_EQ(available_memory_bytes(meminfo, "8589934592\n", "6442450944\n",
                                   "anon 5368709120\ninactive_file 1073741824\nactive_file 0\n", physical),
            int64_t{3} << 30);
  // A limit far above MemAvailable changes nothing; one used up leaves 0.
  EXPECT_EQ(available_memory_bytes(meminfo, "1099511627776", "0", "", physical), int64_t{15307636} * 1024);
  EXPECT_EQ(available_memory_bytes(meminfo, "1048576", "2097152", "", physical), 0);
  // No MemAvailable (old kernels), or text that is not a number: the physical size.
  EXPECT_EQ(available_memory_bytes("MemTotal: 1 kB\n", "", "", "", physical), physical);
  EXPECT_EQ(available_memory_bytes("MemAvailable: lots kB\n", "max", "", "", physical), physical);
  EXPECT_EQ(available_memory_bytes("MemAvailable: 99999999999999999999999 kB\n", "", "", "", physical), physical);
  EXPECT_EQ(available_memory_bytes("", "", "", "", 0), 0);
}
