// engine/launch/worker_process: a child process's streams, exit code, signals and process group.
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

#include "worker_process.hpp"
#include "launch_error.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// WorkerProcess

TEST(WorkerProcess, CapturesBothStreamsAndTheExitCode) {
  SpawnSpec spec{"/bin/sh", {"-c", "echo out-$FOO; echo err-line >&2; exit 3"}, {{"FOO", "bar"}}};
  WorkerProcess p(spec);
  EXPECT_NE(::getpgid(p.pid()), ::getpgrp()) << "the worker must get its own process group";
  EXPECT_EQ(::getpgid(p.pid()), p.pid());
  std::string out, err;
  char buf[256];
  const auto end = Clock::now() + std::chrono::seconds(10);
  while ((p.stdout_fd() >= 0 || p.stderr_fd() >= 0) && Clock::now() < end) {
    for (int which = 0; which < 2; ++which) {
      const int fd = which == 0 ? p.stdout_fd() : p.stderr_fd();
      if (fd < 0) continue;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) (which == 0 ? out : err).append(buf, static_cast<size_t>(n));
      if (n == 0) which == 0 ? p.close_stdout() : p.close_stderr();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(out, "out-bar\n");
  EXPECT_EQ(err, "err-line\n");
  while (!p.try_reap() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(p.exit_info().exited);
  EXPECT_EQ(p.exit_info().code, 3);
  EXPECT_EQ(p.exit_info().describe(), "exited with code 3");
}

TEST(WorkerProcess, ReportsExecFailuresAndKillsItsGroupOnDestruction) {
  TempDir tmp;
  EXPECT_THROW(WorkerProcess(SpawnSpec{(tmp.path() / "missing").string(), {}, {}}), LaunchError);
  try {
    WorkerProcess p(SpawnSpec{(tmp.path() / "missing").string(), {}, {}});
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  pid_t pid = 0;
  long grandchild = 0;
  {
    const fs::path pidfile = tmp.path() / "gc.pid";
    WorkerProcess p(SpawnSpec{"/bin/sh", {"-c", "sleep 30 & echo $! > " + pidfile.string() + "; wait"}, {}});
    pid = p.pid();
    ASSERT_TRUE(wait_for_text(pidfile, "\n"));
    grandchild = std::stol(read_file(pidfile));
    EXPECT_FALSE(process_gone(grandchild));
  }  // destructor: SIGKILL to the group
  EXPECT_TRUE(process_gone(pid));
  EXPECT_TRUE(wait_gone(grandchild, 5)) << "a process started by the worker survived";
}

TEST(WorkerProcess, DescribesSignals) {
  ExitInfo e;
  e.exited = false;
  e.signal = SIGKILL;
  EXPECT_EQ(e.describe().rfind("was killed by signal 9", 0), 0u) << e.describe();
}
