// Tests of ulysses::launch (line splitting, METRIC parsing, progress text, run.json, free
// port, worker lookup, child processes) and of ulysses-run end to end, with fake_worker
// standing in for ulysses-worker: success, a failing rank, bad input, signals, bad configs.
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

#include "folder_claim.hpp"
#include "free_port.hpp"
#include "launch_error.hpp"
#include "line_appender.hpp"
#include "line_splitter.hpp"
#include "machine_memory.hpp"
#include "metric_line.hpp"
#include "run_launcher.hpp"
#include "run_record.hpp"
#include "worker_locator.hpp"
#include "worker_process.hpp"

extern char** environ;

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using Clock = std::chrono::steady_clock;

namespace {

// ------------------------------------------------------------------ helpers

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p);
  out << s;
}

std::vector<std::string> lines_of(const std::string& s) {
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
bool process_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

bool wait_gone(long pid, double seconds) {
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
json small_config(int sp, int dp, int steps) {
  return json{{"name", "small"},
              {"model", {{"num_attention_heads", 4}, {"num_key_value_heads", 2}}},
              {"parallel", {{"sp_size", sp}, {"dp_size", dp}}},
              {"train", {{"steps", steps}, {"seq_length", 64}}},
              {"data", {{"kind", "synthetic"}}}};
}

fs::path write_config(const fs::path& dir, const json& j, const std::string& name = "small.json") {
  const fs::path p = dir / name;
  write_file(p, j.dump(2));
  return p;
}

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

// The fake workers' own records of what they saw, by rank.
std::vector<json> fake_records(const fs::path& run, int world) {
  std::vector<json> out;
  for (int r = 0; r < world; ++r) out.push_back(read_json(run / "fake" / ("rank" + std::to_string(r) + ".json")));
  return out;
}

// Waits until every rank wrote its record (the workers are up).
bool wait_for_workers(const fs::path& run, int world, double seconds = 10) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    int n = 0;
    for (int r = 0; r < world; ++r) n += fs::exists(run / "fake" / ("rank" + std::to_string(r) + ".json"));
    if (n == world) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool wait_for_text(const fs::path& file, const std::string& text, double seconds = 10) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (read_file(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

// ------------------------------------------------------------------ LineSplitter

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

// ------------------------------------------------------------------ METRIC and progress

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

// ------------------------------------------------------------------ run.json

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

// ------------------------------------------------------------------ free port

TEST(FreePort, ReturnsAPortThatCanBeBound) {
  const int port = find_free_port();
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << "port " << port << " is not free";
  ::close(fd);
  EXPECT_THROW(find_free_port("not-an-address"), LaunchError);
}

// ------------------------------------------------------------------ worker lookup

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

TEST(WithAbsolutePaths, AnchorsRelativePathsAtTheCurrentDirectory) {
  ulysses::RunConfig c;
  c.data.path = "data/x.txt";
  c.train.save_to = "/abs/ckpt";
  const ulysses::RunConfig a = with_absolute_paths(c);
  EXPECT_EQ(a.data.path, (fs::current_path() / "data" / "x.txt").string());
  EXPECT_EQ(a.train.save_to, "/abs/ckpt");
  EXPECT_TRUE(a.train.init_from.empty());
}

// ------------------------------------------------------------------ WorkerProcess

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

// ------------------------------------------------------------------ launch_run (library)

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

// ------------------------------------------------------------------ ulysses-run end to end

TEST(UlyssesRun, SuccessfulRunWithJsonOutput) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 2, 6));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--json", "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();

  // stdout: exactly the METRIC JSON objects, one per line, as in metrics.jsonl.
  const auto out = lines_of(cli.out());
  ASSERT_EQ(out.size(), 6u) << cli.out();
  for (size_t i = 0; i < out.size(); ++i) {
    const json m = json::parse(out[i]);
    EXPECT_EQ(m["step"], static_cast<int>(i));
    EXPECT_EQ(m["steps"], 6);
  }
  EXPECT_EQ(lines_of(read_file(run / "metrics.jsonl")), out);

  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["status"], "finished");
  EXPECT_EQ(rec["exit_code"], 0);
  EXPECT_EQ(rec["world_size"], 4);
  EXPECT_EQ(rec["steps_done"], 6);
  EXPECT_DOUBLE_EQ(rec["final_loss"].get<double>(), json::parse(out.back())["loss"].get<double>());
  EXPECT_TRUE(rec["failed_rank"].is_null());
  EXPECT_FALSE(rec["ended_at"].is_null());
  EXPECT_GE(rec["duration_s"].get<double>(), 0.0);

  // A stdout that cannot take the lines (/dev/full: a full disk under "> steps.jsonl") makes
  // the finished run exit 1, pointing at metrics.jsonl, not exit 0 with nothing written.
  {
    const fs::path io = tmp.path() / "full-io";
    fs::create_directories(io);
    fs::create_symlink("/dev/full", io / "cli.stdout");
    const fs::path run2 = tmp.path() / "run2";
    Cli full({cfg.string(), "--json", "--out", run2.string(), "--worker", FAKE_WORKER_EXE}, {}, io);
    ASSERT_EQ(full.wait(), 1) << full.err();
    EXPECT_NE(full.err().find("could not all be written to stdout"), std::string::npos) << full.err();
    EXPECT_EQ(lines_of(read_file(run2 / "metrics.jsonl")).size(), 6u);
  }

  // config.json is the resolved config; logs per rank; trace dir exists.
  const json written = read_json(run / "config.json");
  EXPECT_EQ(written["parallel"]["dp_size"], 2);
  EXPECT_EQ(written["train"]["steps"], 6);
  EXPECT_TRUE(fs::is_directory(run / "trace"));
  for (int r = 0; r < 4; ++r) {
    const std::string log = read_file(run / "logs" / ("rank" + std::to_string(r) + ".log"));
    EXPECT_NE(log.find("rank " + std::to_string(r) + ": step 5 done"), std::string::npos) << log;
    EXPECT_NE(cli.err().find("[rank " + std::to_string(r) + "] rank " + std::to_string(r) + ": step 5 done"),
              std::string::npos);
  }
  // rank 0's log keeps the METRIC lines; stderr does not repeat them.
  EXPECT_NE(read_file(run / "logs" / "rank0.log").find("METRIC {"), std::string::npos);
  EXPECT_EQ(cli.err().find("METRIC"), std::string::npos);

  // The workers got torchrun's environment and the contract's arguments.
  const auto recs = fake_records(run, 4);
  const std::string port = recs[0]["env"]["MASTER_PORT"];
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(recs[r]["env"]["RANK"], std::to_string(r));
    EXPECT_EQ(recs[r]["env"]["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(recs[r]["env"]["WORLD_SIZE"], "4");
    EXPECT_EQ(recs[r]["env"]["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(recs[r]["env"]["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(recs[r]["env"]["MASTER_PORT"], port);
    // Thread pools sized so that 4 ranks never oversubscribe the cores (a user's export wins).
    const std::string thr = std::to_string(std::max(1u, std::thread::hardware_concurrency() / 4));
    for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      if (!std::getenv(k)) {
        EXPECT_EQ(recs[r]["env"][k], thr) << k;
      }
    }
    if (!std::getenv("OMP_WAIT_POLICY")) {
      EXPECT_EQ(recs[r]["env"]["OMP_WAIT_POLICY"], "PASSIVE");
    }
    EXPECT_EQ(fs::path(recs[r]["out"].get<std::string>()), fs::absolute(run));
    EXPECT_EQ(fs::path(recs[r]["config"].get<std::string>()), fs::absolute(run) / "config.json");
    EXPECT_TRUE(process_gone(recs[r]["pid"]));
  }
  EXPECT_GT(std::stoi(port), 0);
}

TEST(UlyssesRun, ProgressLinesWithoutJsonAndDefaultOutDir) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3), "my cfg.json");
  // No --worker: $ULYSSES_WORKER is used. No --out: runs/<stamp>-<config name> under the cwd.
  Cli cli({cfg.string()}, {{"ULYSSES_WORKER", FAKE_WORKER_EXE}}, tmp.path(), tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  EXPECT_EQ(cli.out(), "");
  EXPECT_NE(cli.err().find("step 1/3  loss 6.0000"), std::string::npos) << cli.err();
  EXPECT_NE(cli.err().find("step 3/3  loss 4.0000"), std::string::npos) << cli.err();
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(tmp.path() / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  const std::string name = runs[0].filename().string();
  EXPECT_EQ(name.size(), 15 + 1 + 6u) << name;  // YYYYmmdd-HHMMSS-my_cfg
  EXPECT_EQ(name.substr(15), "-my_cfg");
  EXPECT_EQ(read_json(runs[0] / "run.json")["status"], "finished");
}

TEST(UlyssesRun, RealExampleConfigWithTextData) {
  // resources/configs/tiny.json names its data relative to the repository root.
  TempDir tmp;
  const fs::path run = tmp.path() / "run";
  Cli cli({"resources/configs/tiny.json", "--set", "train.steps=2", "--json", "--out", run.string(), "--worker",
           FAKE_WORKER_EXE},
          {}, tmp.path(), ULYSSES_SOURCE_DIR);
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  EXPECT_EQ(lines_of(cli.out()).size(), 2u);
  const json written = read_json(run / "config.json");
  EXPECT_EQ(written["train"]["steps"], 2);
  // Written absolute, so the run directory's config works from anywhere.
  EXPECT_EQ(written["data"]["path"],
            (fs::path(ULYSSES_SOURCE_DIR) / "resources/data/tiny_corpus.txt").lexically_normal().string());
}

// ulysses-run read a tokens file whole for its id check: it hands the workers the file's identity
// as it checked it (tokens_file_identity), so they do not read it whole again; text data: none.
TEST(UlyssesRun, WorkersAreToldTheTokensFileWasChecked) {
  TempDir tmp;
  const fs::path data = tmp.path() / "tokens.u16";
  {
    std::ofstream f(data.string(), std::ios::binary);
    for (uint16_t i = 0; i < 4096; ++i) {
      const uint16_t v = i % 200;
      f.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  json c = small_config(2, 1, 2);
  c["model"]["vocab_size"] = 256;
  c["data"] = {{"kind", "tokens"}, {"path", data.string()}, {"token_dtype", "uint16"}};
  const fs::path run = tmp.path() / "run";
  Cli cli({write_config(tmp.path(), c).string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  const ulysses::RunConfig rc = ulysses::RunConfig::from_json(c);
  const std::string want = ulysses::tokens_file_identity(data.string(), rc.data, rc.model.vocab_size);
  ASSERT_FALSE(want.empty());
  for (const auto& r : fake_records(run, 2)) EXPECT_EQ(r["env"]["ULYSSES_TOKENS_CHECKED"], want) << r;
  const fs::path run2 = tmp.path() / "run2";
  Cli text({write_config(tmp.path(), small_config(2, 1, 2), "synthetic.json").string(), "--out", run2.string(),
            "--worker", FAKE_WORKER_EXE},
           {}, tmp.path());
  ASSERT_EQ(text.wait(), 0) << text.err();
  for (const auto& r : fake_records(run2, 2)) EXPECT_EQ(r["env"]["ULYSSES_TOKENS_CHECKED"], "") << r;
}

// A thread count the workers' OpenMP or OpenBLAS cannot read is refused before anything
// starts (it would draw one libgomp warning per rank and run on 1 thread); OpenMP's nested form
// "2,1" is one it can.
TEST(UlyssesRun, UnreadableThreadCountsInTheEnvironmentAreRefused) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  int n = 0;
  for (const std::string v : {"0", "-1", "abc", "", "4,", "99999999999999999999"}) {
    for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      const fs::path run = tmp.path() / ("run" + std::to_string(n++));
      Cli c({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{k, v}}, tmp.path());
      ASSERT_EQ(c.wait(10), 2) << k << "=" << v << "\n" << c.err();
      EXPECT_NE(c.err().find(std::string(k) + "='" + v + "' is not a thread count"), std::string::npos) << c.err();
      EXPECT_FALSE(fs::exists(run));
    }
  }
  Cli ok({cfg.string(), "--out", (tmp.path() / "ok").string(), "--worker", FAKE_WORKER_EXE},
         {{"OMP_NUM_THREADS", "2,1"}}, tmp.path());
  EXPECT_EQ(ok.wait(), 0) << ok.err();
}

// Data with fewer windows of seq_length + 1 tokens than the run draws: said before launch (a
// file of exactly seq_length + 1 bytes trained on one sequence every step, unsaid); enough
// windows: nothing said.
TEST(UlyssesRun, DataThatRepeatsItsWindowsIsSaid) {
  TempDir tmp;
  json j = small_config(2, 1, 5);  // seq_length 64, 5 steps x 1 sequence
  j["data"] = {{"kind", "text"}, {"path", (tmp.path() / "short.txt").string()}};
  write_file(tmp.path() / "short.txt", std::string(65, 'a'));  // one window
  const fs::path cfg = write_config(tmp.path(), j);
  Cli c({cfg.string(), "--out", (tmp.path() / "run").string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(c.wait(), 0) << c.err();
  EXPECT_NE(c.err().find("holds 1 distinct window(s) of train.seq_length + 1 = 65 tokens for the 5 sequences"),
            std::string::npos)
      << c.err();
  write_file(tmp.path() / "short.txt", std::string(64 + 5, 'a'));  // five windows: enough
  Cli ok({cfg.string(), "--out", (tmp.path() / "run2").string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(ok.wait(), 0) << ok.err();
  EXPECT_EQ(ok.err().find("distinct window"), std::string::npos) << ok.err();
}

TEST(UlyssesRun, AFailingRankStopsEveryOtherWorker) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 2, 20));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--json", "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "fail"}, {"FAKE_FAIL_RANK", "1"}, {"FAKE_FAIL_STEP", "2"}, {"FAKE_GRANDCHILD", "1"}},
          tmp.path());
  ASSERT_EQ(cli.wait(), 1) << cli.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["status"], "failed");
  EXPECT_EQ(rec["failed_rank"], 1);
  EXPECT_EQ(rec["exit_code"], 1);
  EXPECT_EQ(rec["steps_done"], 2);  // rank 0 reported steps 0 and 1
  EXPECT_EQ(lines_of(cli.out()).size(), 2u);
  EXPECT_NE(rec["message"].get<std::string>().find("rank 1 exited with code 1"), std::string::npos) << rec;
  // The cause as the rank said it, in run.json too (the studio's banner reads it).
  EXPECT_NE(rec["message"].get<std::string>().find(": rank 1: simulated failure at step 2"), std::string::npos) << rec;
  const std::string err = cli.err();
  EXPECT_NE(err.find("ulysses-run: rank 1 exited with code 1"), std::string::npos) << err;
  EXPECT_NE(err.find("lines of rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("  rank 1: simulated failure at step 2"), std::string::npos) << err;
  for (const auto& r : fake_records(run, 4)) {
    EXPECT_TRUE(process_gone(r["pid"])) << "worker " << r["pid"] << " still runs";
    EXPECT_TRUE(wait_gone(r["grandchild_pid"], 5)) << "a worker's child " << r["grandchild_pid"] << " still runs";
  }
}

TEST(UlyssesRun, ARankExitingWithBadInputMakesTheLauncherExit2) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "fail"}, {"FAKE_FAIL_RANK", "0"}, {"FAKE_FAIL_CODE", "2"}, {"FAKE_FAIL_STEP", "0"}},
          tmp.path());
  ASSERT_EQ(cli.wait(), 2) << cli.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["status"], "failed");
  EXPECT_EQ(rec["failed_rank"], 0);
  EXPECT_EQ(rec["exit_code"], 2);
  EXPECT_EQ(rec["steps_done"], 0);
  EXPECT_TRUE(rec["final_loss"].is_null());
  for (const auto& r : fake_records(run, 2)) EXPECT_TRUE(process_gone(r["pid"]));
}

