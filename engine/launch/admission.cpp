// The admission rules of ulysses-run and ulysses-worker (admission.hpp).
#include "admission.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint_layout.hpp"
#include "json_checked.hpp"

namespace ulysses::launch {
namespace fs = std::filesystem;

namespace {

fs::path resolved(const std::string& p) {
  std::error_code ec;
  return fs::weakly_canonical(fs::absolute(p, ec), ec);
}

Admission refused(std::string message) {
  Admission a;
  a.refusal = Refusal{std::move(message), 2};
  return a;
}

// A path that is not valid UTF-8 or holds control characters: refused, since run records and
// owner records are JSON (UTF-8), and a newline or escape in a name splits or colours messages.
std::optional<Refusal> name_refusal(const std::string& what, const std::string& path) {
  if (path.empty() || name_for_message(path) == path) return std::nullopt;
  return Refusal{what + " " + name_for_message(path) +
                     " holds control characters or bytes that are not UTF-8; pick a plain folder name",
                 2};
}

// What --force must not move aside with an old --out: a live run, the current folder, the
// run's own inputs. Empty when the move is safe.
std::string force_refusal(const AdmissionRequest& req, const AdmissionFacts& facts) {
  const std::string& out = req.out_dir;
  if (!facts.live_within_out.empty())
    return "--force would move " + out + " aside, and " + facts.live_within_out +
           "; pick another --out (--force never moves a live run)";
  if (!req.cwd.empty() && path_within(req.cwd, out))
    return "--force would move " + out + " aside, and the current folder " +
           (resolved(req.cwd) == resolved(out) ? std::string("is that folder") : "is inside it") +
           "; pick another --out";
  for (const auto& [what, p] : req.inputs)
    if (!p.empty() && path_within(p, out))
      return "--force would move " + out + " aside, and " + what + " (" + p +
             ") is inside it, so the ranks would not find it; pick another --out, or move the file out first";
  return "";
}

// train.save_to's rules (the folder's name is checked with the others).
Admission admit_save_to(const AdmissionRequest& req, const AdmissionFacts& facts) {
  Admission a;
  const std::string& save_to = req.save_to;
  if (save_to.empty() || req.save_to_claimed_by_launcher || !req.claims_save_to) return a;
  // A folder another run holds is said first, --force or not.
  if (facts.save_to_owner)
    return refused("train.save_to: " + save_to + " belongs to " + facts.save_to_owner->describe() +
                   ", which is still going; pick another train.save_to (a save folder holds one run's checkpoints)");
  // The rules the studio's form shows too (ckpt::save_to_issues), then --out's own.
  if (!facts.save_to_issues.empty()) {
    const std::string& first = facts.save_to_issues.front();
    const bool names_force = first.find("--force") != std::string::npos;
    return refused(req.program == Program::Worker && names_force
                       ? first + " (--force is ulysses-run's: a worker started directly has none)"
                       : first);
  }
  if (path_within(save_to, req.out_dir)) {
    // Saving into --out would replace the run's own config.json with the model's; a folder
    // inside it would be made before the run directory, which would then be refused as "not a
    // run directory of ulysses-run".
    const bool same = resolved(save_to) == resolved(req.out_dir);
    const std::string where = std::string(same ? " is" : " lies inside") + " the run directory --out " + req.out_dir;
    return refused("train.save_to: " + save_to + where +
                   (req.program == Program::Run
                        ? ", which ulysses-run writes fresh (the model's config.json would replace the run's)"
                        : ", where the ranks write their trace and metrics (a save folder holds one run's "
                          "checkpoints and nothing else)") +
                   "; pick a folder outside it");
  }
  if (!facts.save_to_unwritable.empty())
    return refused("train.save_to: " + facts.save_to_unwritable +
                   " (checked before launch, so the trained model is not lost at the end)");
  a.claim_save_to = true;
  return a;
}

}  // namespace

bool path_within(const std::string& p, const std::string& dir) {
  if (p.empty() || dir.empty()) return false;
  const fs::path rel = resolved(p).lexically_relative(resolved(dir));
  return !rel.empty() && *rel.begin() != "..";
}

AdmissionRequest run_request(const RunConfig& cfg, const std::string& out_dir, bool force,
                             const std::string& config_path) {
  AdmissionRequest r;
  r.program = Program::Run;
  r.out_dir = out_dir;
  r.force = force;
  r.save_to = cfg.train.save_to;
  r.resume_from = cfg.train.resume_from;
  r.inputs = {{"the config", config_path},
              {"data.path", cfg.data.path},
              {"train.init_from", cfg.train.init_from},
              {"train.resume_from", cfg.train.resume_from}};
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec) r.cwd = cwd.string();
  return r;
}

