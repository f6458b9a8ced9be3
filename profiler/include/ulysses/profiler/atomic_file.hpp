// Writing an output file whole or not at all: the bytes go to a temporary file beside `path`
// (one per writer: process id and a count), which is renamed over `path` only once written,
// flushed and closed without error. A full disk, a folder in the way or an exception from
// `write` leaves an existing `path` as it was and no temporary file behind. No torch, no Qt.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace ulysses::prof {

// Throws std::runtime_error naming `path` and the cause (errno's text) when it cannot be
// written; exceptions from `write` propagate (after the temporary file is removed).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// A file-size limit (`ulimit -f`) then makes a write fail with EFBIG, which every writer reports
// (an output: exit 1 and a message; a cache: skipped), instead of SIGXFSZ killing the process
// (exit 153, no message, temporary files left). Each program that writes files calls it first
// (ulysses-trace, ulysses-studio; ulysses-run and the worker ignore SIGXFSZ themselves).
void ignore_file_size_signal();

}  // namespace ulysses::prof
