// One rule book for admission: who may use a run folder (--out), what --force may move aside,
// which train.save_to a run may claim and which train.resume_from it may start from, for
// ulysses-run and ulysses-worker alike. The rules are a function of what the user asked
// (AdmissionRequest) and what the disk holds (AdmissionFacts); gather_admission_facts reads the
// disk, admit decides, and the program's main acts (claims, moves aside) and prints. Every
// refusal carries the message the program prints and its exit code (2: bad input).
// Path comparisons ("inside --out") resolve symlinks of the parts that exist.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "folder_claim.hpp"
#include "run_config.hpp"
#include "run_launcher.hpp"

namespace ulysses::launch {

enum class Program { Run, Worker };  // ulysses-run, ulysses-worker

struct Refusal {
  std::string message;  // for the user, without the program's prefix
  int exit_code = 2;
};

// What the user asked: the command line and the run config's paths.
struct AdmissionRequest {
  Program program = Program::Run;
  std::string out_dir;  // --out (ulysses-run: the default runs/<timestamp> filled in)
  bool force = false;   // ulysses-run --force; the worker has none
  std::string save_to, resume_from;
  // The run's inputs (what, path) that --force must not move aside with an old --out.
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string cwd;  // the current folder, which --force must not move aside either
  // Worker: its launcher (ulysses-run) checked and claimed train.save_to (ULYSSES_SAVE_OWNER).
  bool save_to_claimed_by_launcher = false;
  // Worker: only rank 0 checks and claims train.save_to (every rank would race on its probe).
  bool claims_save_to = true;
};

// What the disk holds, as far as the rules need it.
struct AdmissionFacts {
  RunDirInfo out;                            // ulysses-run: inspect_run_dir(--out)
  std::string out_unusable;                  // worker: why --out cannot be made a writable folder, "" when it can
  std::string live_within_out;               // a live run in --out or below (live_run_within), "" when none
  std::optional<OwnerRecord> save_to_owner;  // another live process's claim on train.save_to
  std::vector<std::string> save_to_issues;   // ckpt::save_to_issues(cfg, force)
  std::string save_to_unwritable;            // probe_writable_dir(save_to), "" when writable
  std::vector<std::string> resume_issues;    // ckpt::resume_issues(cfg)
};

enum class OutAction { Use, MoveAside };  // write --out as it is, or move the old folder aside first

struct Admission {
  std::optional<Refusal> refusal;  // set when refused; then nothing else counts
  OutAction out_action = OutAction::Use;
  bool claim_save_to = false;  // the program takes train.save_to's claim before anything starts
  bool admitted() const { return !refusal; }
};

// The request of each program.
AdmissionRequest run_request(const RunConfig& cfg, const std::string& out_dir, bool force,
                             const std::string& config_path);
AdmissionRequest worker_request(const RunConfig& cfg, const std::string& out_dir, int rank,
                                bool save_to_claimed_by_launcher);

// Reads the disk for the request. For the worker it makes --out (and its parents) as today.
// probe_writable_dir makes train.save_to when it is to be claimed.
AdmissionFacts gather_admission_facts(const AdmissionRequest& req, const RunConfig& cfg);

// Every rule, in the order the user hears them: the names, train.resume_from, --out, train.save_to,
// then what --force may move aside.
Admission admit(const AdmissionRequest& req, const AdmissionFacts& facts);

// --out's rules alone (its name, what it holds, --force): asked again once the folder is claimed,
// with facts read after the claim (no other launcher can change it then).
Admission admit_out(const AdmissionRequest& req, const AdmissionFacts& facts);

// A folder claim (claim_folder) that failed, said as a refusal: `what` is "--out" or "train.save_to".
Refusal claim_refusal(const std::string& what, const std::string& dir, const ClaimAttempt& attempt);

// `p` is `dir` itself or lies inside it (both resolved: absolute, symlinks, "." and "..").
bool path_within(const std::string& p, const std::string& dir);

}  // namespace ulysses::launch
