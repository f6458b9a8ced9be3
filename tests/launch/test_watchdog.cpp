// The start-up and progress watchdog: the heartbeat line format and fault hook, the rules
// of check_watchdog on hand-made liveness (each rule can fail on its own), and ulysses-run
// end to end with fake_worker ranks that freeze (SIGSTOP), hang while alive, or are
// stopped from outside mid-training — the launcher must name that rank and its phase,
// stop the others and exit 1 within parallel.timeout_s + a few seconds.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "heartbeat.hpp"
#include "run_launcher.hpp"
#include "watchdog.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using Clock = std::chrono::steady_clock;

namespace {

// ------------------------------------------------------------------ format and hook

TEST(Heartbeat, LinesRoundTripAndGarbageIsRejected) {
  for (const Beat b :
       {Beat{Phase::Init, -1}, Beat{Phase::Rendezvous, -1}, Beat{Phase::Build, -1}, Beat{Phase::Step, 0},
        Beat{Phase::Step, 123456789012LL}, Beat{Phase::Save, -1}, Beat{Phase::Save, 29}, Beat{Phase::Finish, -1}}) {
    const auto back = parse_beat(format_beat(b));
    ASSERT_TRUE(back) << format_beat(b);
    EXPECT_EQ(back->phase, b.phase);
    EXPECT_EQ(back->step, b.step);
  }
  EXPECT_EQ(format_beat({Phase::Step, 7}), "HB step 7");
  for (const char* bad :
       {"", "HB", "HB step", "HB step -1", "HB step 1x", "HB build 3", "HB launched -1", "HB warp -1", "hb step 1",
        "HB step 99999999999999999999", "HB  step 1", "METRIC {}", "HB step 1 2", "HB save -2", "HB finish 3"})
    EXPECT_FALSE(parse_beat(bad)) << bad;
}

TEST(Heartbeat, PhasesAreOrderedByProgress) {
  EXPECT_TRUE(less_advanced({Phase::Launched, -1}, {Phase::Init, -1}));
  EXPECT_TRUE(less_advanced({Phase::Rendezvous, -1}, {Phase::Build, -1}));
  EXPECT_TRUE(less_advanced({Phase::Build, -1}, {Phase::Step, 0}));
  EXPECT_TRUE(less_advanced({Phase::Step, 3}, {Phase::Step, 4}));
  EXPECT_FALSE(less_advanced({Phase::Step, 4}, {Phase::Step, 4}));
  EXPECT_TRUE(less_advanced({Phase::Step, 1000}, {Phase::Save, -1}));
  EXPECT_FALSE(less_advanced({Phase::Finish, -1}, {Phase::Save, -1}));
  // A checkpoint saved after step 29 sits between step 29 and step 30: a rank still saving is
  // behind one that went on to step 30, ahead of one still in step 29.
  EXPECT_TRUE(less_advanced({Phase::Step, 29}, {Phase::Save, 29}));
  EXPECT_TRUE(less_advanced({Phase::Save, 29}, {Phase::Step, 30}));
  EXPECT_FALSE(less_advanced({Phase::Save, 29}, {Phase::Save, 29}));
  EXPECT_TRUE(less_advanced({Phase::Save, 29}, {Phase::Save, -1}));
  EXPECT_TRUE(less_advanced({Phase::Save, 29}, {Phase::Finish, -1}));
  EXPECT_EQ(describe_phase(Phase::Save, 29), "checkpoint save after step 29");
}

TEST(Heartbeat, FaultHookMatchesRankPhaseAndStep) {
  std::string a;
  EXPECT_TRUE(fault_matches("0:rendezvous:stop", 0, {Phase::Rendezvous, -1}, &a));
  EXPECT_EQ(a, "stop");
  EXPECT_FALSE(fault_matches("0:rendezvous:stop", 1, {Phase::Rendezvous, -1}, &a));
  EXPECT_FALSE(fault_matches("0:rendezvous:stop", 0, {Phase::Build, -1}, &a));
  EXPECT_TRUE(fault_matches("1:build:exit,2:step@3:hang", 2, {Phase::Step, 3}, &a));
  EXPECT_EQ(a, "hang");
  EXPECT_FALSE(fault_matches("2:step@3:hang", 2, {Phase::Step, 2}, &a));
  EXPECT_TRUE(fault_matches("2:step:hang", 2, {Phase::Step, 0}, &a));  // any step
  EXPECT_FALSE(fault_matches("x:step:hang", 2, {Phase::Step, 0}, &a));
  EXPECT_FALSE(fault_matches("", 0, {Phase::Init, -1}, &a));
}

// The documented save hook fires (issue 54): Heartbeat::set stored a save's step as -1, so
// "0:save@3:exit" never matched and the launcher's beat said "checkpoint save" without its step.
TEST(Heartbeat, TheSaveHookFiresAtItsStepAndTheBeatCarriesIt) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    Heartbeat hb(fds[1], 60.0);
    hb.set(Phase::Save, 3);
    char buf[64] = {};
    const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
    ASSERT_GT(n, 0);
    EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("HB save 3\n"), std::string::npos) << buf;
  }
  ::close(fds[0]);  // the Heartbeat closed fds[1]
  ::setenv("RANK", "0", 1);
  ::setenv("ULYSSES_FAULT", "0:save@3:exit", 1);
  EXPECT_EXIT(
      {
        Heartbeat hb(-1);
        hb.set(Phase::Save, 2);  // another step: nothing
        hb.set(Phase::Save, 3);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "rank 0 exit in checkpoint save after step 3");
  ::unsetenv("ULYSSES_FAULT");
  ::unsetenv("RANK");
}

