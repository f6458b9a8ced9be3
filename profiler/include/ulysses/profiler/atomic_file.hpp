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

}  // namespace ulysses::prof
