// Splits a byte stream (a worker's stdout or stderr pipe) into text lines. Bytes arrive in
// arbitrary chunks; a line is emitted once its '\n' arrives, or when it grows past
// max_line bytes (so a worker printing without newlines cannot exhaust memory), and the
// unterminated tail is emitted by finish() at end of stream. A trailing '\r' is dropped.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses::launch {

class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line ? max_line : 1) {}

  // Appends data and returns the lines it completed, in order, without their '\n'.
  std::vector<std::string> feed(std::string_view data);
  // End of stream: the pending partial line, if any.
  std::optional<std::string> finish();

 private:
  std::size_t max_line_;
  std::string pending_;
};

}  // namespace ulysses::launch
