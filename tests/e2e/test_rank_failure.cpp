// A rank that fails must not leave the others hanging: two real ulysses-worker processes
// on Gloo (started directly, without the launcher that would stop them), one of them killed
// (SIGKILL) or frozen (SIGSTOP) mid-run; the survivor must exit with code 1 within
// parallel.timeout_s + a few seconds. head_chunks=2 keeps several all-to-alls queued on the
// Gloo group, which a plain destructor would wait out one timeout each. Also: impossible
// device/backend settings are refused (exit 2) by ulysses-run before any worker starts.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"

extern char** environ;

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTimeoutS = 3.0;

bool ulysses_build_has_cuda() { return ULYSSES_BUILD_HAS_CUDA_TEST != 0; }

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

std::string dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("ulysses_rankfail_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string write_config(const std::string& d) {
  json c = {
      {"model",
       {{"vocab_size", 256},
        {"hidden_size", 32},
        {"intermediate_size", 64},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2}}},
      {"parallel", {{"sp_size", 2}, {"dp_size", 1}, {"head_chunks", 2}, {"backend", "gloo"}, {"timeout_s", kTimeoutS}}},
      {"train", {{"seq_length", 64}, {"steps", 1000000}, {"threads_per_rank", 1}, {"device", "cpu"}}},
      {"data", {{"kind", "synthetic"}}},
      {"profile", {{"enabled", false}}}};
  const auto p = d + "/config.json";
  std::ofstream(p) << c.dump(2);
  return p;
}

pid_t start_rank(int rank, int port, const std::string& cfg, const std::string& out) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool ours = false;
    for (const char* k : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
                          "ULYSSES_SINGLE_RANK_GROUPS="})
      ours |= kv.rfind(k, 0) == 0;
    if (!ours) env.push_back(kv);
  }
  for (const std::string& kv :
       {"RANK=" + std::to_string(rank), std::string("WORLD_SIZE=2"), "LOCAL_RANK=" + std::to_string(rank),
        std::string("LOCAL_WORLD_SIZE=2"), std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)})
    env.push_back(kv);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bin = ULYSSES_WORKER_BIN, a1 = "--config", a3 = "--out";
  std::string cfg_copy = cfg, out_copy = out;
  char* argv[] = {bin.data(), a1.data(), cfg_copy.data(), a3.data(), out_copy.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = out + "/rank" + std::to_string(rank) + ".log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

size_t metric_lines(const std::string& out) {
  std::ifstream m(out + "/metrics.jsonl");
  std::string l;
  size_t n = 0;
  while (std::getline(m, l)) ++n;
  return n;
}

// Waits for pid up to `limit_s`; returns the exit status (-1 when still running).
int wait_for(pid_t pid, double limit_s, double* took_s) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < limit_s) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      *took_s = std::chrono::duration<double>(Clock::now() - t0).count();
      return st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *took_s = limit_s;
  return -1;
}

using ulysses::test::slurp;  // tests/common/e2e_util.hpp

