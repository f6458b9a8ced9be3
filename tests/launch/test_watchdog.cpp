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
