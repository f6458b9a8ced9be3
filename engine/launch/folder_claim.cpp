// Claiming a folder with an OFD lock and an owner record (see folder_claim.hpp).
#include "folder_claim.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launch_error.hpp"
#include "run_record.hpp"

namespace ulysses::launch {

namespace fs = std::filesystem;

std::string OwnerRecord::describe() const {
  std::string s = "run " + (run.empty() ? std::string("(unnamed)") : run);
  if (pid > 0) s += " (" + (by.empty() ? std::string("pid ") : by + " pid ") + std::to_string(pid) + ")";
  return s;
}

bool is_claim_file(const std::string& n) {
  return n == kClaimLockFile || n.rfind(kOwnerRecordFile, 0) == 0;  // the record and its temps (".tmpPID")
}

FolderClaim::FolderClaim(FolderClaim&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)) { o.fd_ = -1; }
FolderClaim& FolderClaim::operator=(FolderClaim&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    o.fd_ = -1;
  }
  return *this;
}
FolderClaim::~FolderClaim() { release(); }
void FolderClaim::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor of the description drops its OFD lock
  fd_ = -1;
}

namespace {
bool owner_alive(int64_t pid) {
  return pid > 0 && pid <= INT32_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

std::optional<OwnerRecord> read_record(const fs::path& dir) {
  std::ifstream in(dir / kOwnerRecordFile);
  if (!in) return std::nullopt;
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  OwnerRecord r;
  if (j.contains("run") && j["run"].is_string()) r.run = j["run"].get<std::string>();
  if (j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<int64_t>();
  if (j.contains("by") && j["by"].is_string()) r.by = j["by"].get<std::string>();
  return r;
}

// Whether another open file description holds dir's lock (F_OFD_GETLK; takes nothing).
bool lock_held_elsewhere(const fs::path& dir) {
  const int fd = ::open((dir / kClaimLockFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

// The record of a live holder: it is written just after the lock is taken, so a record naming
// a dead process (the previous owner's) may be read for a moment; look again briefly.
OwnerRecord holder_record(const fs::path& dir) {
  std::optional<OwnerRecord> r;
  for (int i = 0; i < 20; ++i) {
    r = read_record(dir);
    if (r && owner_alive(r->pid)) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  OwnerRecord unknown;  // pid 0: not named yet
  return unknown;
}
}  // namespace

ClaimAttempt claim_folder(const std::string& dir_s, const OwnerRecord& me) {
  ClaimAttempt out;
  const fs::path dir(dir_s);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    out.error = "cannot create directory " + dir_s + ": " + ec.message();
    return out;
  }
  if (!fs::is_directory(dir, ec)) {
    out.error = dir_s + " is not a directory";
    return out;
  }
  const fs::path lock = dir / kClaimLockFile;
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      out.error = "cannot write in " + dir_s + ": " + std::strerror(errno);
      return out;
    }
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EAGAIN || err == EACCES) {
        out.holder = holder_record(dir);
        return out;
      }
      out.error = "cannot lock " + lock.string() + ": " + std::strerror(err);
      return out;
    }
    // The file locked is still the one at that path (not moved aside with its folder meanwhile).
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) != 0 || ::lstat(lock.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);
      fs::create_directories(dir, ec);
      continue;
    }
    out.claim.fd_ = fd;
    out.claim.dir_ = dir_s;
    OwnerRecord r = me;
    if (r.pid == 0) r.pid = ::getpid();
    try {
      write_json_file_atomic((dir / kOwnerRecordFile).string(), {{"run", r.run}, {"pid", r.pid}, {"by", r.by}});
    } catch (const std::exception& e) {
      out.claim.release();
      out.error = e.what();
    }
    return out;
  }
  out.error = "cannot claim " + dir_s + ": its lock file kept being replaced";
  return out;
}

std::optional<OwnerRecord> live_owner(const std::string& dir) {
  if (!lock_held_elsewhere(dir)) return std::nullopt;
  OwnerRecord r = holder_record(dir);
  if (r.pid == ::getpid()) return std::nullopt;  // this process's own claim
  return r;
}

std::optional<OwnerRecord> last_owner(const std::string& dir) { return read_record(dir); }

}  // namespace ulysses::launch
