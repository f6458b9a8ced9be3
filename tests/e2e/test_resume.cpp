// Resume, end to end through ulysses-run and real ulysses-worker processes (sp 2, Gloo,
// CPU): a run resumed from a train.save_every checkpoint reports losses bit-identical
// (EXPECT_EQ on doubles) to the uninterrupted run, also after the launcher was SIGKILLed
// between checkpoints; half-written checkpoints are skipped; bad train.resume_from
// inputs exit 2 with a message naming the problem. The reference is the uninterrupted run
// of the same config in a separate process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint_layout.hpp"
#include "common/e2e_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

extern char** environ;

namespace {

const std::string kRun = ULYSSES_RUN_BIN;
const std::string kWorker = ULYSSES_WORKER_BIN;

using ulysses::test::Proc;
using ulysses::test::sh;

std::string tmp(const std::string& name) { return ulysses::test::scratch_path("resume", name); }

// Tiny GQA model at sp 2 (tests/common/e2e_util.hpp); no trace (speed).
std::string config_file(int64_t steps) {
  json c = ulysses::test::tiny_config(2, steps, ULYSSES_SOURCE_DIR);
  c["train"]["warmup_steps"] = 2;
  c["profile"] = {{"enabled", false}};
  return ulysses::test::write_json(tmp("config-" + std::to_string(steps) + ".json"), c);
}

// step -> loss from --json METRIC lines.
std::map<int64_t, double> losses(const std::string& out) { return ulysses::test::losses_by_step(out); }

Proc run(const std::string& cfg, const std::string& out, const std::string& sets) {
  return sh(kRun + " " + cfg + " --json --worker " + kWorker + " --out " + out + " " + sets);
}

// The losses of [from, end) of `resumed` equal the reference's, bit for bit.
void expect_same_losses(const std::map<int64_t, double>& ref, const std::map<int64_t, double>& resumed, int64_t from,
                        int64_t end) {
  ASSERT_EQ(resumed.size(), static_cast<size_t>(end - from));
  ASSERT_EQ(resumed.begin()->first, from) << "the resumed run did not start at the checkpoint's step";
  for (const auto& [s, l] : resumed) {
    ASSERT_TRUE(ref.count(s)) << "step " << s;
    EXPECT_EQ(l, ref.at(s)) << "step " << s << " (resumed from step " << from << ")";
  }
}

// The folder's entries, without the run's claim on it (.ulysses-lock, .ulysses-owner.json:
// engine/launch/folder_claim.hpp): the files stay, the lock is dropped with its owner.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".ulysses-", 0) != 0) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// The manifest rewritten to agree with the folder's files, as a hand edit that also fixes the
// manifest would: the size and XXH64 of what is there now, the run id, step and layout kept.
void reseal(const std::string& ck) {
  const json man = json::parse(std::ifstream(ck + "/complete"));
  ulysses::ckpt::Layout l;
  const json& j = man.at("layout");
  l.sp_size = j.at("sp_size").get<int64_t>(), l.ring_size = j.at("ring_size").get<int64_t>();
  l.dp_size = j.at("dp_size").get<int64_t>(), l.world_size = j.at("world_size").get<int64_t>();
  l.zero_stage = j.at("zero_stage").get<int64_t>();
  const json fresh =
      ulysses::ckpt::make_manifest(ck, man.at("step").get<int64_t>(), man.at("run_id").get<std::string>(), l);
  std::ofstream(ck + "/complete") << fresh.dump();
}

void swap_files(const std::string& a, const std::string& b) {
  fs::rename(a, a + ".x");
  fs::rename(b, a);
  fs::rename(a + ".x", b);
}

}  // namespace