// ------------------------------------------------------------------ rules

RankLiveness alive(int rank, Beat b, double since_phase = 0.5) {
  RankLiveness r;
  r.rank = rank;
  r.running = true;
  r.beating = true;
  r.beat = b;
  r.since_phase_s = since_phase;
  r.since_beat_s = 0.3;
  r.since_cpu_s = 0.2;
  r.since_output_s = 0.5;
  return r;
}

WatchdogLimits limits(double timeout_s) {
  WatchdogLimits l;
  l.timeout_s = timeout_s;
  return l;
}

TEST(Watchdog, HealthyRanksAndLongComputingStepsPassNoMatterHowLong) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Step, 3}, 500), alive(1, {Phase::Step, 3}, 500)};
  // a 500 s step under timeout_s 10: they use CPU, so they make progress
  EXPECT_FALSE(check_watchdog(ranks, limits(10)));
  ranks[0].since_cpu_s = ranks[1].since_cpu_s = 11.9;  // blocked, but within timeout + slack
  EXPECT_FALSE(check_watchdog(ranks, limits(10)));
}

// After its final barrier a worker tears down and exits, its heartbeat thread gone first;
// under load that silence passes 1 and 2 s, enough to fail healthy runs at timeout_s 1 and 2
// "in the final barrier". Silence there is no freeze; a stopped process still is.
TEST(Watchdog, SilenceAfterTheFinalBarrierIsNoFreeze) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Finish, -1}), alive(1, {Phase::Finish, -1})};
  ranks[0].since_beat_s = ranks[1].since_beat_s = 2.5;
  EXPECT_FALSE(check_watchdog(ranks, limits(1)));
  ranks[1].stopped_s = 1.5;
  const auto v = check_watchdog(ranks, limits(1));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 1);
}

