// A failed write said plainly. Under a file-size limit (ulimit -f; SIGXFSZ ignored, as every
// program here does) a write past it fails with EFBIG: said as that limit with the file and
// the limit, not as "disk full?" (73 GB were free) or SQLite's "disk I/O error".
#pragma once

#include <cstdint>
#include <string>

namespace ulysses {

// This process's file-size limit in bytes (RLIMIT_FSIZE), or -1 when unlimited.
int64_t file_size_limit();

// "writing PATH failed: ..." for a write that failed with errno `err` (0 when not known): a
// file-size limit when err is EFBIG (or, with err unknown, when a limit is set and the file
// has reached it), the disk when ENOSPC/EDQUOT, else strerror. `written` is the file whose
// size is compared with the limit when it is not `path` itself (a temporary file beside it).
std::string write_failed(const std::string& path, int err, const std::string& written = "");

// For a message that names no cause (SQLite's "disk I/O error", "database or disk is full"):
// " (this process has a file-size limit, ulimit -f, of N bytes: ...)" when one is set, else "".
std::string file_size_limit_hint(const std::string& message);

}  // namespace ulysses