// (a) a run of 10 steps at sp 2 with checkpoints every 3 steps (keeping 2); resuming from
// step 6 (one checkpoint folder) and from the save_to folder (its latest, step 9) gives the
// same losses as the uninterrupted run, bit for bit; each checkpoint is a loadable HF model.
TEST(Resume, Sp2LossesBitIdenticalAfterResume) {
  const auto cfg = config_file(10);
  const auto save = tmp("a-save");
  auto full = run(cfg, tmp("a-full"), "--set train.save_to=" + save + " --set train.save_every=3");
  ASSERT_EQ(full.code, 0) << full.out;
  const auto ref = losses(full.out);
  ASSERT_EQ(ref.size(), 10u);
  // save_keep = 2 (default): step 3 was pruned; the final HF model sits beside the checkpoints
  EXPECT_EQ(entries(save),
            (std::vector<std::string>{"config.json", "model.safetensors", "step-00000006", "step-00000009"}));
  EXPECT_EQ(entries(save + "/step-00000006"),
            (std::vector<std::string>{"complete", "config.json", "model.safetensors", "optimizer.safetensors",
                                      "rng-rank0.bin", "rng-rank1.bin", "run_config.json", "state.json"}));
  // an uninterrupted run without checkpoints: saving changes nothing
  auto plain = run(cfg, tmp("a-plain"), "");
  ASSERT_EQ(plain.code, 0);
  EXPECT_EQ(losses(plain.out), ref);

  auto r6 = run(cfg, tmp("a-r6"), "--set train.resume_from=" + save + "/step-00000006");
  ASSERT_EQ(r6.code, 0) << r6.out;
  expect_same_losses(ref, losses(r6.out), 6, 10);
  auto r9 = run(cfg, tmp("a-r9"), "--set train.resume_from=" + save);
  ASSERT_EQ(r9.code, 0) << r9.out;
  expect_same_losses(ref, losses(r9.out), 9, 10);

  // a checkpoint folder is a Hugging Face model: init_from accepts it
  auto hf = run(cfg, tmp("a-hf"),
                "--set train.init_from=" + save + "/step-00000009 --set train.steps=1 --set parallel.sp_size=1");
  EXPECT_EQ(hf.code, 0) << hf.out;
}

