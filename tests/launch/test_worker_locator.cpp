// engine/launch/worker_locator: where ulysses-run finds ulysses-worker (the contract order).
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

#include "worker_locator.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// worker lookup

TEST(WorkerLocator, FollowsTheContractOrder) {
  TempDir tmp;
  const fs::path run_dir = tmp.path() / "app" / "run", worker_dir = tmp.path() / "app" / "worker";
  fs::create_directories(run_dir);
  fs::create_directories(worker_dir);
  const std::string launcher = (run_dir / "ulysses-run").string();
  auto make_exe = [](const fs::path& p) {
    write_file(p, "#!/bin/sh\n");
    fs::permissions(p, fs::perms::owner_all);
  };

  // Nothing installed: exit 1 and a hint how to build it.
  WorkerLocation none = locate_worker("", nullptr, launcher);
  EXPECT_TRUE(none.path.empty());
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.error.find("ulysses-worker"), std::string::npos);
  EXPECT_NE(none.error.find("--worker"), std::string::npos);
  EXPECT_EQ(none.tried.size(), 2u);

  make_exe(worker_dir / "ulysses-worker");  // build tree layout
  EXPECT_EQ(locate_worker("", nullptr, launcher).path, fs::weakly_canonical(worker_dir / "ulysses-worker").string());
  make_exe(run_dir / "ulysses-worker");  // installed next to ulysses-run wins
  EXPECT_EQ(locate_worker("", "", launcher).path, (run_dir / "ulysses-worker").string());

  const fs::path env_exe = tmp.path() / "env-worker";
  make_exe(env_exe);
  EXPECT_EQ(locate_worker("", env_exe.c_str(), launcher).path, env_exe.string());
  const fs::path cli_exe = tmp.path() / "cli-worker";
  make_exe(cli_exe);
  EXPECT_EQ(locate_worker(cli_exe.string(), env_exe.c_str(), launcher).path, cli_exe.string());

  // An explicit choice that is wrong is bad input (2) and is not silently replaced.
  WorkerLocation missing = locate_worker((tmp.path() / "nope").string(), nullptr, launcher);
  EXPECT_TRUE(missing.path.empty());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.error.find("does not exist"), std::string::npos);
  const fs::path not_exe = tmp.path() / "plain.txt";
  write_file(not_exe, "x");
  WorkerLocation plain = locate_worker("", not_exe.c_str(), launcher);
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_NE(plain.error.find("$ULYSSES_WORKER"), std::string::npos);
  EXPECT_NE(plain.error.find("not an executable"), std::string::npos);
  EXPECT_FALSE(self_executable().empty());
}