// A tokens file of 1 GiB or more: its id check (a read of the whole file) is announced first,
// not minutes of silence. A sparse file, one id past model.vocab_size in its last token, so the
// check reads to the end and refuses it (exit 2, nothing started).
TEST(UlyssesRun, ABigTokensFileIsAnnouncedBeforeItsIdsAreChecked) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "reads 1 GiB at -O0 under a sanitizer (the plain build runs it)";
#endif
  TempDir tmp;
  const fs::path data = tmp.path() / "big.u16";
  {
    std::ofstream(data.string(), std::ios::binary).close();
    fs::resize_file(data, uintmax_t{1} << 30);
    std::fstream f(data.string(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>((uintmax_t{1} << 30) - 2));
    const unsigned char id[2] = {0x2c, 0x01};  // 300, little-endian uint16
    f.write(reinterpret_cast<const char*>(id), 2);
  }
  json c = small_config(2, 1, 5);
  c["model"]["vocab_size"] = 256;
  c["data"] = {{"kind", "tokens"}, {"path", data.string()}, {"token_dtype", "uint16"}};
  const fs::path cfg = write_config(tmp.path(), c);
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(cli.wait(60), 2) << cli.err();
  const std::string err = cli.err();
  const size_t said = err.find("checking the token ids of " + data.string() + " (1 GiB) against model.vocab_size");
  const size_t refused = err.find("whose largest token id is 300");
  EXPECT_NE(said, std::string::npos) << err;
  EXPECT_NE(refused, std::string::npos) << err;
  EXPECT_LT(said, refused) << err;
  EXPECT_FALSE(fs::exists(run / "run.json")) << "nothing may start for a bad config";
}

TEST(UlyssesRun, ARankKilledByASignalIsReported) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "crash"}, {"FAKE_FAIL_RANK", "1"}, {"FAKE_FAIL_STEP", "1"}}, tmp.path());
  ASSERT_EQ(cli.wait(), 1) << cli.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["failed_rank"], 1);
  EXPECT_NE(rec["message"].get<std::string>().find("killed by signal 9"), std::string::npos) << rec;
  for (const auto& r : fake_records(run, 2)) EXPECT_TRUE(process_gone(r["pid"]));
}

class UlyssesRunSignal : public ::testing::TestWithParam<int> {};

TEST_P(UlyssesRunSignal, StopsEveryWorkerAndRecordsStopped) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "hang"}, {"FAKE_GRANDCHILD", "1"}}, tmp.path());
  ASSERT_TRUE(wait_for_workers(run, 2)) << cli.err();
  ASSERT_TRUE(wait_for_text(run / "logs" / "rank1.log", "waiting forever"));
  ASSERT_EQ(read_json(run / "run.json")["status"], "running");
  ::kill(cli.pid(), GetParam());
  const auto t0 = Clock::now();
  ASSERT_EQ(cli.wait(10), 1) << cli.err();
  // The workers do not ignore SIGTERM: they end before the 3 s grace would call for SIGKILL.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.9);
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["status"], "stopped");
  EXPECT_EQ(rec["exit_code"], 1);
  EXPECT_TRUE(rec["failed_rank"].is_null());
  const std::string name = GetParam() == SIGINT ? "SIGINT" : GetParam() == SIGQUIT ? "SIGQUIT" : "SIGTERM";
  EXPECT_NE(cli.err().find("stopped by " + name), std::string::npos) << cli.err();
  for (const auto& r : fake_records(run, 2)) {
    EXPECT_TRUE(process_gone(r["pid"]));
    EXPECT_TRUE(wait_gone(r["grandchild_pid"], 5));
  }
}

