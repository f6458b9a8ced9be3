// engine/launch/run_launcher: paths made absolute, launch_run with callbacks and a stop request
// (fake_worker ranks).
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

#include "run_config.hpp"
#include "run_launcher.hpp"
#include "launch_error.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

TEST(WithAbsolutePaths, AnchorsRelativePathsAtTheCurrentDirectory) {
  ulysses::RunConfig c;
  c.data.path = "data/x.txt";
  c.train.save_to = "/abs/ckpt";
  const ulysses::RunConfig a = with_absolute_paths(c);
  EXPECT_EQ(a.data.path, (fs::current_path() / "data" / "x.txt").string());
  EXPECT_EQ(a.train.save_to, "/abs/ckpt");
  EXPECT_TRUE(a.train.init_from.empty());
}

// launch_run (library)

TEST(LaunchRun, CallbacksSeeLinesAndMetricsAndAStopRequestStopsTheRun) {
  TempDir tmp;
  ::setenv("FAKE_MODE", "hang", 1);
  ulysses::RunConfig cfg = ulysses::RunConfig::from_json(small_config(2, 1, 5));
  LaunchOptions opt;
  opt.run_dir = (tmp.path() / "run").string();
  opt.worker = FAKE_WORKER_EXE;
  opt.config = cfg;
  opt.grace_s = 2;
  std::vector<std::string> seen;
  std::vector<int> started;
  LaunchCallbacks cb;
  cb.on_line = [&](int rank, Stream s, const std::string& line) {
    seen.push_back(std::to_string(rank) + (s == Stream::Stdout ? "o " : "e ") + line);
  };
  cb.on_started = [&](const std::vector<int>& pids) { started = pids; };
  const fs::path run = opt.run_dir;
  cb.stop_requested = [&] {
    return read_file(run / "logs" / "rank0.log").find("waiting forever") != std::string::npos &&
           read_file(run / "logs" / "rank1.log").find("waiting forever") != std::string::npos;
  };
  const auto t0 = Clock::now();
  LaunchResult res = launch_run(opt, cb);
  ::unsetenv("FAKE_MODE");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0)
      << "SIGTERM should end hanging workers at once";
  EXPECT_EQ(res.exit_code, 1);
  EXPECT_EQ(res.record.status, RunStatus::Stopped);
  EXPECT_EQ(read_run_record((run / "run.json").string()).status, RunStatus::Stopped);
  ASSERT_EQ(started.size(), 2u);
  for (int pid : started) EXPECT_TRUE(process_gone(pid));
  EXPECT_NE(std::find(seen.begin(), seen.end(), "0o fake worker: 2 ranks met"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "1e rank 1: waiting forever"), seen.end());
  // The run directory is in use now; a second launch into it is refused before starting.
  // (RunDirRefused: ulysses-run exits 2 for it, as when it finds the same before launch_run, so
  // a launcher losing that race does not exit 1.)
  EXPECT_TRUE(run_dir_in_use(opt.run_dir));
  EXPECT_THROW(launch_run(opt, cb), RunDirRefused);
}