// Starts 2 ranks, waits for 2 finished steps, sends `sig` to `victim` and checks that the
// other rank exits 1 within timeout_s + 5 s.
void run_case(const std::string& name, int victim, int sig) {
  const auto out = dir(name);
  const auto cfg = write_config(out);
  const int port = free_port();
  const pid_t p[2] = {start_rank(0, port, cfg, out), start_rank(1, port, cfg, out)};
  ASSERT_GT(p[0], 0);
  ASSERT_GT(p[1], 0);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (metric_lines(out) < 2 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(metric_lines(out), 2u) << "the run did not reach two steps:\n"
                                   << slurp(out + "/rank0.log") << slurp(out + "/rank1.log");
  const int survivor = 1 - victim;
  ::kill(p[victim], sig);
  double took = 0;
  const int st = wait_for(p[survivor], kTimeoutS + 5.0, &took);
  // clean up whatever is left before asserting
  ::kill(p[victim], SIGKILL);
  ::kill(p[victim], SIGCONT);
  int ignored = 0;
  ::waitpid(p[victim], &ignored, 0);
  if (st == -1) {
    ::kill(p[survivor], SIGKILL);
    ::waitpid(p[survivor], &ignored, 0);
  }
  const std::string log = slurp(out + "/rank" + std::to_string(survivor) + ".log");
  ASSERT_NE(st, -1) << name << ": rank " << survivor << " still running " << kTimeoutS + 5.0
                    << " s after its peer failed\n"
                    << log;
  EXPECT_TRUE(WIFEXITED(st)) << name << ": rank " << survivor << " ended by signal "
                             << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << "\n"
                             << log;
  if (WIFEXITED(st)) {
    EXPECT_EQ(WEXITSTATUS(st), 1) << name << "\n" << log;
  }
  EXPECT_LT(took, kTimeoutS + 5.0) << name;
  EXPECT_NE(log.find("error"), std::string::npos) << name << ": the survivor should say why it stopped\n" << log;
  std::printf("[ %s ] rank %d exited %d after %.2f s (timeout_s %.1f)\n", name.c_str(), survivor,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, took, kTimeoutS);
}

}  // namespace

TEST(RankFailure, KilledRankMakesThePeerExit1WithinTheTimeout) { run_case("killed", 1, SIGKILL); }

TEST(RankFailure, FrozenStoreHostMakesThePeerExit1WithinTheTimeout) { run_case("frozen", 0, SIGSTOP); }

// The device decision refuses impossible settings before any worker starts (ulysses-run)
// and in the worker itself: exit 2 with a message naming the setting.
TEST(DeviceRefusal, ImpossibleDeviceOrBackendIsBadInputBeforeAnythingStarts) {
  const auto out = dir("refuse");
  const auto cfg = write_config(out);
  struct Case {
    std::string set, needle;
  };
  const std::vector<Case> cases =
      ulysses_build_has_cuda()
          ? std::vector<Case>{{"train.device=cpu --set parallel.backend=nccl",
                               "parallel.backend nccl needs the model on a GPU"}}
          : std::vector<Case>{{"train.device=cuda", "train.device is cuda but this build is CPU-only"},
                              {"parallel.backend=nccl", "parallel.backend nccl needs a build against a CUDA libtorch"},
                              {"train.device=cpu --set parallel.backend=nccl", "parallel.backend nccl"}};
  for (const auto& c : cases) {
    const auto run_dir = out + "/run";
    fs::remove_all(run_dir);
    const std::string cmd = std::string(ULYSSES_RUN_BIN) + " " + cfg + " --set " + c.set + " --worker " +
                            ULYSSES_WORKER_BIN + " --out " + run_dir + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    const int st = pclose(f);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << c.set << ": " << text;
    EXPECT_NE(text.find(c.needle), std::string::npos) << c.set << ": " << text;
    EXPECT_FALSE(fs::exists(run_dir + "/logs")) << c.set << ": a worker was started";
    // the worker refuses the same on its own (one rank, no rendezvous needed)
    const std::string wcmd = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_PORT=1 " +
                             std::string(ULYSSES_WORKER_BIN) + " --config " + cfg + " --out " + out + "/w --set " +
                             c.set + " 2>&1";
    f = popen(wcmd.c_str(), "r");
    text.clear();
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    const int wst = pclose(f);
    EXPECT_TRUE(WIFEXITED(wst) && WEXITSTATUS(wst) == 2) << "worker, " << c.set << ": " << text;
    EXPECT_NE(text.find(c.needle), std::string::npos) << "worker, " << c.set << ": " << text;
  }
}

// ------------------------------------------------------------------ the launcher's watchdog
// with real workers (Gloo, TCPStore): a rank that stops answering is named with its phase,
// the others are stopped and ulysses-run exits 1 within timeout_s + a few seconds.

