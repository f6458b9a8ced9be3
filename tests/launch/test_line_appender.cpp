// engine/launch/line_appender: whole lines only, a failed append cut back and named.
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

#include "line_appender.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// Data loss class (writes): an append that fails half way (here a file-size limit, as a full
// disk would) is cut back, so metrics.jsonl never ends in a torn line, and the message names
// the file and the step.
TEST(LineAppender, AFailedAppendIsCutBackAndNamed) {
  TempDir tmp;
  const fs::path file = tmp.path() / "metrics.jsonl";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {  // the limit only for this child
    ::close(fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1000, 1000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    LineAppender a;
    std::string why = a.open(file.string());
    for (int s = 0; why.empty() && s < 1000; ++s)
      why = a.append(std::string(90, 'a' + s % 26), "step " + std::to_string(s));
    (void)!::write(fds[1], why.data(), why.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) why.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  // 91-byte lines under a 1000-byte limit: 10 lines fit, the 11th (step 10) is cut after 90 bytes.
  EXPECT_NE(why.find("cannot append step 10 to " + file.string()), std::string::npos) << why;
  EXPECT_NE(why.find("the partial line was removed"), std::string::npos) << why;
  const std::string text = read_file(file);
  EXPECT_EQ(text.size(), 910u);
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 10u);
  for (const auto& l : lines) EXPECT_EQ(l.size(), 90u);
  EXPECT_EQ(text.back(), '\n');
}
