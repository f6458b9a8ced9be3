// The one atomic file writer (see atomic_file.hpp).
#include "ulysses/common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ulysses/common/write_error.hpp"

namespace ulysses {

namespace {

// The folder whose entry a rename of `path` changes.
std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void sync_path(const std::string& path, bool dir) {
  const int fd = ::open(path.c_str(), dir ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC));
  if (fd < 0) throw std::runtime_error("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (r != 0) throw std::runtime_error("fsync of " + path + " failed: " + std::strerror(e));
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const AtomicWrite& how) {
  // Only a regular file (or nothing) is replaced: renaming over /dev/full, a FIFO or a socket
  // put a regular file where the device or pipe was (as root, /dev/null itself).
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error("cannot write '" + path +
                             "': it exists and is not a regular file (a device, FIFO, socket or folder); give a "
                             "file path");
  static std::atomic<uint64_t> writers{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++writers);
  auto fail = [&](const std::string& what, int err) {
    std::string why =
        err == EFBIG || err == ENOSPC || err == EDQUOT || err == 0 ? write_failed(path, err, tmp) : std::string();
    std::remove(tmp.c_str());
    if (why.empty()) why = "cannot write '" + path + "': " + what + (err ? std::string(": ") + std::strerror(err) : "");
    throw std::runtime_error(why);
  };
  // Created here, not by the stream: the mode is the one asked for, whatever the umask.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, how.mode);
  if (fd < 0) {
    const int err = errno;
    throw std::runtime_error("cannot write '" + path +
                             "': cannot create a file beside it (does its folder exist, "
                             "is it writable?): " +
                             std::strerror(err));
  }
  const bool mode_ok = ::fchmod(fd, how.mode) == 0;
  ::close(fd);
  if (!mode_ok) fail("cannot set its permissions", errno);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot open the file beside it", errno);
    errno = 0;
    try {
      write(f);
    } catch (...) {
      f.close();
      std::remove(tmp.c_str());
      throw;
    }
    // A write that failed midway (the buffer spilled): its errno, before flush() could clear it.
    if (!f) fail("writing failed", errno);
    errno = 0;
    f.flush();
    if (!f) fail("writing failed", errno);
    f.close();
    if (!f) fail("closing failed", errno);
  }
  if (how.durable) {
    const int rfd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    const int err = rfd < 0 ? errno : (::fsync(rfd) == 0 ? 0 : errno);
    if (rfd >= 0) ::close(rfd);
    if (err != 0) fail("fsync failed", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot put the written file in its place", errno);
  if (how.durable) {
    // The rename made durable. The file is already whole under its name: a folder that cannot
    // be synced (some network file systems) costs durability, not the write.
    const int dfd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes, const AtomicWrite& how) {
  write_file_atomically(
      path, [&](std::ostream& f) { f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); }, how);
}

void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

}  // namespace ulysses