// SIGQUIT (Ctrl-\) dumped core and left run.json "running".
INSTANTIATE_TEST_SUITE_P(SigTermAndSigInt, UlyssesRunSignal, ::testing::Values(SIGTERM, SIGINT, SIGQUIT));

TEST(UlyssesRun, WorkersDieWithAKilledLauncher) {
  // SIGKILL cannot be caught: the workers' parent-death signal must take them down.
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"FAKE_MODE", "hang"}}, tmp.path());
  ASSERT_TRUE(wait_for_workers(run, 2)) << cli.err();
  ::kill(cli.pid(), SIGKILL);
  cli.wait(10);
  for (const auto& r : fake_records(run, 2))
    EXPECT_TRUE(wait_gone(r["pid"], 5)) << "worker " << r["pid"] << " outlived its launcher";
}

TEST(UlyssesRun, RepeatedSetOptionsAllApply) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({"--set", "train.steps=2", cfg.string(), "--set", "parallel.dp_size=2", "--json", "--out", run.string(),
           "--worker", FAKE_WORKER_EXE},
          {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  EXPECT_EQ(lines_of(cli.out()).size(), 2u);
  EXPECT_EQ(read_json(run / "run.json")["world_size"], 4);
}

TEST(UlyssesRun, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 5));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"FAKE_MODE", "ignore_term"}},
          tmp.path());
  ASSERT_TRUE(wait_for_text(run / "logs" / "rank1.log", "waiting forever"));
  ASSERT_TRUE(wait_for_text(run / "logs" / "rank0.log", "waiting forever"));
  const auto t0 = Clock::now();
  ::kill(cli.pid(), SIGTERM);
  ASSERT_EQ(cli.wait(15), 1) << cli.err();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(took, 2.9) << "SIGKILL came before the 3 s grace";
  EXPECT_LT(took, 6.0);
  EXPECT_EQ(read_json(run / "run.json")["status"], "stopped");
  for (const auto& r : fake_records(run, 2)) EXPECT_TRUE(process_gone(r["pid"]));
}

// Bad input: exit 2 within seconds, a message per problem, and nothing started.
struct BadCase {
  const char* name;
  json config;
  std::vector<std::string> extra;
  const char* expect;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class UlyssesRunBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(UlyssesRunBadInput, ExitsWith2BeforeStartingAnything) {
  const BadCase& c = GetParam();
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), c.config);
  const fs::path run = tmp.path() / "run";
  std::vector<std::string> args{cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE};
  args.insert(args.end(), c.extra.begin(), c.extra.end());
  Cli cli(args, {}, tmp.path());
  const auto t0 = Clock::now();
  ASSERT_EQ(cli.wait(10), 2) << cli.err();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  const std::string err = cli.err();
  EXPECT_NE(err.find(std::string("ulysses-run: ")), std::string::npos) << err;
  EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(run)) << "nothing may be created for a bad config";
  EXPECT_EQ(cli.out(), "");
}

json with(json j, const std::string& section, const std::string& key, json v) {
  j[section][key] = std::move(v);
  return j;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, UlyssesRunBadInput,
    ::testing::Values(
        BadCase{"heads_vs_sp",
                with(small_config(3, 1, 5), "train", "seq_length", 63),
                {},
                "num_attention_heads (4) must be divisible by parallel.sp_size (3)"},
        BadCase{"unknown_key", with(small_config(2, 1, 5), "model", "num_heads", 4), {}, "num_heads"},
        BadCase{"missing_data",
                with(with(small_config(2, 1, 5), "data", "kind", "text"), "data", "path", "/nonexistent/corpus.txt"),
                {},
                "data file /nonexistent/corpus.txt not found"},
        BadCase{"set_unknown_key", small_config(2, 1, 5), {"--set", "train.epochs=3"}, "--set train.epochs=3"},
        BadCase{
            "set_bad_sp", small_config(2, 1, 5), {"--set", "parallel.sp_size=8"}, "divisible by parallel.sp_size (8)"},
        BadCase{"unknown_flag", small_config(2, 1, 5), {"--frobnicate"}, "frobnicate"}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST(UlyssesRun, RefusesARunDirectoryThatHoldsARun) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  fs::create_directories(run);
  write_file(run / "run.json", R"({"status": "finished"})");
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(cli.wait(10), 2) << cli.err();
  EXPECT_NE(cli.err().find("pick another --out"), std::string::npos) << cli.err();
  EXPECT_EQ(read_file(run / "run.json"), R"({"status": "finished"})");
  EXPECT_FALSE(fs::exists(run / "logs"));
}

TEST(UlyssesRun, MissingWorkerIsReportedBeforeStarting) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", (tmp.path() / "no-worker").string()}, {}, tmp.path());
  ASSERT_EQ(cli.wait(10), 2) << cli.err();
  EXPECT_NE(cli.err().find("ulysses-run: --worker"), std::string::npos) << cli.err();
  EXPECT_FALSE(fs::exists(run));
}

TEST(UlyssesRun, HelpExitsZero) {
  TempDir tmp;
  Cli cli({"--help"}, {}, tmp.path());
  ASSERT_EQ(cli.wait(10), 0);
  EXPECT_NE(cli.out().find("--worker"), std::string::npos);
  EXPECT_NE(cli.out().find("--set"), std::string::npos);
}

// ------------------------------------------------------------ reliability (docs/RELIABILITY.md)
// Each test below guards one hazard; docs/RELIABILITY.md lists them by class.

namespace {
std::string run_json_status(const fs::path& run) { return read_json(run / "run.json")["status"].get<std::string>(); }
}  // namespace

// Crash class: a number beyond a double (in --set or in the config file) or a path that is not
// UTF-8 is exit 2, not an abort of ulysses-run with an uncaught exception (exit 134).
TEST(Reliability, NumbersBeyondADoubleAndNonUtf8PathsExit2) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  };
  const fs::path huge = tmp.path() / "huge.json";
  write_file(huge, R"({"train": {"lr": 1e999}})");
  const std::vector<Case> cases = {
      {{cfg.string(), "--set", "train.lr=1e999"}, "out of range"},
      {{cfg.string(), "--set", "train.steps=-1e999"}, "out of range"},
      {{cfg.string(), "--set", "train.seq_length=1e300"}, "out of range for a 64-bit integer"},
      {{cfg.string(), "--set", "train.steps=18446744073709551615"}, "out of range"},
      {{huge.string()}, "out of range"},
      {{cfg.string(), "--set", "data.kind=text", "--set", std::string("data.path=/tmp/bad\xff\xfe.txt")},
       "not valid UTF-8"},
      {{cfg.string(), "--set", std::string("train.steps=\xff")}, "must be an integer"},
  };
  for (const auto& c : cases) {
    const fs::path run = tmp.path() / "run";
    std::vector<std::string> args = c.args;
    for (const char* a : {"--out", run.c_str(), "--worker", FAKE_WORKER_EXE}) args.push_back(a);
    Cli cli(args, {}, tmp.path());
    EXPECT_EQ(cli.wait(10), 2) << args[1] << ": " << cli.err();
    EXPECT_NE(cli.err().find(c.expect), std::string::npos) << cli.err();
    EXPECT_FALSE(fs::exists(run));
  }
}