namespace {

struct Launcher {
  pid_t pid = -1;
  std::string run, err_path;
};

Launcher start_launcher(const std::string& d, const std::string& cfg, const std::vector<std::string>& env_extra) {
  Launcher l;
  l.run = d + "/run";
  l.err_path = d + "/launcher.err";
  fs::remove_all(l.run);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("ULYSSES_FAULT=", 0) == 0) continue;
    env.push_back(kv);
  }
  for (const auto& kv : env_extra) env.push_back(kv);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bin = ULYSSES_RUN_BIN, c = cfg, o = "--out", r = l.run, w = "--worker", wb = ULYSSES_WORKER_BIN;
  char* argv[] = {bin.data(), c.data(), o.data(), r.data(), w.data(), wb.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, l.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&l.pid, bin.c_str(), &fa, nullptr, argv, envp.data()) != 0) l.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return l;
}

// The worker of `rank` among the launcher's children (RANK in its environment), or -1.
pid_t worker_pid(pid_t launcher, int rank) {
  std::ifstream ch("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  pid_t p;
  while (ch >> p) {
    const std::string env = slurp("/proc/" + std::to_string(p) + "/environ");
    const std::string want = "RANK=" + std::to_string(rank);
    for (size_t i = 0; i < env.size();) {
      const size_t z = env.find('\0', i);
      if (env.compare(i, (z == std::string::npos ? env.size() : z) - i, want) == 0) return p;
      if (z == std::string::npos) break;
      i = z + 1;
    }
  }
  return -1;
}

bool wait_text(const std::string& file, const std::string& text, double limit_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(limit_s);
  while (Clock::now() < end) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

json run_record(const std::string& run) { return json::parse(slurp(run + "/run.json"), nullptr, false); }

}  // namespace

// A rank whose peer never starts gives up within timeout_s (plus its start): rank 0 waited the
// full timeout for the others to reach its store and then again for their addresses, 2x.
TEST(Watchdog, ARankWhosePeerNeverStartsGivesUpWithinTheTimeout) {
  const auto out = dir("alone");
  const auto cfg = write_config(out);
  constexpr double kAloneTimeoutS = 6.0;  // the 2x wait (12 s) lies well past the bound below
  json c = json::parse(slurp(cfg));
  c["parallel"]["timeout_s"] = kAloneTimeoutS;
  std::ofstream(cfg) << c.dump(2);
  for (int rank : {0, 1}) {
    const pid_t p = start_rank(rank, free_port(), cfg, out);
    ASSERT_GT(p, 0);
    double took = 0;
    const int st = wait_for(p, 3 * kAloneTimeoutS, &took);
    if (st == -1) {
      ::kill(p, SIGKILL);
      int ignored = 0;
      ::waitpid(p, &ignored, 0);
    }
    const std::string log = slurp(out + "/rank" + std::to_string(rank) + ".log");
    ASSERT_NE(st, -1) << "rank " << rank << " alone still running after " << 3 * kAloneTimeoutS << " s\n" << log;
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << log;
    EXPECT_LT(took, kAloneTimeoutS + 4.0) << "rank " << rank << "\n" << log;
    EXPECT_NE(log.find("a peer rank did not arrive within parallel.timeout_s"), std::string::npos) << log;
    std::printf("[ alone ] rank %d of 2 without its peer exited after %.2f s (timeout_s %.1f)\n", rank, took,
                kAloneTimeoutS);
  }
}

// Hang class: rank 0 (the TCPStore host) stops during rendezvous (the fault hook raises
// SIGSTOP once it reported the phase), which could hang the run forever.
TEST(Watchdog, RealRank0FrozenInRendezvousIsNamedWithinTheTimeout) {
  const auto d = dir("wd-rendezvous");
  const auto cfg = write_config(d);
  Launcher l = start_launcher(d, cfg, {"ULYSSES_FAULT=0:rendezvous:stop"});
  ASSERT_GT(l.pid, 0);
  const bool hooked = wait_text(l.run + "/logs/rank0.log", "fault hook", 60);
  const auto t_stop = Clock::now();
  double took = 0;
  const int st = wait_for(l.pid, 60, &took);
  const double since_stop = std::chrono::duration<double>(Clock::now() - t_stop).count();
  if (st == -1) {
    ::kill(l.pid, SIGKILL);
    int ignored;
    ::waitpid(l.pid, &ignored, 0);
  }
  const std::string err = slurp(l.err_path);
  ASSERT_TRUE(hooked) << err;
  ASSERT_NE(st, -1) << "ulysses-run still running 60 s after rank 0 froze\n" << err;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << err;
  EXPECT_LT(since_stop, kTimeoutS + 4) << err;
  std::printf("[ watchdog ] rank 0 frozen in rendezvous: ulysses-run exited %.2f s after the freeze (timeout_s %.1f)\n",
              since_stop, kTimeoutS);
  const json rec = run_record(l.run);
  EXPECT_EQ(rec["failed_rank"], 0) << rec;
  EXPECT_NE(rec["message"].get<std::string>().find("rendezvous"), std::string::npos) << rec;
  EXPECT_NE(err.find("lines of rank 0"), std::string::npos) << err;
}

// Blame class: a rank SIGSTOPped mid-training; the healthy rank times out in its collective
// first, but the stopped rank is named, with its step.
TEST(Watchdog, RealRankStoppedMidTrainingIsNamedNotTheRankThatTimedOut) {
  const auto d = dir("wd-midtrain");
  const auto cfg = write_config(d);
  Launcher l = start_launcher(d, cfg, {});
  ASSERT_GT(l.pid, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (metric_lines(l.run) < 2 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const pid_t victim = worker_pid(l.pid, 1);
  const bool reached = metric_lines(l.run) >= 2 && victim > 0;
  if (reached) ::kill(victim, SIGSTOP);
  double took = 0;
  const int st = reached ? wait_for(l.pid, kTimeoutS + 30, &took) : -1;
  if (st == -1) {
    ::kill(l.pid, SIGKILL);
    int ignored;
    ::waitpid(l.pid, &ignored, 0);
  }
  const std::string err = slurp(l.err_path);
  ASSERT_TRUE(reached) << "the run did not reach two steps\n" << err;
  ASSERT_NE(st, -1) << err;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << err;
  EXPECT_LT(took, kTimeoutS + 4) << err;
  std::printf("[ watchdog ] rank 1 SIGSTOPped mid-training: ulysses-run exited %.2f s later (timeout_s %.1f)\n", took,
              kTimeoutS);
  const json rec = run_record(l.run);
  EXPECT_EQ(rec["failed_rank"], 1) << rec;
  EXPECT_NE(rec["message"].get<std::string>().find("in step "), std::string::npos) << rec;
  // the stopped worker is gone with the run (reaped by the launcher before it exited)
  EXPECT_NE(::kill(victim, 0), 0) << "the stopped worker outlived the run";
}

// The pre-launch memory refusal uses the meta-device planner's figure when the real worker
// is there (the cost model's only when it is not; tests/launch covers that case). The model is
// made wide enough that a million tokens cannot fit even with linear (flash) attention, which
// libtorch 2.x's CPU SDPA has: 512K tokens a rank x 4096 wide is 8 GiB per fp32 activation.
TEST(MemoryCheck, RefusalUsesThePlannersFigure) {
  const auto d = dir("plan-refusal");
  const auto cfg = write_config(d);
  const std::string cmd =
      std::string(ULYSSES_RUN_BIN) + " " + cfg +
      " --set train.seq_length=1048576 --set model.max_position_embeddings=1048576 --set train.attention=sdpa"
      " --set model.hidden_size=4096 --set model.intermediate_size=11008 --set model.num_attention_heads=32"
      " --set model.num_key_value_heads=8 --set train.steps=2"
      " --worker " +
      ULYSSES_WORKER_BIN + " --out " + d + "/run 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int st = pclose(f);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << text;
  EXPECT_NE(text.find("planned peak memory (meta-device dry run"), std::string::npos) << text;
  EXPECT_NE(text.find("--force"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(d + "/run/logs")) << "a worker was started";
}
