// ulysses-run's folders taken for a run (run_folders.hpp).
#include "run_folders.hpp"

#include "launch_error.hpp"

namespace ulysses::launch {
namespace {

// Claims dir into `claim`; the refusal when another process holds it or it cannot be made.
std::optional<Refusal> claim_into(const std::string& what, const std::string& dir, const OwnerRecord& me,
                                  FolderClaim& claim) {
  ClaimAttempt at = claim_folder(dir, me);
  if (at.holder || !at.error.empty()) return claim_refusal(what, dir, at);
  claim = std::move(at.claim);
  return std::nullopt;
}

// --out's facts as they are now.
AdmissionFacts out_facts_now(const AdmissionRequest& req) {
  AdmissionFacts f;
  f.out = inspect_run_dir(req.out_dir);
  if (req.force && (f.out.state == RunDirState::OldRun || f.out.state == RunDirState::Foreign))
    f.live_within_out = live_run_within(req.out_dir);
  return f;
}

}  // namespace

std::optional<Refusal> take_run_folders(const AdmissionRequest& req, const RunConfig& cfg, const OwnerRecord& me,
                                        RunFolders& folders, const std::function<void(const std::string&)>& note) {
  const Admission a = admit(req, gather_admission_facts(req, cfg));
  if (!a.admitted()) return a.refusal;
  // Held until this process ends: the save folder belongs to one run at a time (two runs on one
  // train.save_to would both report their saves, and the folder end with the second's).
  if (a.claim_save_to)
    if (auto r = claim_into("train.save_to", req.save_to, me, folders.save_to)) return r;
  // The run folder: claimed by one atomic lock (never a look at files another launcher may be
  // writing: two launchers on one --out would both refuse, or with --force neither run, when one
  // read the other's probe file as foreign content), then judged again.
  if (auto r = claim_into("--out", req.out_dir, me, folders.out)) return r;
  const Admission claimed = admit_out(req, out_facts_now(req));
  if (!claimed.admitted()) return claimed.refusal;
  if (claimed.out_action == OutAction::Use) return std::nullopt;
  try {
    // Moved with its lock, still held: a launcher that took the path's lock before the move
    // finds it moved and takes the new path's; the fresh folder is then claimed again here.
    note("--force: moved the old " + req.out_dir + " aside to " + move_run_dir_aside(req.out_dir));
  } catch (const LaunchError& e) {
    return Refusal{e.what(), 2};
  }
  folders.out.release();
  if (auto r = claim_into("--out", req.out_dir, me, folders.out)) return r;
  if (const RunDirInfo fresh = inspect_run_dir(req.out_dir);
      fresh.state != RunDirState::Absent && fresh.state != RunDirState::Empty)
    return Refusal{fresh.detail + "; pick another --out", 2};
  return std::nullopt;
}

}  // namespace ulysses::launch