// Hang class: a FIFO or /dev/zero as the config (or a FIFO as data) would block forever or
// read until memory runs out. Only regular files are read, checked with stat before opening.
TEST(Reliability, FifoAndDevicesAsInputsAreRefusedAtOnce) {
  TempDir tmp;
  const fs::path fifo = tmp.path() / "config.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  fs::create_directories(tmp.path() / "ckpt");
  ASSERT_EQ(::mkfifo((tmp.path() / "ckpt" / "config.json").c_str(), 0600), 0);
  const std::vector<std::vector<std::string>> cases = {
      {fifo.string()},                                                                   // config
      {"/dev/zero"},                                                                     // config
      {cfg.string(), "--set", "data.kind=text", "--set", "data.path=" + fifo.string()},  // data
      {cfg.string(), "--set", "train.init_from=" + (tmp.path() / "ckpt").string()},      // init_from/config.json
  };
  for (auto args : cases) {
    for (const char* a : {"--out", run.c_str(), "--worker", FAKE_WORKER_EXE}) args.push_back(a);
    Cli cli(args, {}, tmp.path());
    const auto t0 = Clock::now();
    EXPECT_EQ(cli.wait(10), 2) << args[0] << " " << cli.err();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
    EXPECT_FALSE(fs::exists(run));
  }
  Cli fifo_cli({fifo.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(fifo_cli.wait(10), 2);
  EXPECT_NE(fifo_cli.err().find("not a regular file (a FIFO)"), std::string::npos) << fifo_cli.err();
}

// Runaway class: num_hidden_layers=1e9 would eat memory; a config whose
// estimated memory exceeds the machine is refused with the numbers unless --force.
TEST(Reliability, OversizedModelsAreRefusedBeforeLaunchUnlessForced) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  {
    Cli cli({cfg.string(), "--set", "model.num_hidden_layers=1e9", "--out", run.string(), "--worker", FAKE_WORKER_EXE},
            {}, tmp.path());
    ASSERT_EQ(cli.wait(10), 2) << cli.err();
    EXPECT_NE(cli.err().find("model.num_hidden_layers must be positive and at most 1024, got 1000000000"),
              std::string::npos)
        << cli.err();
  }
  // ~1.6 PiB of weights: no machine has that.
  const std::vector<std::string> big = {cfg.string(),
                                        "--set",
                                        "model.hidden_size=65536",
                                        "--set",
                                        "model.intermediate_size=1048576",
                                        "--set",
                                        "model.num_hidden_layers=1024",
                                        "--set",
                                        "train.device=cpu",
                                        "--set",
                                        "train.steps=2",
                                        "--json",
                                        "--out",
                                        run.string(),
                                        "--worker",
                                        FAKE_WORKER_EXE};
  {
    Cli cli(big, {}, tmp.path());
    ASSERT_EQ(cli.wait(10), 2) << cli.err();
    EXPECT_NE(cli.err().find("exceeds the memory this machine has available (MemAvailable)"), std::string::npos)
        << cli.err();
    EXPECT_NE(cli.err().find("PiB"), std::string::npos) << cli.err();
    EXPECT_NE(cli.err().find("--force"), std::string::npos) << cli.err();
    EXPECT_FALSE(fs::exists(run));
  }
  std::vector<std::string> forced = big;
  forced.push_back("--force");
  Cli cli(forced, {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();  // the fake worker builds nothing
  EXPECT_NE(cli.err().find("warning (--force)"), std::string::npos) << cli.err();
}

// Issue 54: sp 2 x 512 = 1024 CPU ranks of ~175 MiB each were accepted on a 24 GiB, 2-core
// machine (nothing printed in 30 s, SIGTERM not obeyed within 5 s, run.json left "running").
// Refused before anything is made, naming the figures (cores, then memory per rank).
TEST(Reliability, RanksBeyondTheMachineAreRefusedBeforeSpawning) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  const auto t0 = Clock::now();
  Cli cli({cfg.string(), "--set", "parallel.dp_size=512", "--set", "train.device=cpu", "--out", run.string(),
           "--worker", FAKE_WORKER_EXE},
          {}, tmp.path());
  ASSERT_EQ(cli.wait(10), 2) << cli.err();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_NE(cli.err().find("1024 CPU ranks (parallel.sp_size 2 x ring_size 1 x dp_size 512) on "), std::string::npos)
      << cli.err();
  EXPECT_NE(cli.err().find("or pass --force"), std::string::npos) << cli.err();
  EXPECT_FALSE(fs::exists(run));
}

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

namespace {
// A worker whose --plan prints `plan` (a JSON line) or, with plan "sleep", sleeps 30 s after
// writing its pid; every other call goes to the fake worker.
fs::path planning_worker(const fs::path& dir, const std::string& plan) {
  const fs::path w = dir / "planning-worker.sh";
  write_file(w, "#!/bin/sh\ncase \"$*\" in *--plan*)\n  echo $$ > '" + (dir / "planner.pid").string() + "'\n" +
                    (plan == "sleep" ? std::string("  exec sleep 30;;\n") : "  echo '" + plan + "'; exit 0;;\n") +
                    "esac\nexec '" + FAKE_WORKER_EXE + "' \"$@\"\n");
  fs::permissions(w, fs::perms::owner_all);
  return w;
}
int64_t mem_available_now() {
  std::ifstream f("/proc/meminfo");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return available_memory_bytes(text, "", "", "", 0);
}
}  // namespace

// Issue 54 item 4: ranks whose planned per-rank peak cannot fit what the machine has available
// are refused before launch (exit 2) with the planner's figures; a plan that fits launches.
TEST(Reliability, RanksBeyondMemAvailableByThePlannersFigureAreRefused) {
  TempDir tmp;
  const int64_t avail = mem_available_now();
  ASSERT_GT(avail, 0) << "no MemAvailable in /proc/meminfo";
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  // 1M tokens with the math attention: the cost model puts the run far above half the machine,
  // so the planner is asked; its answer decides.
  auto args = [&](const fs::path& worker, const fs::path& out) {
    return std::vector<std::string>{cfg.string(),
                                    "--set",
                                    "train.seq_length=1048576",
                                    "--set",
                                    "model.max_position_embeddings=1048576",
                                    "--set",
                                    "train.attention=sdpa",
                                    "--set",
                                    "train.device=cpu",
                                    "--out",
                                    out.string(),
                                    "--worker",
                                    worker.string()};
  };
  {  // each of the 2 ranks plans MemAvailable / 2 + 1 GiB: together more than there is
    const int64_t per_rank = avail / 2 + (int64_t{1} << 30);
    const fs::path w = planning_worker(tmp.path(), "{\"peak_bytes\": " + std::to_string(per_rank) + "}");
    Cli cli(args(w, tmp.path() / "big"), {}, tmp.path());
    ASSERT_EQ(cli.wait(30), 2) << cli.err();
    EXPECT_NE(cli.err().find("planned peak memory (meta-device dry run of one step"), std::string::npos) << cli.err();
    EXPECT_NE(cli.err().find("(2 rank(s) x "), std::string::npos) << cli.err();
    EXPECT_NE(cli.err().find("exceeds the memory this machine has available (MemAvailable) of "), std::string::npos)
        << cli.err();
    EXPECT_FALSE(fs::exists(tmp.path() / "big"));
  }
  {  // 1 MiB per rank fits: launched (the fake worker trains)
    const fs::path w = planning_worker(tmp.path(), "{\"peak_bytes\": 1048576}");
    Cli cli(args(w, tmp.path() / "small"), {}, tmp.path());
    EXPECT_EQ(cli.wait(30), 0) << cli.err();
    EXPECT_EQ(read_json(tmp.path() / "small" / "run.json")["status"], "finished");
  }
}

// SIGTERM (or SIGINT) while the planner runs, before anything is launched: obeyed within 2 s,
// the planner killed, nothing made (the launcher used to die by the signal's default action).
TEST(Reliability, SigtermWhilePlanningIsObeyed) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path w = planning_worker(tmp.path(), "sleep");
  for (int sig : {SIGTERM, SIGINT}) {
    const fs::path run = tmp.path() / ("run" + std::to_string(sig));
    fs::remove(tmp.path() / "planner.pid");
    Cli cli(
        {cfg.string(), "--set", "train.seq_length=1048576", "--set", "model.max_position_embeddings=1048576", "--set",
         "train.attention=sdpa", "--set", "train.device=cpu", "--out", run.string(), "--worker", w.string()},
        {}, tmp.path());
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline && read_file(tmp.path() / "planner.pid").empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::string pid_text = read_file(tmp.path() / "planner.pid");
    ASSERT_FALSE(pid_text.empty()) << "the planner was never started: " << cli.err();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the shell become `sleep`
    ::kill(cli.pid(), sig);
    const auto t0 = Clock::now();
    EXPECT_EQ(cli.wait(20), 1) << cli.err();
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(took, 2.0) << cli.err();
    EXPECT_NE(cli.err().find(std::string("stopped by ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + " before launch"),
              std::string::npos)
        << cli.err();
    EXPECT_FALSE(fs::exists(run));
    const pid_t planner = static_cast<pid_t>(std::stol(pid_text));
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
      std::ifstream st("/proc/" + std::to_string(planner) + "/stat");
      std::string pid_field, comm, state;
      gone = !(st >> pid_field >> comm >> state) || state == "Z";  // gone, or dead and not yet reaped
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(gone) << "the planner (pid " << planner << ") outlived the launcher";
    std::printf("[ figures ] signal %d while planning: exit after %.2f s\n", sig, took);
  }
}

// A stop asked for while the ranks are being started is obeyed within 2 s, and run.json ends
// "stopped" (the spawn loop did not look: 1024 workers were started first).
TEST(Reliability, SigtermWhileSpawningIsObeyed) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--set", "parallel.dp_size=200", "--set", "train.device=cpu", "--force", "--out", run.string(),
           "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "hang"}}, tmp.path());
  // run.json says "running" before the first worker starts; stop the launcher right then
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline && !fs::exists(run / "run.json"))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(fs::exists(run / "run.json")) << cli.err();
  ::kill(cli.pid(), SIGTERM);
  const auto t0 = Clock::now();
  EXPECT_EQ(cli.wait(20), 1) << cli.err();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 2.0) << cli.err();
  EXPECT_EQ(read_json(run / "run.json")["status"], "stopped");
  std::printf("[ figures ] SIGTERM while starting 400 ranks: exit after %.2f s\n", took);
}

// --out with a byte that is not UTF-8 (or a control character) threw a JSON library's exception
// and left the folder holding .ulysses-lock: refused before anything is made, the name quoted.
TEST(Reliability, OutNamesThatAreNotUtf8AreRefusedQuoted) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  for (const std::string& name : {std::string("run\xff"), std::string("run\nnext")}) {
    const fs::path run = tmp.path() / name;
    Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
    ASSERT_EQ(cli.wait(10), 2) << cli.err();
    EXPECT_NE(cli.err().find("holds control characters or bytes that are not UTF-8"), std::string::npos) << cli.err();
    EXPECT_EQ(cli.err().find("run\nnext"), std::string::npos) << "printed raw: " << cli.err();
    EXPECT_EQ(cli.err().find("json.exception"), std::string::npos) << cli.err();
    EXPECT_FALSE(fs::exists(run));
  }
}