AdmissionRequest worker_request(const RunConfig& cfg, const std::string& out_dir, int rank,
                                bool save_to_claimed_by_launcher) {
  AdmissionRequest r;
  r.program = Program::Worker;
  r.out_dir = out_dir;
  r.save_to = cfg.train.save_to;
  r.resume_from = cfg.train.resume_from;
  r.save_to_claimed_by_launcher = save_to_claimed_by_launcher;
  r.claims_save_to = rank == 0;
  return r;
}

namespace {

// The worker's --out: made when absent, and writable by this rank.
std::string worker_out_problem(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    return "--out " + out_dir + " cannot be made a run folder" +
           (ec ? ": " + ec.message() : std::string(": it is not a folder"));
  if (::access(out_dir.c_str(), W_OK) != 0) return "--out " + out_dir + " is not writable: " + std::strerror(errno);
  return "";
}

bool names_ok(const AdmissionRequest& req) {
  return !name_refusal("--out", req.out_dir) && !name_refusal("train.save_to", req.save_to) &&
         !name_refusal("train.resume_from", req.resume_from);
}

}  // namespace

AdmissionFacts gather_admission_facts(const AdmissionRequest& req, const RunConfig& cfg) {
  AdmissionFacts f;
  if (!names_ok(req)) return f;  // refused by name: nothing is read or made
  try {                          // a checkpoint that cannot be read is said as its issue
    for (const auto& i : ckpt::resume_issues(cfg)) f.resume_issues.push_back(i.message);
  } catch (const ConfigError& e) {
    f.resume_issues.push_back(e.what());
  }
  if (!f.resume_issues.empty()) return f;
  if (req.program == Program::Worker) {
    f.out_unusable = worker_out_problem(req.out_dir);
    if (!f.out_unusable.empty()) return f;
  } else {
    f.out = inspect_run_dir(req.out_dir);
    if (req.force && (f.out.state == RunDirState::OldRun || f.out.state == RunDirState::Foreign))
      f.live_within_out = live_run_within(req.out_dir);
  }
  if (req.save_to.empty() || req.save_to_claimed_by_launcher || !req.claims_save_to) return f;
  f.save_to_owner = live_owner(req.save_to);
  for (const auto& i : ckpt::save_to_issues(cfg, req.force)) f.save_to_issues.push_back(i.message);
  // Probing makes the folder: only once every rule before it has passed.
  if (!f.save_to_owner && f.save_to_issues.empty() && !path_within(req.save_to, req.out_dir))
    f.save_to_unwritable = probe_writable_dir(req.save_to);
  return f;
}

Admission admit_out(const AdmissionRequest& req, const AdmissionFacts& facts) {
  if (auto r = name_refusal("--out", req.out_dir)) return refused(r->message);
  if (req.program == Program::Worker) {
    // The worker writes into the folder its launcher gave it (every rank shares it): made
    // when absent, writable; its content is the launcher's to judge.
    if (!facts.out_unusable.empty()) return refused(facts.out_unusable);
    return {};
  }
  const RunDirInfo& out = facts.out;
  switch (out.state) {
    case RunDirState::Absent:
    case RunDirState::Empty:
      return {};
    case RunDirState::NotADirectory:
      return refused(out.detail + "; pick another --out");
    case RunDirState::LiveRun:
      return refused(out.detail + "; pick another --out (--force never touches a live run)");
    case RunDirState::OldRun:
    case RunDirState::Foreign:
      break;
  }
  if (!req.force) return refused(out.detail + "; pick another --out or delete it, or pass --force to move it aside");
  if (const std::string why = force_refusal(req, facts); !why.empty()) return refused(why);
  Admission a;
  a.out_action = OutAction::MoveAside;
  return a;
}

Admission admit(const AdmissionRequest& req, const AdmissionFacts& facts) {
  const std::pair<const char*, const std::string*> names[] = {
      {"--out", &req.out_dir}, {"train.save_to", &req.save_to}, {"train.resume_from", &req.resume_from}};
  for (const auto& [what, path] : names)
    if (auto r = name_refusal(what, *path)) return refused(r->message);
  if (!facts.resume_issues.empty()) return refused(facts.resume_issues.front());
  Admission a = admit_out(req, facts);
  if (!a.admitted()) return a;
  const Admission s = admit_save_to(req, facts);
  if (!s.admitted()) return s;
  a.claim_save_to = s.claim_save_to;
  return a;
}

Refusal claim_refusal(const std::string& what, const std::string& dir, const ClaimAttempt& attempt) {
  if (attempt.holder && what == "--out")
    return {dir + " is being set up or run by another ulysses-run" +
                (attempt.holder->pid > 0 ? " (pid " + std::to_string(attempt.holder->pid) + ")" : std::string()) +
                "; pick another --out (--force never touches a live run)",
            2};
  if (attempt.holder)
    return {what + ": " + dir + " belongs to " + attempt.holder->describe() + ", which is still going; pick another " +
                what + (what == "train.save_to" ? " (a save folder holds one run's checkpoints)" : ""),
            2};
  return {what + ": " + attempt.error, 2};
}

}  // namespace ulysses::launch
