// Torn-line-free appends (see line_appender.hpp).
#include "line_appender.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ulysses::launch {

LineAppender::~LineAppender() {
  if (fd_ >= 0) ::close(fd_);
}

std::string LineAppender::open(const std::string& path) {
  if (fd_ >= 0) ::close(fd_);
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return "cannot open " + path + " for appending: " + std::strerror(errno);
  return {};
}

std::string LineAppender::append(const std::string& line, const std::string& what, bool sync) {
  if (fd_ < 0) return "cannot append " + what + " to " + path_ + ": the file is not open";
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return "cannot append " + what + " to " + path_ + ": " + std::strerror(errno);
  const off_t before = st.st_size;
  const std::string text = line + "\n";
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && sync && ::fdatasync(fd_) != 0) err = errno;
  if (err == 0) return {};
  // Cut the partial line off: the file ends at the previous complete line.
  const bool cut = ::ftruncate(fd_, before) == 0;
  return "cannot append " + what + " to " + path_ + ": " + std::strerror(err) +
         (done == 0 ? std::string()
          : cut     ? " (the partial line was removed; the file ends at the previous line)"
                    : " (a partial line remains: " + std::string(std::strerror(errno)) + ")");
}

}  // namespace ulysses::launch