// Data loss class: --out onto a folder with the user's files would overwrite config.json
// and append to an old metrics.jsonl. Refused; --force moves the folder aside.
TEST(Reliability, OutNeverWritesIntoTheUsersFilesAndForceMovesThemAside) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3));
  const fs::path run = tmp.path() / "mine";
  fs::create_directories(run);
  write_file(run / "config.json", "my precious config");
  write_file(run / "metrics.jsonl", "{\"step\": 99, \"loss\": 1.0}\n");
  {
    Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
    ASSERT_EQ(cli.wait(10), 2) << cli.err();
    EXPECT_NE(cli.err().find("is not empty"), std::string::npos) << cli.err();
    EXPECT_NE(cli.err().find("--force"), std::string::npos) << cli.err();
    EXPECT_EQ(read_file(run / "config.json"), "my precious config");
    EXPECT_FALSE(fs::exists(run / "run.json"));
  }
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE, "--force"}, {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  // The old folder is kept whole next to the new run; the new run starts from nothing.
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(tmp.path()))
    if (e.path().filename().string().rfind("mine.old-", 0) == 0) aside.push_back(e.path());
  ASSERT_EQ(aside.size(), 1u) << cli.err();
  EXPECT_EQ(read_file(aside[0] / "config.json"), "my precious config");
  EXPECT_EQ(lines_of(read_file(run / "metrics.jsonl")).size(), 3u) << "appended to an old metrics.jsonl";
  EXPECT_EQ(run_json_status(run), "finished");
  // A finished run is also refused without --force.
  Cli again({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(again.wait(10), 2) << again.err();
  EXPECT_NE(again.err().find("already holds a run"), std::string::npos) << again.err();
  // --force never moves aside the folder the user stands in, or one holding the run's inputs
  // (else the working folder is renamed, then "not empty"; the config gone from under the ranks).
  {
    Cli here({cfg.string(), "--out", ".", "--worker", FAKE_WORKER_EXE, "--force"}, {}, tmp.path(), run);
    ASSERT_EQ(here.wait(10), 2) << here.err();
    EXPECT_NE(here.err().find("current folder is that folder"), std::string::npos) << here.err();
    fs::create_directories(run / "notes");
    Cli below({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE, "--force"}, {}, tmp.path(),
              run / "notes");
    ASSERT_EQ(below.wait(10), 2) << below.err();
    EXPECT_NE(below.err().find("is inside it"), std::string::npos) << below.err();
    const fs::path inner_cfg = run / "again.json";
    fs::copy_file(cfg, inner_cfg);
    Cli input({inner_cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE, "--force"}, {}, tmp.path());
    ASSERT_EQ(input.wait(10), 2) << input.err();
    EXPECT_NE(input.err().find("the config (" + inner_cfg.string() + ") is inside it"), std::string::npos)
        << input.err();
    EXPECT_EQ(run_json_status(run), "finished");  // still there, not moved
    size_t moved = 0;
    for (const auto& e : fs::directory_iterator(tmp.path()))
      moved += e.path().filename().string().rfind("mine.old-", 0) == 0;
    EXPECT_EQ(moved, 1u);  // only the one --force moved above
    // Nor a folder holding a live run further down (its launcher, pid 1 here, alive), nor one
    // another launcher is setting up before its run.json exists: moved aside, the live run
    // would fail at its end writing run.json.
    const fs::path parent = tmp.path() / "parent";
    fs::create_directories(parent / "live");
    write_file(parent / "live" / "run.json", R"({"status": "running", "pid": 1, "world_size": 2})");
    Cli live({cfg.string(), "--out", parent.string(), "--worker", FAKE_WORKER_EXE, "--force"}, {}, tmp.path());
    ASSERT_EQ(live.wait(10), 2) << live.err();
    EXPECT_NE(live.err().find("holds a run that is still going (ulysses-run pid 1)"), std::string::npos) << live.err();
    EXPECT_TRUE(fs::exists(parent / "live" / "run.json"));
    const fs::path starting = tmp.path() / "starting";
    fs::create_directories(starting);
    write_file(starting / "config.json", "{}");
    // Another launcher's claim on the folder (this test process holds it, as a launcher would).
    auto held = ulysses::launch::claim_folder(starting.string(), {"elsewhere", ::getpid(), "ulysses-run"});
    ASSERT_TRUE(held.claim.held()) << held.error;
    const std::string holder = "(pid " + std::to_string(::getpid()) + ")";
    for (const bool with_force : {false, true}) {
      std::vector<std::string> args = {cfg.string(), "--out", starting.string(), "--worker", FAKE_WORKER_EXE};
      if (with_force) args.push_back("--force");
      Cli setting_up(args, {}, tmp.path());
      ASSERT_EQ(setting_up.wait(10), 2) << setting_up.err();
      EXPECT_NE(setting_up.err().find("is being set up or run by another ulysses-run " + holder), std::string::npos)
          << setting_up.err();
    }
    EXPECT_TRUE(fs::exists(starting / "config.json"));
    Cli empty({cfg.string(), "--out", "", "--worker", FAKE_WORKER_EXE}, {}, tmp.path());  // not runs/<timestamp>
    ASSERT_EQ(empty.wait(10), 2) << empty.err();
    EXPECT_NE(empty.err().find("--out needs a folder name"), std::string::npos) << empty.err();
    EXPECT_FALSE(fs::exists(tmp.path() / "runs"));
  }
}

// Data loss class: a train.save_to that cannot be written, found only after the last step,
// loses the trained model. It is probed before launch.
TEST(Reliability, UnwritableSaveToIsRefusedBeforeLaunch) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  write_file(tmp.path() / "a_file", "x");
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--set", "train.save_to=" + (tmp.path() / "a_file" / "ckpt").string(), "--out", run.string(),
           "--worker", FAKE_WORKER_EXE},
          {}, tmp.path());
  ASSERT_EQ(cli.wait(10), 2) << cli.err();
  EXPECT_NE(cli.err().find("train.save_to"), std::string::npos) << cli.err();
  EXPECT_FALSE(fs::exists(run));
  // A directory whose config.json is not part of a checkpoint would be overwritten.
  fs::create_directories(tmp.path() / "proj");
  write_file(tmp.path() / "proj" / "config.json", "mine");
  Cli cli2({cfg.string(), "--set", "train.save_to=" + (tmp.path() / "proj").string(), "--out", run.string(), "--worker",
            FAKE_WORKER_EXE},
           {}, tmp.path());
  ASSERT_EQ(cli2.wait(10), 2) << cli2.err();
  EXPECT_EQ(read_file(tmp.path() / "proj" / "config.json"), "mine");
  // A folder that already holds a model (someone's checkpoint, the init_from model) or training
  // checkpoints: saving would overwrite them without a word. Refused unless --force.
  fs::create_directories(tmp.path() / "hf");
  write_file(tmp.path() / "hf" / "config.json", "{}");
  write_file(tmp.path() / "hf" / "model.safetensors", "their weights");
  fs::create_directories(tmp.path() / "old_ckpt" / "step-00000004");
  // A sharded model (a model, not "config.json ... is not part of a checkpoint"), and shards
  // whose index is gone (a save would delete them without --force).
  fs::create_directories(tmp.path() / "sharded");
  write_file(tmp.path() / "sharded" / "config.json", "{}");
  write_file(tmp.path() / "sharded" / "model.safetensors.index.json", "{}");
  fs::create_directories(tmp.path() / "shards");
  write_file(tmp.path() / "shards" / "model-00002-of-00002.safetensors", "half a download");
  write_file(tmp.path() / "shards" / "model-00001-of-00002.safetensors", "half a download");
  for (const auto& [dir, what] :
       {std::pair{"hf", "a model (model.safetensors)"}, std::pair{"old_ckpt", "training checkpoints (step-*)"},
        std::pair{"sharded", "a model (model.safetensors.index.json)"},
        std::pair{"shards", "a model (model-00001-of-00002.safetensors)"}}) {
    Cli c({cfg.string(), "--set", "train.save_to=" + (tmp.path() / dir).string(), "--out", run.string(), "--worker",
           FAKE_WORKER_EXE},
          {}, tmp.path());
    ASSERT_EQ(c.wait(10), 2) << c.err();
    EXPECT_NE(c.err().find(std::string("already holds ") + what), std::string::npos) << c.err();
    EXPECT_FALSE(fs::exists(run)) << "refused before the run folder is made";
  }
  EXPECT_EQ(read_file(tmp.path() / "hf" / "model.safetensors"), "their weights");
  Cli forced({cfg.string(), "--set", "train.save_to=" + (tmp.path() / "hf").string(), "--out", run.string(), "--worker",
              FAKE_WORKER_EXE, "--force"},
             {}, tmp.path());
  EXPECT_EQ(forced.wait(), 0) << forced.err();
}

// Data loss class, refused even with --force: train.save_to a training checkpoint (the final
// model would replace the checkpoint's model while its optimizer state and step stay: resuming
// from it would train on from the wrong weights, unsaid), the run directory itself (the model's
// config.json would replace the run's) or a folder inside it (made before the run directory,
// which would then be refused as "not a run directory of ulysses-run", exit 1).
TEST(Reliability, SaveToNeverACheckpointOrTheRunDirectory) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  fs::create_directories(tmp.path() / "ck" / "step-00000002");
  write_file(tmp.path() / "ck" / "step-00000002" / "model.safetensors", "weights of step 2");
  fs::create_directories(tmp.path() / "renamed");
  write_file(tmp.path() / "renamed" / "state.json", "{}");
  // A name the save writes that is a folder: the save would fail after training, the old model
  // half replaced.
  fs::create_directories(tmp.path() / "cfgdir" / "config.json");
  const std::pair<std::string, std::string> cases[] = {
      {(tmp.path() / "cfgdir").string(), "config.json is a folder, and the save writes a file of that name"},
      {(tmp.path() / "ck" / "step-00000002").string(), "is a training checkpoint"},
      {(tmp.path() / "renamed").string(), "is a training checkpoint"},
      {run.string(), "is the run directory --out"},
      {(run / "trace").string(), "lies inside the run directory --out"},
      {(run / "model").string(), "lies inside the run directory --out"},
  };
  for (const auto& [save_to, says] : cases) {
    for (bool force : {false, true}) {
      std::vector<std::string> args{cfg.string(), "--set",        "train.save_to=" + save_to, "--out", run.string(),
                                    "--worker",   FAKE_WORKER_EXE};
      if (force) args.push_back("--force");
      Cli c(args, {}, tmp.path());
      ASSERT_EQ(c.wait(10), 2) << save_to << "\n" << c.err();
      EXPECT_NE(c.err().find(says), std::string::npos) << c.err();
      EXPECT_NE(c.err().find("train.save_to"), std::string::npos) << c.err();
      EXPECT_FALSE(fs::exists(run)) << "refused before the run folder is made";
    }
  }
  EXPECT_EQ(read_file(tmp.path() / "ck" / "step-00000002" / "model.safetensors"), "weights of step 2");
  // The folder that holds the checkpoints is where a resumed run saves (as before).
  Cli ok({cfg.string(), "--set", "train.save_to=" + (tmp.path() / "model").string(), "--out", run.string(), "--worker",
          FAKE_WORKER_EXE},
         {}, tmp.path());
  EXPECT_EQ(ok.wait(), 0) << ok.err();
}

