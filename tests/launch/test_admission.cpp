// engine/launch/admission: every rule and refusal of --out, --force, train.save_to and
// train.resume_from, for ulysses-run and ulysses-worker, decided from a request and the facts
// (written by hand here, or gathered from temporary folders): no program runs, except in the
// last test, which starts ulysses-worker directly to see it refuse what the rules refuse.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "admission.hpp"
#include "folder_claim.hpp"
#include "run_config.hpp"

namespace fs = std::filesystem;
using namespace ulysses::launch;

namespace {

// A fresh folder per test, removed at the end.
class AdmissionDir {
 public:
  AdmissionDir() {
    std::string tmpl = (fs::temp_directory_path() / "ulysses_admission_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~AdmissionDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

AdmissionRequest run_req(const std::string& out, bool force = false) {
  AdmissionRequest r;
  r.program = Program::Run;
  r.out_dir = out;
  r.force = force;
  return r;
}

AdmissionRequest worker_req(const std::string& out, int rank = 0) {
  AdmissionRequest r;
  r.program = Program::Worker;
  r.out_dir = out;
  r.claims_save_to = rank == 0;
  return r;
}

AdmissionFacts out_is(RunDirState s, const std::string& detail = "") {
  AdmissionFacts f;
  f.out.state = s;
  f.out.detail = detail;
  return f;
}

std::string refusal_text(const Admission& a) { return a.refusal ? a.refusal->message : std::string("(admitted)"); }

bool says(const Admission& a, const std::string& text) { return refusal_text(a).find(text) != std::string::npos; }

}  // namespace

TEST(Admission, AnAbsentOrEmptyOutIsUsedAsItIs) {
  for (const RunDirState s : {RunDirState::Absent, RunDirState::Empty})
    for (const bool force : {false, true}) {
      const Admission a = admit(run_req("/r/out", force), out_is(s));
      EXPECT_TRUE(a.admitted()) << refusal_text(a);
      EXPECT_EQ(a.out_action, OutAction::Use);
      EXPECT_FALSE(a.claim_save_to) << "no train.save_to, nothing to claim";
    }
}

TEST(Admission, AnOutHoldingAnOldRunOrOtherFilesNeedsForceAndIsThenMovedAside) {
  for (const RunDirState s : {RunDirState::OldRun, RunDirState::Foreign}) {
    const Admission no = admit(run_req("/r/out"), out_is(s, "/r/out/run.json exists"));
    ASSERT_FALSE(no.admitted());
    EXPECT_EQ(no.refusal->exit_code, 2);
    EXPECT_EQ(no.refusal->message,
              "/r/out/run.json exists; pick another --out or delete it, or pass --force to move it aside");
    const Admission yes = admit(run_req("/r/out", true), out_is(s, "/r/out/run.json exists"));
    EXPECT_TRUE(yes.admitted()) << refusal_text(yes);
    EXPECT_EQ(yes.out_action, OutAction::MoveAside);
  }
}

TEST(Admission, AFileOrALiveRunAsOutIsRefusedEvenWithForce) {
  for (const bool force : {false, true}) {
    const Admission file = admit(run_req("/r/out", force), out_is(RunDirState::NotADirectory, "/r/out is a file"));
    EXPECT_EQ(refusal_text(file), "/r/out is a file; pick another --out");
    const Admission live = admit(run_req("/r/out", force), out_is(RunDirState::LiveRun, "/r/out holds a live run"));
    EXPECT_EQ(refusal_text(live), "/r/out holds a live run; pick another --out (--force never touches a live run)");
    EXPECT_EQ(live.refusal->exit_code, 2);
  }
}

TEST(Admission, ForceNeverMovesALiveRunBelowOut) {
  AdmissionFacts f = out_is(RunDirState::Foreign, "x");
  f.live_within_out = "/r/out/inner holds a run that is still going (ulysses-run pid 9)";
  const Admission a = admit(run_req("/r/out", true), f);
  EXPECT_EQ(refusal_text(a), "--force would move /r/out aside, and " + f.live_within_out +
                                 "; pick another --out (--force never moves a live run)");
}

TEST(Admission, ForceNeverMovesTheCurrentFolderOrTheRunsInputs) {
  AdmissionDir d;
  const std::string out = (d / "out").string();
  fs::create_directories(d / "out" / "sub");
  AdmissionRequest r = run_req(out, true);
  r.cwd = out;
  EXPECT_TRUE(says(admit(r, out_is(RunDirState::OldRun)), "the current folder is that folder; pick another --out"));
  r.cwd = (d / "out" / "sub").string();
  EXPECT_TRUE(says(admit(r, out_is(RunDirState::OldRun)), "the current folder is inside it; pick another --out"));
  r.cwd = (d / "elsewhere").string();
  EXPECT_TRUE(admit(r, out_is(RunDirState::OldRun)).admitted());
  // Through "..": still inside.
  r.inputs = {{"the config", out + "/sub/../cfg.json"}};
  EXPECT_TRUE(says(admit(r, out_is(RunDirState::OldRun)), "and the config (" + out +
                                                              "/sub/../cfg.json) is inside it, so the ranks would "
                                                              "not find it; pick another --out, or move the file out "
                                                              "first"));
  // A sibling whose name starts like --out is not inside it.
  r.inputs = {{"data.path", out + "-data/tokens.bin"}, {"train.init_from", ""}};
  EXPECT_TRUE(admit(r, out_is(RunDirState::OldRun)).admitted());
}

TEST(Admission, ASaveFolderAnotherRunHoldsIsSaidFirstForceOrNot) {
  AdmissionRequest r = run_req("/r/out", true);
  r.save_to = "/r/model";
  AdmissionFacts f = out_is(RunDirState::Absent);
  f.save_to_owner = OwnerRecord{"/r/runs/a", 7, "ulysses-run"};
  f.save_to_issues = {"train.save_to: a later rule"};
  const Admission a = admit(r, f);
  EXPECT_EQ(refusal_text(a),
            "train.save_to: /r/model belongs to run /r/runs/a (ulysses-run pid 7), which is still going; pick another "
            "train.save_to (a save folder holds one run's checkpoints)");
  EXPECT_FALSE(a.claim_save_to);
}

TEST(Admission, TheSaveFoldersOwnRulesThenWritability) {
  AdmissionRequest r = run_req("/r/out");
  r.save_to = "/r/model";
  AdmissionFacts f = out_is(RunDirState::Absent);
  f.save_to_issues = {"train.save_to: /r/model is a training checkpoint; ...", "second"};
  f.save_to_unwritable = "cannot write /r/model";
  EXPECT_EQ(refusal_text(admit(r, f)), "train.save_to: /r/model is a training checkpoint; ...");
  f.save_to_issues.clear();
  EXPECT_EQ(refusal_text(admit(r, f)),
            "train.save_to: cannot write /r/model (checked before launch, so the trained model is not lost at the "
            "end)");
  f.save_to_unwritable.clear();
  const Admission ok = admit(r, f);
  EXPECT_TRUE(ok.admitted()) << refusal_text(ok);
  EXPECT_TRUE(ok.claim_save_to);
}

TEST(Admission, SaveToIsNeverTheRunFolderNorInsideIt) {
  AdmissionDir d;
  const std::string out = (d / "run").string();
  for (const Program p : {Program::Run, Program::Worker}) {
    AdmissionRequest r = p == Program::Run ? run_req(out, true) : worker_req(out);
    r.save_to = out;
    const Admission same = admit(r, out_is(RunDirState::Absent));
    EXPECT_TRUE(says(same, "train.save_to: " + out + " is the run directory --out " + out)) << refusal_text(same);
    r.save_to = out + "/model";
    const Admission inside = admit(r, out_is(RunDirState::Absent));
    EXPECT_TRUE(says(inside, " lies inside the run directory --out " + out)) << refusal_text(inside);
    EXPECT_TRUE(says(inside, "; pick a folder outside it"));
    EXPECT_TRUE(says(inside, p == Program::Run ? "which ulysses-run writes fresh" : "the ranks write their trace"));
    r.save_to = out + ".model";  // a sibling
    EXPECT_TRUE(admit(r, out_is(RunDirState::Absent)).admitted());
  }
}

TEST(Admission, AWorkerStartedByUlyssesRunLeavesTheSaveFolderToItsLauncher) {
  AdmissionRequest r = worker_req("/r/out");
  r.save_to = "/r/model";
  r.save_to_claimed_by_launcher = true;
  AdmissionFacts f;
  f.save_to_owner = OwnerRecord{"/r/out", 1, "ulysses-run"};  // its own launcher
  const Admission a = admit(r, f);
  EXPECT_TRUE(a.admitted()) << refusal_text(a);
  EXPECT_FALSE(a.claim_save_to);
}

TEST(Admission, AWorkerStartedByHandFollowsTheSameSaveRulesOnRankZero) {
  AdmissionRequest r = worker_req("/r/out", 0);
  r.save_to = "/r/model";
  AdmissionFacts f;
  f.save_to_owner = OwnerRecord{"/r/runs/a", 7, "ulysses-run"};
  EXPECT_TRUE(says(admit(r, f),
                   "train.save_to: /r/model belongs to run /r/runs/a (ulysses-run pid 7), which is still "
                   "going"));
  f.save_to_owner.reset();
  f.save_to_issues = {"train.save_to: /r/model already holds a model (model.safetensors); saving would overwrite it"};
  EXPECT_EQ(refusal_text(admit(r, f)), f.save_to_issues.front());
  // The worker has no --force: a rule that offers it says whose it is.
  f.save_to_issues = {"train.save_to: /r/model already holds a model; ... or pass --force)"};
  EXPECT_EQ(refusal_text(admit(r, f)),
            f.save_to_issues.front() + " (--force is ulysses-run's: a worker started directly has none)");
  AdmissionRequest by_run = run_req("/r/out");
  by_run.save_to = "/r/model";
  EXPECT_EQ(refusal_text(admit(by_run, f)), f.save_to_issues.front()) << "ulysses-run has --force: said as it is";
  f.save_to_issues.clear();
  const Admission ok = admit(r, f);
  EXPECT_TRUE(ok.claim_save_to) << refusal_text(ok);
  // Other ranks neither check nor claim.
  const Admission rank1 = admit(worker_req("/r/out", 1), f);
  EXPECT_TRUE(rank1.admitted());
  EXPECT_FALSE(rank1.claim_save_to);
}

TEST(Admission, TheWorkersOutMustBeAWritableFolderWhateverItHolds) {
  AdmissionFacts f = out_is(RunDirState::Foreign, "not ours");  // ulysses-run's judgement, not the worker's
  EXPECT_TRUE(admit(worker_req("/r/out"), f).admitted());
  f.out_unusable = "--out /dev/null/run cannot be made a run folder: Not a directory";
  EXPECT_EQ(refusal_text(admit(worker_req("/dev/null/run"), f)), f.out_unusable);
}

TEST(Admission, AResumeCheckpointThatIsMissingOrOfAnotherLayoutIsRefusedByBothPrograms) {
  for (const Program p : {Program::Run, Program::Worker}) {
    AdmissionRequest r = p == Program::Run ? run_req("/r/out") : worker_req("/r/out");
    r.resume_from = "/r/ck";
    AdmissionFacts f;
    f.resume_issues = {"train.resume_from: /r/ck not found"};
    EXPECT_EQ(refusal_text(admit(r, f)), "train.resume_from: /r/ck not found");
    f.resume_issues = {
        "train.resume_from: parallel.sp_size = 2, the checkpoint has 4 (/r/ck/step-00000002); a "
        "checkpoint resumes only with the ranks it was saved by"};
    const Admission a = admit(r, f);
    EXPECT_EQ(refusal_text(a), f.resume_issues.front());
    EXPECT_EQ(a.refusal->exit_code, 2);
  }
}

TEST(Admission, NamesThatAreNotUtf8OrHoldControlCharactersAreRefusedQuoted) {
  const std::pair<std::string, std::string> bad[] = {
      {"runs/\xff\xfe", "\"runs/\xEF\xBF\xBD\xEF\xBF\xBD\""},
      {"runs/a\nb", "\"runs/a\\nb\""},
      {"runs/\x1b[31mred", "\"runs/\\u001b[31mred\""},
  };
  for (const Program p : {Program::Run, Program::Worker})
    for (const auto& [name, quoted] : bad) {
      AdmissionRequest r = p == Program::Run ? run_req(name) : worker_req(name);
      EXPECT_EQ(refusal_text(admit(r, {})),
                "--out " + quoted + " holds control characters or bytes that are not UTF-8; pick a plain folder name");
      r = p == Program::Run ? run_req("/r/out") : worker_req("/r/out");
      r.save_to = name;
      EXPECT_TRUE(says(admit(r, {}), "train.save_to " + quoted + " holds control characters"))
          << refusal_text(admit(r, {}));
      r.save_to.clear();
      r.resume_from = name;
      EXPECT_TRUE(says(admit(r, {}), "train.resume_from " + quoted + " holds control characters"));
    }
  // Plain non-ASCII UTF-8 is a fine name.
  EXPECT_TRUE(admit(run_req("runs/caf\xC3\xA9"), {}).admitted());
}

TEST(Admission, AFailedClaimIsSaidInTheProgramsWords) {
  ClaimAttempt held;
  held.holder = OwnerRecord{"/r/runs/a", 42, "ulysses-run"};
  EXPECT_EQ(claim_refusal("--out", "/r/out", held).message,
            "/r/out is being set up or run by another ulysses-run (pid 42); pick another --out (--force never "
            "touches a live run)");
  EXPECT_EQ(claim_refusal("train.save_to", "/r/model", held).message,
            "train.save_to: /r/model belongs to run /r/runs/a (ulysses-run pid 42), which is still going; pick "
            "another train.save_to (a save folder holds one run's checkpoints)");
  ClaimAttempt broken;
  broken.error = "cannot make /r/model: Permission denied";
  const Refusal r = claim_refusal("train.save_to", "/r/model", broken);
  EXPECT_EQ(r.message, "train.save_to: cannot make /r/model: Permission denied");
  EXPECT_EQ(r.exit_code, 2);
}

// The facts as the programs gather them, from real folders.
TEST(Admission, GatheredFactsFromFoldersOnDisk) {
  AdmissionDir d;
  ulysses::RunConfig cfg;
  // An old run as --out: refused, then moved aside with --force.
  fs::create_directories(d / "old");
  std::ofstream(d / "old" / "notes.txt") << "the user's";
  AdmissionRequest r = run_request(cfg, (d / "old").string(), false, (d / "cfg.json").string());
  AdmissionFacts f = gather_admission_facts(r, cfg);
  EXPECT_EQ(f.out.state, RunDirState::Foreign);
  EXPECT_TRUE(says(admit(r, f), "pass --force to move it aside"));
  r.force = true;
  EXPECT_EQ(admit(r, gather_admission_facts(r, cfg)).out_action, OutAction::MoveAside);
  // A save folder that holds training checkpoints of another run: refused without --force.
  cfg.train.save_to = (d / "model").string();
  fs::create_directories(d / "model" / "step-00000002");
  r = run_request(cfg, (d / "fresh").string(), false, (d / "cfg.json").string());
  EXPECT_TRUE(says(admit(r, gather_admission_facts(r, cfg)), "already holds training checkpoints"));
  EXPECT_FALSE(fs::exists(d / "fresh")) << "gathering makes no run folder";
  // Free: admitted, the save folder to be claimed, made by the writability probe.
  cfg.train.save_to = (d / "new-model").string();
  r = run_request(cfg, (d / "fresh").string(), false, (d / "cfg.json").string());
  const Admission ok = admit(r, gather_admission_facts(r, cfg));
  EXPECT_TRUE(ok.claim_save_to) << refusal_text(ok);
  EXPECT_TRUE(fs::is_directory(d / "new-model"));
  // A resume folder that is not there.
  cfg.train.resume_from = (d / "nowhere").string();
  r = worker_request(cfg, (d / "wout").string(), 0, false);
  EXPECT_EQ(refusal_text(admit(r, gather_admission_facts(r, cfg))),
            "train.resume_from: " + cfg.train.resume_from + " not found");
  // A worker's --out under a file cannot be made.
  cfg.train.resume_from.clear();
  std::ofstream(d / "file") << "x";
  r = worker_request(cfg, (d / "file" / "run").string(), 0, false);
  EXPECT_TRUE(says(admit(r, gather_admission_facts(r, cfg)), "cannot be made a run folder"));
}

#ifdef ULYSSES_WORKER_EXE
// The same rules in ulysses-worker started without ulysses-run (torchrun, Slurm): rank 0 refuses
// a save folder holding another model, or one inside --out, before rendezvous (exit 2), where
// it used to take the folder and overwrite the model.
TEST(Admission, AWorkerStartedDirectlyRefusesWhatUlyssesRunRefuses) {
  AdmissionDir d;
  const fs::path cfg = d / "cfg.json";
  std::ofstream(cfg) << R"({"model": {"num_attention_heads": 4, "num_key_value_heads": 2}, "parallel": {"sp_size": 1},
                           "train": {"steps": 1, "seq_length": 64}, "data": {"kind": "synthetic"}})";
  fs::create_directories(d / "model");
  std::ofstream(d / "model" / "model.safetensors") << "someone's weights";
  struct Case {
    std::string save_to, needle;
  };
  for (const Case& c : {Case{(d / "model").string(), "already holds a model (model.safetensors)"},
                        Case{(d / "run" / "model").string(), "lies inside the run directory --out"}}) {
    const fs::path log = d / "worker.log";
    const std::string cmd =
        "env -u ULYSSES_SAVE_OWNER -u ULYSSES_RUN_ID RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "
        "LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 '" ULYSSES_WORKER_EXE "' --config '" +
        cfg.string() + "' --out '" + (d / "run").string() + "' --set 'train.save_to=" + c.save_to + "' > '" +
        log.string() + "' 2>&1";
    const int st = std::system(cmd.c_str());
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_TRUE(WIFEXITED(st)) << out;
    EXPECT_EQ(WEXITSTATUS(st), 2) << out;
    EXPECT_NE(out.find(c.needle), std::string::npos) << out;
  }
  std::ifstream kept(d / "model" / "model.safetensors");
  const std::string weights((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(weights, "someone's weights");
}
#endif
