// Start-up hygiene shared by the command-line programs: a program started with stdin, stdout or
// stderr closed (`cmd >&-`) would be handed that descriptor number by its next open(), and its
// own output would then go into that file: ulysses-run's progress lines ended up in
// RUN/logs/rank0.log. Each closed one is opened on /dev/null first.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ulysses::cli {

// Bit f set (1 << f) for each of descriptors 0, 1 and 2 that was closed and is now /dev/null.
inline int reopen_closed_std_fds() {
  int closed = 0;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got == fd) {
      closed |= 1 << fd;
    } else if (got >= 0) {  // a lower one was free after all: keep ours, drop the extra
      ::dup2(got, fd);
      ::close(got);
      closed |= 1 << fd;
    }
  }
  return closed;
}

}  // namespace ulysses::cli