// A launcher's --force must not move aside a folder another launcher is still setting up
// (after its write probe, before its run.json: config.json, logs/ and trace/ are there, nothing
// names the live launcher), which would then fail. The probe stays until run.json is written.
TEST(Reliability, ForceNeverMovesAFolderAnotherLauncherIsSettingUp) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  const fs::path run = tmp.path() / "run";
  Cli a({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"ULYSSES_TEST_SETUP_PAUSE_MS", "3000"}},
        tmp.path());
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!fs::exists(run / "config.json") && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(run / "config.json"));
  ASSERT_FALSE(fs::exists(run / "run.json")) << "the pause is between config.json and run.json";
  const fs::path b_io = tmp.path() / "b";
  fs::create_directories(b_io);
  Cli b({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE, "--force"}, {}, b_io);
  ASSERT_EQ(b.wait(10), 2) << b.err();
  EXPECT_NE(b.err().find("is being set up or run by another ulysses-run (pid " + std::to_string(a.pid()) + ")"),
            std::string::npos)
      << b.err();
  ASSERT_EQ(a.wait(30), 0) << a.err();
  EXPECT_TRUE(fs::exists(run / "run.json"));
  for (const auto& e : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find("run.old-"), std::string::npos) << e.path();
  // The probe is gone once run.json is there: the finished run is an ordinary old run.
  for (const auto& e : fs::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find(".ulysses-write-probe-"), std::string::npos) << e.path();
}

// Ctrl-Z (SIGTSTP) would stop the launcher but not the ranks, each in its own process group:
// their output would fill the pipes, block their training, and the run would time out when it
// came back. The launcher says so and goes on; and a launcher stopped from outside (SIGSTOP)
// blocks a rank's training only after 256 KiB of output, not 64 KiB (~200 steps).
TEST(Reliability, CtrlZNeverStallsTheRanks) {
  TempDir tmp;
  auto proc_state = [](pid_t pid) {
    const std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t rp = st.rfind(')');
    return rp == std::string::npos || rp + 2 >= st.size() ? '?' : st[rp + 2];
  };
  {
    const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 60));
    const fs::path run = tmp.path() / "tstp";
    Cli c({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"FAKE_STEP_MS", "20"}}, tmp.path());
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!fs::exists(run / "run.json") && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(c.pid(), SIGTSTP);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_NE(proc_state(c.pid()), 'T') << "the launcher stopped on SIGTSTP";
    if (proc_state(c.pid()) == 'T') ::kill(c.pid(), SIGCONT);
    ASSERT_EQ(c.wait(30), 0) << c.err();
    EXPECT_NE(c.err().find("Ctrl-Z does not pause a run"), std::string::npos) << c.err();
  }
  {
    // 600 steps of output (~170 KiB on rank 0's stdout) while the launcher is stopped.
    const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 600), "long.json");
    const fs::path run = tmp.path() / "stopped";
    Cli c({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_STEP_MS", "1"}, {"FAKE_MAX_S", "60"}}, tmp.path());
    auto until = Clock::now() + std::chrono::seconds(10);
    while (!fs::exists(run / "metrics.jsonl") && Clock::now() < until)  // the ranks are up
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ::kill(c.pid(), SIGSTOP);
    auto lines = [&] {
      const std::string m = read_file(run / "metrics.jsonl");
      return std::count(m.begin(), m.end(), '\n');
    };
    until = Clock::now() + std::chrono::seconds(20);
    while (lines() < 600 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(lines(), 600) << "rank 0 stalled while the launcher was stopped";
    ::kill(c.pid(), SIGCONT);
    ASSERT_EQ(c.wait(30), 0) << c.err();
  }
}

// Ranks that all exit 0 before the last step is reported did not finish the run: `--worker
// /bin/true` is a failure, not "finished 0 steps on 2 ranks", exit 0.
TEST(Reliability, RanksExitingZeroBeforeTheLastStepAreAFailure) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3));
  const fs::path run = tmp.path() / "run";
  Cli c({cfg.string(), "--out", run.string(), "--worker", "/bin/true"}, {}, tmp.path());
  ASSERT_EQ(c.wait(), 1) << c.err();
  EXPECT_NE(c.err().find("every rank exited 0, but rank 0 reported no step of train.steps 3"), std::string::npos)
      << c.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["status"], "failed");
  EXPECT_EQ(rec["exit_code"], 1);
  // The whole run: finished, as before.
  Cli ok({cfg.string(), "--out", (tmp.path() / "ok").string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(ok.wait(), 0) << ok.err();
  EXPECT_NE(ok.err().find("finished 3 steps on 2 ranks"), std::string::npos) << ok.err();
}

// Started with stdout or stderr closed (`>&-`), ulysses-run's next open() would get that
// descriptor: its own progress lines would go into RUN/logs/rank0.log, and `--json >&-` would
// exit 0 with every step gone. Closed descriptors are opened on /dev/null first; --json
// refuses a closed stdout.
TEST(Reliability, ClosedStdoutOrStderrNeverSendsOutputIntoTheRunFiles) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  auto launch = [&](int closed_fd, const fs::path& out, bool json) {
    std::vector<std::string> a{ULYSSES_RUN_EXE, cfg.string(), "--out", out.string(), "--worker", FAKE_WORKER_EXE};
    if (json) a.push_back("--json");
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const fs::path other = tmp.path() / "other.txt";
    posix_spawn_file_actions_addopen(&fa, closed_fd == 1 ? 2 : 1, other.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addclose(&fa, closed_fd);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    for (int i = 0; i < 2000 && ::waitpid(pid, &st, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(pid, &st, WNOHANG) == 0 && ::kill(pid, 0) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      ADD_FAILURE() << "ulysses-run did not finish within 20 s";
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  };
  for (int fd : {1, 2}) {
    const fs::path out = tmp.path() / ("run" + std::to_string(fd));
    ASSERT_EQ(launch(fd, out, false), 0);
    for (const auto& e : fs::directory_iterator(out / "logs")) {
      const std::string log = read_file(e.path());
      EXPECT_EQ(log.find("ulysses-run:"), std::string::npos) << e.path() << ":\n" << log;
      EXPECT_EQ(log.find("[rank "), std::string::npos) << e.path() << ":\n" << log;
    }
  }
  const fs::path jout = tmp.path() / "json";
  EXPECT_EQ(launch(1, jout, true), 2);
  EXPECT_NE(read_file(tmp.path() / "other.txt").find("stdout, which is closed"), std::string::npos)
      << read_file(tmp.path() / "other.txt");
  EXPECT_FALSE(fs::exists(jout));
}

// Data loss class: on a full disk the final status could not be written and run.json said
// "running" forever. Its bytes are reserved when the run starts and reused in place.
TEST(Reliability, FinalStatusIsWrittenWhenNoNewFileCanBeCreated) {
  TempDir tmp;
  RunRecord r;
  r.status = RunStatus::Running;
  r.pid = 1;
  const fs::path p = tmp.path() / "run.json";
  write_run_record(p.string(), r);
  EXPECT_GE(fs::file_size(p), kRunJsonReserve);
  // Block the temporary file the atomic replace needs: a directory in its place.
  fs::create_directories(p.string() + ".tmp" + std::to_string(::getpid()));
  r.status = RunStatus::Failed;
  r.failed_rank = 2;
  r.message = std::string(300, 'm');
  write_run_record(p.string(), r);
  const RunRecord back = read_run_record(p.string());
  EXPECT_EQ(back.status, RunStatus::Failed);
  EXPECT_EQ(back.failed_rank.value_or(-1), 2);
  EXPECT_EQ(back.message, r.message);
}

// The same through ulysses-run on a real full file system (a 2 MiB tmpfs; skipped where
// mounting is not allowed): the run ends with a final status, never "running".
TEST(Reliability, FullDiskStillEndsWithAFinalStatus) {
  TempDir tmp;
  const fs::path mnt = tmp.path() / "small";
  fs::create_directories(mnt);
  if (::geteuid() != 0 ||
      std::system(("mount -t tmpfs -o size=2m tmpfs " + mnt.string() + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  struct Unmount {
    fs::path p;
    ~Unmount() { (void)!std::system(("umount " + p.string()).c_str()); }
  } unmount{mnt};
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3));
  const fs::path run = mnt / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"FAKE_FILL", "1"}}, tmp.path());
  const int code = cli.wait(20);
  EXPECT_NE(code, -1);
  const std::string status = run_json_status(run);
  EXPECT_NE(status, "running") << cli.err();
}

// Blame class: a rank that stops (SIGSTOP: frozen, swapped out, debugger) makes the others
// time out and exit first; the launcher names the stopped rank, not the first to exit.
TEST(Reliability, BlamesTheStoppedRankNotTheFirstToTimeOut) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 2, 20));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "stop"}, {"FAKE_FAIL_RANK", "2"}, {"FAKE_FAIL_STEP", "1"}, {"FAKE_TIMEOUT_MS", "700"}},
          tmp.path());
  ASSERT_EQ(cli.wait(), 1) << cli.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["failed_rank"], 2) << rec;
  EXPECT_NE(rec["message"].get<std::string>().find("stopped"), std::string::npos) << rec;
  EXPECT_NE(cli.err().find("lines of rank 2"), std::string::npos) << cli.err();
  for (const auto& r : fake_records(run, 4))
    EXPECT_TRUE(wait_gone(r["pid"], 5)) << "worker " << r["pid"] << " still runs";
}

