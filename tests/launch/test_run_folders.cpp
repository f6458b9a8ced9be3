// engine/launch/run_folders end to end through ulysses-run: --out never written into the user's
// files, --force moving aside only what it may, train.save_to checked and claimed, launchers racing
// on one folder (the rules alone: test_admission.cpp).
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
#include "run_launcher.hpp"
#include "run_record.hpp"
#include "launch_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::launch;
using namespace ulysses::launch_test;
using Clock = std::chrono::steady_clock;

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
