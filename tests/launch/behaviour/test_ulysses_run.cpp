// ulysses-run end to end (app/run/main.cpp and the units it calls: run_checks, run_command,
// run_progress, stop_signals, worker_commands, machine_fit), with fake_worker standing in for
// ulysses-worker: success, a failing rank, bad input, signals, the machine's limits, failures to
// write. The folder rules end to end: test_run_folders.cpp; the rules alone: test_admission.cpp.
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
#include "launch_error.hpp"
#include "line_appender.hpp"
#include "machine_memory.hpp"
#include "metric_line.hpp"
#include "run_launcher.hpp"
#include "run_record.hpp"
#include "worker_process.hpp"
#include "launch_test_util.hpp"

// clang (the ci-asan preset) says a sanitizer with __has_feature, not GCC's __SANITIZE_*__.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ULYSSES_CLANG_SANITIZER 1
#endif
#endif
#ifndef ULYSSES_CLANG_SANITIZER
#define ULYSSES_CLANG_SANITIZER 0
#endif

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

// ulysses-run end to end

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
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || ULYSSES_CLANG_SANITIZER
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

// reliability (docs/RELIABILITY.md)
// Each test below guards one hazard; docs/RELIABILITY.md lists them by class.

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