// Blame class: a rank killed by a signal while its peers notice at once and exit 1: the
// killed one is named even when they are found dead in the same pass.
TEST(Reliability, BlamesTheKilledRankWhenPeersExitAtOnce) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 2, 20));
  for (int attempt = 0; attempt < 3; ++attempt) {
    const fs::path run = tmp.path() / ("run" + std::to_string(attempt));
    Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
            {{"FAKE_MODE", "crash"}, {"FAKE_FAIL_RANK", "3"}, {"FAKE_FAIL_STEP", "1"}, {"FAKE_PEER_EXIT", "1"}},
            tmp.path());
    ASSERT_EQ(cli.wait(), 1) << cli.err();
    const json rec = read_json(run / "run.json");
    EXPECT_EQ(rec["failed_rank"], 3) << rec;
    EXPECT_NE(rec["message"].get<std::string>().find("killed by signal 9"), std::string::npos) << rec;
  }
}

// Blame class: a rank that hangs while running (a deadlock, an endless loop) makes every other
// rank time out; the silent running rank is named, not the first to time out.
TEST(Reliability, BlamesTheSilentRankWhenEveryOtherTimesOut) {
  TempDir tmp;
  json c = small_config(2, 2, 20);
  c["parallel"]["timeout_s"] = 2;
  const fs::path cfg = write_config(tmp.path(), c);
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE},
          {{"FAKE_MODE", "freeze"},
           {"FAKE_FAIL_RANK", "2"},
           {"FAKE_FAIL_STEP", "1"},
           {"FAKE_TIMEOUT_MS", "700"},
           {"FAKE_PEER_EXIT", "1"}},
          tmp.path());
  ASSERT_EQ(cli.wait(), 1) << cli.err();
  const json rec = read_json(run / "run.json");
  EXPECT_EQ(rec["failed_rank"], 2) << rec;
  EXPECT_NE(rec["message"].get<std::string>().find("silent"), std::string::npos) << rec;
  for (const auto& r : fake_records(run, 4))
    EXPECT_TRUE(wait_gone(r["pid"], 5)) << "worker " << r["pid"] << " still runs";
}

// ------------------------------------------------------------------ watchdog end to end
// (rules: test_watchdog.cpp). The fake workers beat like the real one and obey the same
// fault hook (ULYSSES_FAULT=RANK:PHASE[@STEP]:ACTION).

namespace {

struct WatchdogCase {
  int code = -1;
  double took_s = 0;
  json rec;
  std::string err;
};

// Runs ulysses-run with timeout_s and the given environment; `during` runs once the
// workers are up (it may signal them).
WatchdogCase run_watchdog_case(const TempDir& tmp, const std::string& name, int sp, int dp, double timeout_s,
                               const std::map<std::string, std::string>& env,
                               const std::function<void(const fs::path& run)>& during = {}) {
  json c = small_config(sp, dp, 400);
  c["parallel"]["timeout_s"] = timeout_s;
  const fs::path cfg = write_config(tmp.path(), c, name + ".json");
  const fs::path run = tmp.path() / name;
  fs::create_directories(tmp.path() / (name + "-io"));
  const auto t0 = Clock::now();
  Cli cli({cfg.string(), "--json", "--out", run.string(), "--worker", FAKE_WORKER_EXE}, env,
          tmp.path() / (name + "-io"));
  if (during) during(run);
  WatchdogCase out;
  out.code = cli.wait(timeout_s + 20);
  out.took_s = std::chrono::duration<double>(Clock::now() - t0).count();
  out.err = cli.err();
  if (fs::exists(run / "run.json")) out.rec = read_json(run / "run.json");
  for (int r = 0; r < sp * dp; ++r)
    if (fs::exists(run / "fake" / ("rank" + std::to_string(r) + ".json"))) {
      const json f = read_json(run / "fake" / ("rank" + std::to_string(r) + ".json"));
      EXPECT_TRUE(wait_gone(f["pid"], 5)) << name << ": worker " << f["pid"] << " still runs";
    }
  return out;
}

std::string msg(const WatchdogCase& c) {
  return c.rec.is_object() ? c.rec.value("message", std::string()) : std::string();
}

}  // namespace

// Hang class: a rank 0 that stops answering during rendezvous (frozen: SIGSTOP) could hang
// the run forever. Exit 1 within timeout_s + a few seconds, naming rank 0 and the phase.
TEST(Watchdog, FrozenStoreHostInRendezvousIsNamedWithinTheTimeout) {
  TempDir tmp;
  const double timeout_s = 2;
  const auto c = run_watchdog_case(tmp, "frozen0", 2, 1, timeout_s, {{"ULYSSES_FAULT", "0:rendezvous:stop"}});
  ASSERT_EQ(c.code, 1) << c.err;
  EXPECT_LT(c.took_s, timeout_s + 4) << c.err;
  EXPECT_EQ(c.rec["failed_rank"], 0) << c.rec;
  EXPECT_EQ(c.rec["status"], "failed");
  EXPECT_NE(msg(c).find("rendezvous"), std::string::npos) << c.rec;
  EXPECT_NE(msg(c).find("no heartbeat"), std::string::npos) << c.rec;
  EXPECT_NE(c.err.find("lines of rank 0"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("fault hook"), std::string::npos) << "the last log lines of rank 0 are shown\n" << c.err;
}

// The same rank 0 alive (its heartbeat thread beats) but its main thread blocked: no
// progress and no CPU for timeout_s + 2 s; rank 1 waits in rendezvous too, rank 0 is named.
TEST(Watchdog, HungStoreHostInRendezvousIsNamedWithinTheTimeout) {
  TempDir tmp;
  const double timeout_s = 2;
  const auto c = run_watchdog_case(tmp, "hung0", 2, 1, timeout_s, {{"ULYSSES_FAULT", "0:rendezvous:hang"}});
  ASSERT_EQ(c.code, 1) << c.err;
  EXPECT_LT(c.took_s, timeout_s + 2 + 4) << c.err;
  EXPECT_EQ(c.rec["failed_rank"], 0) << c.rec;
  EXPECT_NE(msg(c).find("in rendezvous"), std::string::npos) << c.rec;
}

// A rank that hangs while building its model; the others went on to step 0 and wait for it.
TEST(Watchdog, HungRankInModelBuildIsNamedNotTheRanksWaitingForIt) {
  TempDir tmp;
  const double timeout_s = 1.5;
  const auto c = run_watchdog_case(tmp, "hung-build", 2, 2, timeout_s, {{"ULYSSES_FAULT", "2:build:hang"}});
  ASSERT_EQ(c.code, 1) << c.err;
  EXPECT_LT(c.took_s, timeout_s + 2 + 4) << c.err;
  EXPECT_EQ(c.rec["failed_rank"], 2) << c.rec;
  EXPECT_NE(msg(c).find("model build"), std::string::npos) << c.rec;
}

// Blame class: a rank SIGSTOPped from outside mid-training. With peers that block forever (a
// collective without a timeout) and with peers that time out and exit first, the stopped
// rank is named with its step — never a healthy rank that timed out.
TEST(Watchdog, RankStoppedFromOutsideMidTrainingIsNamed) {
  TempDir tmp;
  const double timeout_s = 2;
  for (const char* peer_timeout_ms : {"0", "1500"}) {
    const std::string name = std::string("stopped-") + peer_timeout_ms;
    long victim = 0;
    const auto c =
        run_watchdog_case(tmp, name, 2, 2, timeout_s, {{"FAKE_STEP_MS", "40"}, {"FAKE_TIMEOUT_MS", peer_timeout_ms}},
                          [&](const fs::path& run) {
                            ASSERT_TRUE(wait_for_workers(run, 4));
                            ASSERT_TRUE(wait_for_text(run / "logs" / "rank1.log", "step 3 done"));
                            victim = read_json(run / "fake" / "rank1.json")["pid"];
                            ::kill(static_cast<pid_t>(victim), SIGSTOP);
                          });
    ASSERT_EQ(c.code, 1) << name << "\n" << c.err;
    EXPECT_LT(c.took_s, timeout_s + 8) << name;  // start-up and 3 steps included
    EXPECT_EQ(c.rec["failed_rank"], 1) << name << ": " << c.rec;
    EXPECT_NE(msg(c).find("in step "), std::string::npos) << name << ": " << c.rec;
    EXPECT_NE(c.err.find("lines of rank 1"), std::string::npos) << c.err;
  }
}

// The liveness the studio's rank table shows: a line per rank and phase from ulysses-run,
// even for ranks that log nothing themselves.
TEST(Watchdog, LivenessLinesNameEachRanksPhase) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3));
  const fs::path run = tmp.path() / "run";
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {}, tmp.path());
  ASSERT_EQ(cli.wait(), 0) << cli.err();
  for (const char* line : {"ulysses-run: rank 0: rendezvous", "ulysses-run: rank 1: rendezvous",
                           "ulysses-run: rank 1: model build", "ulysses-run: rank 1: training (step 0)"})
    EXPECT_NE(cli.err().find(line), std::string::npos) << line << "\n" << cli.err();
  EXPECT_EQ(cli.err().find("ulysses-run: rank 1: training (step 1)"), std::string::npos)
      << "one line per phase, not per step";
}