TEST(Watchdog, AFrozenRankIsNamedWithItsPhaseOnceTimeoutPasses) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Step, 4}), alive(1, {Phase::Step, 5}), alive(2, {Phase::Step, 5})};
  ranks[2].since_beat_s = 2.9;
  EXPECT_FALSE(check_watchdog(ranks, limits(3)));
  ranks[2].since_beat_s = 3.1;
  const auto v = check_watchdog(ranks, limits(3));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 2);  // not rank 0, the least advanced: rank 2 is the one that froze
  EXPECT_NE(v->what.find("step 5"), std::string::npos) << v->what;
  EXPECT_NE(v->what.find("no heartbeat"), std::string::npos) << v->what;
  // a stopped process (state T) counts from when it was seen stopped
  ranks[2].since_beat_s = 0.1;
  ranks[1].stopped_s = 3.5;
  const auto w = check_watchdog(ranks, limits(3));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rank, 1);
  EXPECT_NE(w->what.find("SIGSTOP"), std::string::npos) << w->what;
}

TEST(Watchdog, StalledRunsBlameTheLeastAdvancedRank) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Step, 7}, 20), alive(1, {Phase::Build, -1}, 20),
                                  alive(2, {Phase::Step, 7}, 20)};
  for (auto& r : ranks) r.since_cpu_s = 20;
  const auto v = check_watchdog(ranks, limits(5));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 1);
  EXPECT_NE(v->what.find("model build"), std::string::npos) << v->what;
  EXPECT_NE(v->what.find("ranks 0 (step 7), 2 (step 7)"), std::string::npos) << v->what;
  // nobody past the deadline yet: nothing
  for (auto& r : ranks) r.since_cpu_s = r.since_phase_s = 6.9;
  EXPECT_FALSE(check_watchdog(ranks, limits(5)));
}

TEST(Watchdog, AmongEqualsTheRankStillComputingIsTheOneTheOthersWaitFor) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Step, 2}, 30), alive(1, {Phase::Step, 2}, 30),
                                  alive(2, {Phase::Step, 2}, 30)};
  for (auto& r : ranks) r.since_cpu_s = 30;
  ranks[1].since_cpu_s = 0.1;  // an endless loop in rank 1; the others block on it
  const auto v = check_watchdog(ranks, limits(5));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 1);
}

TEST(Watchdog, RendezvousTiesBlameTheStoreHost) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Rendezvous, -1}, 9), alive(1, {Phase::Rendezvous, -1}, 9)};
  for (auto& r : ranks) r.since_cpu_s = 9;
  ranks[1].since_output_s = 100;  // silent rank 1 is not the one
  const auto v = check_watchdog(ranks, limits(5));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 0);
  EXPECT_NE(v->what.find("rendezvous"), std::string::npos) << v->what;
}

TEST(Watchdog, AWorkerThatNeverBeatsGetsTheStartSlack) {
  RankLiveness r;
  r.rank = 3;
  r.beating = false;
  r.beat = {Phase::Launched, -1};
  r.since_phase_s = r.since_beat_s = r.since_cpu_s = 14.0;
  std::vector<RankLiveness> ranks{alive(0, {Phase::Rendezvous, -1}, 1), r};
  EXPECT_FALSE(check_watchdog(ranks, limits(5)));  // 5 + 10 s start slack
  ranks[1].since_phase_s = ranks[1].since_beat_s = ranks[1].since_cpu_s = 15.5;
  const auto v = check_watchdog(ranks, limits(5));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rank, 3);
  EXPECT_NE(v->what.find("start-up"), std::string::npos) << v->what;
  // exited ranks are never blamed by the watchdog
  ranks[1].running = false;
  EXPECT_FALSE(check_watchdog(ranks, limits(5)));
}

TEST(Watchdog, LeastProgressingPrefersAStoppedRank) {
  std::vector<RankLiveness> ranks{alive(0, {Phase::Step, 1}), alive(1, {Phase::Step, 2}), alive(2, {Phase::Step, 2})};
  EXPECT_EQ(least_progressing_rank(ranks), 0);
  ranks[2].stopped_s = 0.5;
  EXPECT_EQ(least_progressing_rank(ranks), 2);
  for (auto& r : ranks) r.running = false;
  EXPECT_EQ(least_progressing_rank(ranks), -1);
}

}  // namespace

using namespace ulysses::launch_test;

// watchdog end to end
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
