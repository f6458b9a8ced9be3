// One way to claim a folder, shared by a run folder (--out), the folder --force would move
// aside and a save folder (train.save_to): an open-file-description lock (fcntl F_OFD_SETLK)
// on DIR/.ulysses-lock, held by the owning process for as long as it owns the folder, and an
// owner record DIR/.ulysses-owner.json (run id, pid) written atomically (temp + rename) once
// the lock is taken. The lock is the claim: taking it is one atomic kernel operation, the
// kernel drops it when the owner dies (no stale claim, no pid reuse), and finding whether a
// folder is claimed never reads a file another claimer may be writing (F_OFD_GETLK asks the
// kernel). The record only names the owner in messages and for the workers' check at every save.
// Local file systems: a lock on NFS is only as good as its lock daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ulysses::launch {

constexpr const char* kClaimLockFile = ".ulysses-lock";
constexpr const char* kOwnerRecordFile = ".ulysses-owner.json";
// Handed by ulysses-run to its workers: the run id its save folder's owner record must name.
constexpr const char* kSaveOwnerEnv = "ULYSSES_SAVE_OWNER";

struct OwnerRecord {
  std::string run;               // the run's id: its run folder's absolute path
  int64_t pid = 0;               // the process holding the claim
  std::string by;                // "ulysses-run", "ulysses-worker rank 0"
  std::string describe() const;  // "run /x/runs/a (ulysses-run pid 123)"
};

// The claim files (lock, owner record, its temps), which no folder inspection counts as content.
bool is_claim_file(const std::string& filename);

struct ClaimAttempt;
ClaimAttempt claim_folder(const std::string& dir, const OwnerRecord& me);

class FolderClaim {
 public:
  FolderClaim() = default;
  FolderClaim(FolderClaim&& o) noexcept;
  FolderClaim& operator=(FolderClaim&& o) noexcept;
  FolderClaim(const FolderClaim&) = delete;
  FolderClaim& operator=(const FolderClaim&) = delete;
  ~FolderClaim();

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  // Drops the lock (the owner record stays, naming the last owner).
  void release();

 private:
  friend ClaimAttempt claim_folder(const std::string& dir, const OwnerRecord& me);
  int fd_ = -1;
  std::string dir_;
};

struct ClaimAttempt {
  FolderClaim claim;                  // held() when taken
  std::optional<OwnerRecord> holder;  // when another live process holds it (pid 0 if its record is not there yet)
  std::string error;                  // the folder cannot be made or locked (permissions, not a folder)
};

// Creates dir (and its parents) when absent and takes its claim without waiting; writes `me`
// as the owner record once taken. A lock file that was moved or replaced while this call took
// it (a --force moving the folder aside) is taken again at the new path.
ClaimAttempt claim_folder(const std::string& dir, const OwnerRecord& me);

// The live owner of dir's claim (another process holds its lock), or nothing. Never takes the
// lock itself, so asking never makes a concurrent claimer fail.
std::optional<OwnerRecord> live_owner(const std::string& dir);

// The owner record as the last owner left it (live or not), or nothing.
std::optional<OwnerRecord> last_owner(const std::string& dir);

}  // namespace ulysses::launch
