// The one way a file is written whole or not at all, for every writer of the product: run
// records, configs, metrics' neighbours, exports, reports, checkpoints, training state, images
// and caches. The bytes go to a temporary file beside `path` (one per writer: process id and a
// count), which is flushed, fsync'ed, renamed over `path` and then the folder's entry is
// fsync'ed; a crash leaves either the old file or the new one, never half of one. A full disk,
// a file-size limit, a folder in the way or an exception from `write` leaves an existing `path`
// as it was and no temporary file behind. No torch, no Qt.
#pragma once

#include <sys/types.h>

#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace ulysses {

struct AtomicWrite {
  // Durable: fsync the file before the rename and the folder after it. Caches, which are
  // rebuilt when missing, skip both (the rename is still atomic).
  bool durable = true;
  mode_t mode = 0644;  // permission bits of the new file (0755 for a script), umask not applied
};

// Throws std::runtime_error naming `path` and the cause (a file-size limit, a full disk or
// errno's text, write_error.hpp) when it cannot be written; exceptions from `write` propagate
// (after the temporary file is removed).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const AtomicWrite& how = {});
void write_file_atomically(const std::string& path, std::string_view bytes, const AtomicWrite& how = {});

// fsync of a file (dir false) or of a folder's entries (dir true); throws naming it on failure.
void sync_path(const std::string& path, bool dir);

// A file-size limit (`ulimit -f`) then makes a write fail with EFBIG, which every writer reports
// (an output: exit 1 and a message; a cache: skipped), instead of SIGXFSZ killing the process
// (exit 153, no message, temporary files left). Each program that writes files calls it first.
void ignore_file_size_signal();

}  // namespace ulysses
