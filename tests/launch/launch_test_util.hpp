// Helpers of the launch tests: temporary folders, ulysses-run as a child process (Cli),
// small configs, the fake workers' records, and waiting for processes, files and text.
#pragma once

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

extern char** environ;

namespace ulysses::launch_test {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p);
  out << s;
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) out.push_back(l);
  return out;
}

// A fresh directory per test, removed at the end when the test passed.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ulysses_launch_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// True when pid is gone or a zombie (dead, waiting for its parent to reap it).
inline bool process_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

inline bool wait_gone(long pid, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return process_gone(pid);
}

// ulysses-run as a child process, stdout and stderr into files.
class Cli {
 public:
  Cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env, const fs::path& io_dir,
      const fs::path& cwd = {}) {
    out_ = io_dir / "cli.stdout";
    err_ = io_dir / "cli.stderr";
    std::vector<std::string> argv_s{ULYSSES_RUN_EXE};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (key.rfind("FAKE_", 0) == 0 || key == "ULYSSES_WORKER" || env.count(key)) continue;
      env_s.push_back(kv);
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);

    // posix_spawn has no chdir before glibc 2.29's addchdir_np; Debian 12 has it.
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Cli() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Exit code, or -1 when it did not finish in time (then it is killed).
  int wait(double seconds = 20) {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (!done_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        done_ = true;
        code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (Clock::now() > end) {
        ADD_FAILURE() << "ulysses-run did not finish within " << seconds << " s; stderr:\n" << err();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return code_;
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  fs::path out_, err_;
};

// A small valid config: 4 heads (2 kv heads), synthetic data.
inline json small_config(int sp, int dp, int steps) {
  return json{{"name", "small"},
              {"model", {{"num_attention_heads", 4}, {"num_key_value_heads", 2}}},
              {"parallel", {{"sp_size", sp}, {"dp_size", dp}}},
              {"train", {{"steps", steps}, {"seq_length", 64}}},
              {"data", {{"kind", "synthetic"}}}};
}

inline fs::path write_config(const fs::path& dir, const json& j, const std::string& name = "small.json") {
  const fs::path p = dir / name;
  write_file(p, j.dump(2));
  return p;
}

inline json read_json(const fs::path& p) { return json::parse(read_file(p)); }

// The fake workers' own records of what they saw, by rank.
inline std::vector<json> fake_records(const fs::path& run, int world) {
  std::vector<json> out;
  for (int r = 0; r < world; ++r) out.push_back(read_json(run / "fake" / ("rank" + std::to_string(r) + ".json")));
  return out;
}

// Waits until every rank wrote its record (the workers are up).
inline bool wait_for_workers(const fs::path& run, int world, double seconds = 10) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    int n = 0;
    for (int r = 0; r < world; ++r) n += fs::exists(run / "fake" / ("rank" + std::to_string(r) + ".json"));
    if (n == world) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline bool wait_for_text(const fs::path& file, const std::string& text, double seconds = 10) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (read_file(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// run.json's status.
inline std::string run_json_status(const fs::path& run) {
  return read_json(run / "run.json")["status"].get<std::string>();
}

}  // namespace ulysses::launch_test