namespace {

// (b) SIGKILL of the launcher between checkpoints (after at least one completed): its
// workers die with it; resuming from the save_to folder finishes the run with the losses of
// the uninterrupted run. `sets`: more --set options (both runs); `tag`: scratch names.
void sigkill_then_resume(const std::string& tag, int64_t steps, const std::vector<std::string>& sets) {
  const auto cfg = config_file(steps);
  std::string set_args;
  for (const auto& s : sets) set_args += " --set " + s;
  auto plain = run(cfg, tmp(tag + "-plain"), set_args);
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto ref = losses(plain.out);
  ASSERT_EQ(ref.size(), static_cast<size_t>(steps));

  const auto save = tmp(tag + "-save"), out = tmp(tag + "-killed");
  std::vector<std::string> args{
      kRun, cfg, "--worker", kWorker, "--out", out, "--set", "train.save_to=" + save, "--set", "train.save_every=4"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t launcher = 0;
  ASSERT_EQ(posix_spawn(&launcher, kRun.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  // kill as soon as the first checkpoint is complete: the run is then between checkpoints
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool have = false;
  while (!have && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    have = fs::exists(save + "/step-00000004/complete");
  }
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  ASSERT_TRUE(have) << "no checkpoint was completed";
  // its workers die with it (PR_SET_PDEATHSIG); "[u]" keeps pgrep's own shell from matching
  const std::string workers = "pgrep -f '[u]lysses-worker --config " + out + "/config.json'";
  for (int i = 0; i < 200 && sh(workers).code == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(sh(workers).code, 0) << "workers outlived their launcher";
  std::ifstream m(out + "/metrics.jsonl");
  size_t done = 0;
  for (std::string l; std::getline(m, l);) ++done;
  ASSERT_LT(done, static_cast<size_t>(steps)) << "the run finished before the kill; the test proves nothing";

  auto resumed = run(cfg, tmp(tag + "-resumed"), set_args + " --set train.resume_from=" + save);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  const auto got = losses(resumed.out);
  ASSERT_FALSE(got.empty());
  const int64_t from = got.begin()->first;
  EXPECT_GE(from, 4);
  EXPECT_EQ(from % 4, 0);
  expect_same_losses(ref, got, from, steps);
}

}  // namespace

TEST(Resume, AfterLauncherSigkillLossesBitIdentical) { sigkill_then_resume("b", 40, {}); }

// (b') the same with ZeRO stage 2 over sp 2 x dp 2 (docs/ZERO.md): each rank's AdamW shard comes
// back from its optimizer-rank{r}.safetensors.
TEST(Resume, ZeroStage2Sp2Dp2AfterLauncherSigkillLossesBitIdentical) {
  sigkill_then_resume("z", 16, {"parallel.dp_size=2", "train.zero_stage=2"});
}

// (b'') the same with ZeRO stage 3 over sp 2 x dp 2: every rank keeps only its shard of each
// layer's weights; the save gathers them for the Hugging Face model and each rank's shard of
// the weights comes back from it, its AdamW shard from its own file.
TEST(Resume, ZeroStage3Sp2Dp2AfterLauncherSigkillLossesBitIdentical) {
  sigkill_then_resume("z3", 16, {"parallel.dp_size=2", "train.zero_stage=3"});
}

// (c) resuming from the folder skips a half-written checkpoint (no `complete` marker), a
// checkpoint whose file does not match its manifest, and a temp folder of a save in flight.
TEST(Resume, HalfWrittenCheckpointIsSkipped) {
  const auto cfg = config_file(10);
  const auto save = tmp("c-save");
  auto full = run(cfg, tmp("c-full"), "--set train.save_to=" + save + " --set train.save_every=3");
  ASSERT_EQ(full.code, 0) << full.out;
  const auto ref = losses(full.out);
  const std::string good = save + "/step-00000009";
  fs::copy(good, save + "/step-00000012", fs::copy_options::recursive);
  fs::remove(save + "/step-00000012/complete");  // half-written
  fs::copy(good, save + "/step-00000015", fs::copy_options::recursive);
  fs::resize_file(save + "/step-00000015/optimizer.safetensors", 100);  // torn file, marker present
  fs::copy(good, save + "/.tmp-step-00000018", fs::copy_options::recursive);
  auto r = run(cfg, tmp("c-r"), "--set train.resume_from=" + save);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = losses(r.out);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.begin()->first, 9) << "resumed from a checkpoint that is not complete";
  expect_same_losses(ref, got, 9, 10);
  // pointing at the half-written one directly is refused
  auto bad = sh(kRun + " " + cfg + " --worker " + kWorker + " --out " + tmp("c-bad") +
                    " --set train.resume_from=" + save + "/step-00000012",
                "", true);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("not a complete checkpoint"), std::string::npos) << bad.out;
}

// (d) bad train.resume_from inputs (and the other keys) exit 2 with a message that names it.
TEST(Resume, BadInputsExit2WithAMessage) {
  const auto cfg = config_file(3);
  const auto save = tmp("d-save");
  auto full = run(cfg, tmp("d-full"), "--set train.save_to=" + save + " --set train.save_every=2");
  ASSERT_EQ(full.code, 0) << full.out;
  fs::create_directories(tmp("d-empty"));
  // A hand-edited state.json whose next_step is not the checkpoint's step (it would resume "at
  // step 9", train nothing and exit 0).
  fs::create_directories(tmp("d-edited"));
  fs::copy(save + "/step-00000002", tmp("d-edited") + "/step-00000002", fs::copy_options::recursive);
  {
    json st = json::parse(std::ifstream(tmp("d-edited") + "/step-00000002/state.json"));
    st["next_step"] = 9;
    const std::string text = st.dump();
    std::ofstream(tmp("d-edited") + "/step-00000002/state.json") << text;
    reseal(tmp("d-edited") + "/step-00000002");  // the manifest made to agree, so only next_step is wrong
  }
  // A model.safetensors without one tensor, its manifest byte count made right: refused before
  // any worker starts (not found only inside the workers, after launch).
  fs::create_directories(tmp("d-tensor"));
  fs::copy(save + "/step-00000002", tmp("d-tensor") + "/step-00000002", fs::copy_options::recursive);
  {
    const std::string st = tmp("d-tensor") + "/step-00000002/model.safetensors";
    ulysses::test::edit_safetensors_header(st, [](json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
    reseal(tmp("d-tensor") + "/step-00000002");
  }
  // optimizer.safetensors lost, lacking one tensor, or with one shape transposed, the manifest
  // made to agree each time: refused before any worker starts (found by the workers, 3-4 s
  // after launch, with a run folder made).
  for (const std::string d : {"d-opt-lost", "d-opt-tensor", "d-opt-shape"}) {
    fs::create_directories(tmp(d));
    fs::copy(save + "/step-00000002", tmp(d) + "/step-00000002", fs::copy_options::recursive);
    const std::string opt = tmp(d) + "/step-00000002/optimizer.safetensors";
    if (d == "d-opt-lost") {
      fs::remove(opt);
    } else {
      ulysses::test::edit_safetensors_header(opt, [&](json& h) {
        if (d == "d-opt-tensor") {
          h["exp_avg/renamed"] = h["exp_avg/model.norm.weight"];
          h.erase("exp_avg/model.norm.weight");
        } else {
          auto& shape = h["exp_avg_sq/model.layers.0.mlp.up_proj.weight"]["shape"];
          std::swap(shape[0], shape[1]);
        }
      });
    }
    reseal(tmp(d) + "/step-00000002");
  }
  // Rank 1's RNG state cut to half, and in another copy lost, the manifest made to agree each
  // time: refused before any worker starts (only the worker of rank 1 found it, after launch).
  for (const std::string d : {"d-rng-cut", "d-rng-lost"}) {
    fs::create_directories(tmp(d));
    fs::copy(save + "/step-00000002", tmp(d) + "/step-00000002", fs::copy_options::recursive);
    const std::string rng = tmp(d) + "/step-00000002/rng-rank1.bin";
    if (d == "d-rng-cut")
      fs::resize_file(rng, fs::file_size(rng) / 2);
    else
      fs::remove(rng);
    reseal(tmp(d) + "/step-00000002");
  }
  std::ofstream(tmp("d-file")) << "x";
  const std::string ck = "train.resume_from=" + save + "/step-00000002";
  struct Case {
    std::string sets, want;
  } cases[] = {
      {"--set train.resume_from=" + tmp("d-missing"), "not found"},
      {"--set train.resume_from=" + tmp("d-empty"), "holds no complete checkpoint"},
      {"--set train.resume_from=" + tmp("d-file"), "is not a folder"},
      {"--set " + ck + " --set model.hidden_size=64", "model.hidden_size = 64, the checkpoint has 32"},
      {"--set " + ck + " --set parallel.sp_size=1", "parallel.sp_size = 1, the checkpoint has 2"},
      {"--set " + ck + " --set train.lr=0.02", "train.lr"},
      {"--set " + ck + " --set train.steps=2", "leaves nothing to train"},
      {"--set train.resume_from=" + tmp("d-edited") + "/step-00000002",
       "says next_step 9 but the checkpoint is of step 2"},
      {"--set train.resume_from=" + tmp("d-tensor"), "lacks tensors: model.layers.1.mlp.up_proj.weight"},
      {"--set train.resume_from=" + tmp("d-opt-lost"), "optimizer.safetensors"},
      {"--set train.resume_from=" + tmp("d-opt-tensor"), "lacks exp_avg/model.norm.weight"},
      {"--set train.resume_from=" + tmp("d-opt-shape"),
       "exp_avg_sq/model.layers.0.mlp.up_proj.weight has dtype F32 and shape ["},
      {"--set train.resume_from=" + tmp("d-rng-cut"), ": not rank 1's RNG state"},
      {"--set train.resume_from=" + tmp("d-rng-lost"), "rng-rank1.bin: no such file (rank 1's RNG state)"},
      {"--set train.save_every=2", "needs train.save_to"},
      {"--set train.save_keep=0 --set train.save_to=" + tmp("d-k"), "train.save_keep must be positive"},
      {"--set train.save_every=-1", "train.save_every must be >= 0"},
  };
  for (const auto& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sh(kRun + " " + cfg + " --worker " + kWorker + " --out " + tmp("d-out") + " " + c.sets, "", true);
    EXPECT_EQ(r.code, 2) << c.sets << "\n" << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.sets << "\n" << r.out;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << c.sets;
    EXPECT_FALSE(fs::exists(tmp("d-out") + "/run.json")) << "a worker was started for " << c.sets;
  }
}

// (e) Checkpoints prove they belong together (docs/RELIABILITY.md, issue 54): at ZeRO stage 2,
// optimizer shards swapped between ranks, a shard of another run of the same size, a stage-3
// shard inside a stage-2 checkpoint (manifest rewritten), model.safetensors of another run and
// RNG states swapped all resumed, exit 0, and trained on with losses that were not the run's;
// a ring-2 checkpoint resumed at ring 1 was called damaged. Each is now refused before any
// worker starts (exit 2, no run.json), naming the file and the mismatch.
TEST(Resume, FilesOfAnotherRunStepOrRankAreRefused) {
  const auto cfg = config_file(3);
  const std::string z2 = " --set train.zero_stage=2", every = " --set train.save_every=2";
  const auto a = tmp("e-a"), b = tmp("e-b"), c = tmp("e-c"), ring = tmp("e-ring");
  auto ra = run(cfg, tmp("e-a-run"), z2 + every + " --set train.save_to=" + a);
  ASSERT_EQ(ra.code, 0) << ra.out;
  auto rb = run(cfg, tmp("e-b-run"), z2 + every + " --set train.seed=7 --set train.save_to=" + b);  // another run
  ASSERT_EQ(rb.code, 0) << rb.out;
  auto rc = run(cfg, tmp("e-c-run"), " --set train.zero_stage=3" + every + " --set train.save_to=" + c);
  ASSERT_EQ(rc.code, 0) << rc.out;
  auto rr = run(cfg, tmp("e-ring-run"),
                every + " --set parallel.sp_size=1 --set parallel.ring_size=2 --set train.save_to=" + ring);
  ASSERT_EQ(rr.code, 0) << rr.out;
  const std::string ck = "/step-00000002";
  auto copy = [&](const std::string& name) {
    const std::string d = tmp("e-" + name);
    fs::remove_all(d);
    fs::copy(a, d, fs::copy_options::recursive);
    return d + ck;
  };
  const std::string swapped = copy("swapped");
  swap_files(swapped + "/optimizer-rank0.safetensors", swapped + "/optimizer-rank1.safetensors");
  const std::string swapped_resealed = copy("swapped-resealed");
  swap_files(swapped_resealed + "/optimizer-rank0.safetensors", swapped_resealed + "/optimizer-rank1.safetensors");
  reseal(swapped_resealed);
  const std::string foreign = copy("foreign");
  fs::copy_file(b + ck + "/optimizer-rank1.safetensors", foreign + "/optimizer-rank1.safetensors",
                fs::copy_options::overwrite_existing);
  const std::string stage3 = copy("stage3");
  fs::copy_file(c + ck + "/optimizer-rank0.safetensors", stage3 + "/optimizer-rank0.safetensors",
                fs::copy_options::overwrite_existing);
  reseal(stage3);
  const std::string model = copy("model");
  fs::copy_file(b + ck + "/model.safetensors", model + "/model.safetensors", fs::copy_options::overwrite_existing);
  const std::string rng = copy("rng");
  swap_files(rng + "/rng-rank0.bin", rng + "/rng-rank1.bin");
  struct Case {
    std::string dir, sets, want;
  } cases[] = {
      {swapped, z2, "optimizer-rank0.safetensors is \"optimizer-rank1.safetensors\" of its checkpoint"},
      {swapped_resealed, z2, "a shard in another rank's place"},
      {foreign, z2, "optimizer-rank1.safetensors is of run "},
      {stage3, z2, "optimizer-rank0.safetensors is a shard of train.zero_stage 3 over 2 rank(s)"},
      {model, z2, "model.safetensors is of run "},
      {rng, z2, "rng-rank0.bin is not the file its checkpoint saved"},
      // a ring of 2 resumed at ring 1 (sp 1): was "exp_avg_sq is not ... a damaged checkpoint" of an intact one
      {ring + ck, " --set parallel.sp_size=1", "parallel.ring_size 2 in the checkpoint, 1 now"},
  };
  for (const auto& k : cases) {
    const auto out = tmp("e-out");
    fs::remove_all(out);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sh(kRun + " " + cfg + " --worker " + kWorker + " --out " + out + k.sets +
                    " --set train.steps=4 --set train.resume_from=" + k.dir,
                "", true);
    EXPECT_EQ(r.code, 2) << k.dir << "\n" << r.out;
    EXPECT_NE(r.out.find(k.want), std::string::npos) << k.dir << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out + "/run.json")) << "a worker was started for " << k.dir;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << k.dir;
  }
  // the intact checkpoint still resumes
  auto ok = run(cfg, tmp("e-ok"), z2 + " --set train.steps=4 --set train.resume_from=" + a + ck);
  EXPECT_EQ(ok.code, 0) << ok.out;
}
