#include "ulysses/profiler/atomic_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ulysses::prof {

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  // Only a regular file (or nothing) is replaced: renaming over /dev/full, a FIFO or a socket
  // put a regular file where the device or pipe was (as root, /dev/null itself).
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error("cannot write '" + path +
                             "': it exists and is not a regular file (a device, FIFO, socket or folder); give a "
                             "file path");
  static std::atomic<uint64_t> writers{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++writers);
  auto fail = [&](const std::string& what, int err) {
    std::remove(tmp.c_str());
    if (err == EFBIG)  // with SIGXFSZ ignored (ignore_file_size_signal)
      throw std::runtime_error("cannot write '" + path + "': the file-size limit (ulimit -f) is reached; raise it");
    throw std::runtime_error("cannot write '" + path + "': " + what +
                             (err ? std::string(": ") + std::strerror(err) : ""));
  };
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot create a file beside it (does its folder exist, is it writable?)", errno);
    errno = 0;
    try {
      write(f);
    } catch (...) {
      f.close();
      std::remove(tmp.c_str());
      throw;
    }
    // A write that failed midway (the buffer spilled): its errno, before flush() could clear it.
    if (!f) fail("writing failed (disk full?)", errno);
    errno = 0;
    f.flush();
    if (!f) fail("writing failed (disk full?)", errno);
    f.close();
    if (!f) fail("closing failed (disk full?)", errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot put the written file in its place", errno);
}

void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

}  // namespace ulysses::prof