// Memory check through the planner: tiny configs never start it (cheap), a config the cost
// model puts above half the machine asks `WORKER --plan`; when that worker has no planner
// (fake_worker refuses --plan), the cost model's figure decides, and the message says so.
TEST(Reliability, MemoryCheckAsksThePlannerOnlyWhenItMatters) {
  TempDir tmp;
  const fs::path calls = tmp.path() / "worker-calls.txt";
  const fs::path wrapper = tmp.path() / "worker.sh";
  write_file(wrapper, "#!/bin/sh\necho \"$*\" >> '" + calls.string() + "'\nexec '" + FAKE_WORKER_EXE + "' \"$@\"\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  {
    Cli cli({cfg.string(), "--out", (tmp.path() / "tiny").string(), "--worker", wrapper.string()}, {}, tmp.path());
    ASSERT_EQ(cli.wait(), 0) << cli.err();
    EXPECT_EQ(read_file(calls).find("--plan"), std::string::npos) << read_file(calls);
  }
  // 1M tokens with the math attention: N x N scores per head, terabytes per rank.
  Cli cli({cfg.string(), "--set", "train.seq_length=1048576", "--set", "model.max_position_embeddings=1048576", "--set",
           "train.attention=sdpa", "--set", "train.device=cpu", "--out", (tmp.path() / "huge").string(), "--worker",
           wrapper.string()},
          {}, tmp.path());
  ASSERT_EQ(cli.wait(), 2) << cli.err();
  EXPECT_NE(read_file(calls).find("--plan --json --config"), std::string::npos) << read_file(calls);
  EXPECT_NE(cli.err().find("(cost model)"), std::string::npos) << cli.err();
  EXPECT_NE(cli.err().find("the memory planner was not used"), std::string::npos) << cli.err();
  EXPECT_NE(cli.err().find("exceeds the memory this machine has available (MemAvailable)"), std::string::npos)
      << cli.err();
  EXPECT_FALSE(fs::exists(tmp.path() / "huge"));
}

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

// The same through ulysses-run under a file-size limit (what a full disk does to the
// workers' appends; ulysses-run and its workers inherit it): rank 0 fails naming
// metrics.jsonl and the step, run.json ends "failed", metrics.jsonl holds whole lines only.
TEST(Reliability, AFileSizeLimitEndsTheRunWithAFinalStatusAndNoTornLine) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 400));
  const fs::path run = tmp.path() / "run";
  const fs::path script = tmp.path() / "limited.sh";
  write_file(script, "#!/bin/bash\nulimit -f 16\nexec \"$@\"\n");  // 16 KiB per file
  fs::permissions(script, fs::perms::owner_all);
  Cli cli({cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE}, {{"FAKE_STEP_MS", "1"}}, tmp.path());
  // control: the same run without the limit finishes
  ASSERT_EQ(cli.wait(30), 0) << cli.err();
  const fs::path run2 = tmp.path() / "run2";
  const std::string cmd = script.string() + " " + ULYSSES_RUN_EXE + " " + cfg.string() + " --out " + run2.string() +
                          " --worker " + FAKE_WORKER_EXE + " > " + (tmp.path() / "limited.err").string() + " 2>&1";
  const int st = std::system(cmd.c_str());
  const std::string err = read_file(tmp.path() / "limited.err");
  ASSERT_TRUE(WIFEXITED(st)) << err;
  EXPECT_EQ(WEXITSTATUS(st), 1) << err;
  const json rec = read_json(run2 / "run.json");
  EXPECT_EQ(rec["status"], "failed") << rec;
  EXPECT_EQ(rec["failed_rank"], 0) << rec;
  EXPECT_NE(err.find("cannot append step"), std::string::npos) << err;
  EXPECT_NE(err.find((run2 / "metrics.jsonl").string()), std::string::npos) << err;
  const std::string metrics = read_file(run2 / "metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  EXPECT_LE(metrics.size(), 16384u);
  EXPECT_EQ(metrics.back(), '\n');
  for (const auto& l : lines_of(metrics)) EXPECT_TRUE(json::parse(l, nullptr, false).is_object()) << l;
}

// A save folder belongs to one run at a time. Two runs given one train.save_to would both
// exit 0 and both report their saves, the folder ending with the second's checkpoints. The
// second is refused before launch, naming the first; once the first is over, the folder
// can be used again.
TEST(Claims, SecondRunOnOneSaveToIsRefusedBeforeLaunchNamingTheFirst) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 8));
  const fs::path save = tmp.path() / "model";
  const fs::path run_a = tmp.path() / "a", run_b = tmp.path() / "b";
  fs::create_directories(tmp.path() / "io_a");
  fs::create_directories(tmp.path() / "io_b");
  Cli a({cfg.string(), "--set", "train.save_to=" + save.string(), "--out", run_a.string(), "--worker", FAKE_WORKER_EXE},
        {{"FAKE_STEP_MS", "250"}}, tmp.path() / "io_a");
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!fs::exists(run_a / "run.json") && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(run_a / "run.json")) << a.err();
  write_file(save / "step-00000004.marker", "the first run's checkpoint");
  Cli b({cfg.string(), "--set", "train.save_to=" + save.string(), "--out", run_b.string(), "--worker", FAKE_WORKER_EXE},
        {}, tmp.path() / "io_b");
  ASSERT_EQ(b.wait(10), 2) << b.err();
  const std::string a_id = fs::absolute(run_a).lexically_normal().string();
  EXPECT_NE(b.err().find("train.save_to: " + save.string() + " belongs to run " + a_id + " (ulysses-run pid " +
                         std::to_string(a.pid()) + "), which is still going"),
            std::string::npos)
      << b.err();
  EXPECT_FALSE(fs::exists(run_b)) << "refused before the run folder is made";
  ASSERT_EQ(a.wait(30), 0) << a.err();
  EXPECT_EQ(read_file(save / "step-00000004.marker"), "the first run's checkpoint");
  // The first run is over: its claim went with it.
  fs::remove(save / "step-00000004.marker");
  Cli c({cfg.string(), "--set", "train.save_to=" + save.string(), "--out", run_b.string(), "--worker", FAKE_WORKER_EXE},
        {}, tmp.path() / "io_b");
  EXPECT_EQ(c.wait(30), 0) << c.err();
  const auto owner = ulysses::launch::last_owner(save.string());
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->run, fs::absolute(run_b).lexically_normal().string());
}

// Two launchers started together on one --out. Judged by files, one reads the other's probe
// file as foreign content and both refuse (1 of 15 tries); with --force, 2 of 6 tries run
// nothing. One claim (an atomic lock) decides: exactly one run each time, the other refused with
// exit 2. ULYSSES_RACE_PAIRS sets the number of pairs of each kind (default 5 + 5).
TEST(Claims, LaunchersRacingOnOneOutRunExactlyOnce) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 3));
  int pairs = 5;
  if (const char* p = std::getenv("ULYSSES_RACE_PAIRS")) pairs = std::max(1, std::atoi(p));
  int runs_total = 0;
  for (const bool force : {false, true}) {
    for (int i = 0; i < pairs; ++i) {
      const fs::path dir = tmp.path() / ((force ? "f" : "n") + std::to_string(i));
      const fs::path run = dir / "run";
      fs::create_directories(dir / "io0");
      fs::create_directories(dir / "io1");
      if (force) {  // an old run for both to move aside
        fs::create_directories(run);
        write_file(run / "run.json", R"({"status": "finished", "pid": 1, "world_size": 2, "exit_code": 0})");
      }
      std::vector<std::string> args{cfg.string(), "--out", run.string(), "--worker", FAKE_WORKER_EXE};
      if (force) args.push_back("--force");
      const std::map<std::string, std::string> env{{"FAKE_STEP_MS", "150"}};
      Cli l0(args, env, dir / "io0");
      Cli l1(args, env, dir / "io1");
      const int c0 = l0.wait(30), c1 = l1.wait(30);
      const int ran = (c0 == 0) + (c1 == 0);
      runs_total += ran;
      EXPECT_EQ(ran, 1) << (force ? "--force " : "") << "pair " << i << ": exits " << c0 << ", " << c1 << "\nfirst:\n"
                        << l0.err() << "\nsecond:\n"
                        << l1.err();
      EXPECT_TRUE((c0 == 0 && c1 == 2) || (c0 == 2 && c1 == 0)) << c0 << " " << c1;
      const std::string loser = c0 == 0 ? l1.err() : l0.err();
      EXPECT_TRUE(loser.find("is being set up or run by another ulysses-run") != std::string::npos ||
                  loser.find("already holds a run") != std::string::npos)
          << loser;
      EXPECT_EQ(run_json_status(run), "finished");
      size_t aside = 0;
      for (const auto& e : fs::directory_iterator(dir)) aside += e.path().filename().string().rfind("run.old-", 0) == 0;
      EXPECT_EQ(aside, force ? 1u : 0u) << "the old run moved aside once (and nothing else)";
    }
  }
  std::printf("[ figures ] %d pairs of launchers on one --out (%d without, %d with --force): %d run(s)\n", 2 * pairs,
              pairs, pairs, runs_total);
}

// `--plan --worker /bin/true` must not exit 0 printing nothing, nor `/bin/false` exit 1, no word.
TEST(UlyssesRun, PlanFromSomethingThatIsNoWorkerIsSaid) {
  TempDir tmp;
  const fs::path cfg = write_config(tmp.path(), small_config(2, 1, 2));
  for (const char* worker : {"/bin/true", "/bin/false"}) {
    Cli cli({cfg.string(), "--plan", "--worker", worker}, {}, tmp.path());
    EXPECT_EQ(cli.wait(10), 1) << worker << ": " << cli.err();
    EXPECT_NE(cli.err().find(std::string("--plan: ") + worker), std::string::npos) << cli.err();
    EXPECT_NE(cli.err().find("is --worker a ulysses-worker of this build?"), std::string::npos) << cli.err();
  }
}
