// Appends whole lines to a file (RUN/metrics.jsonl) so that the file never ends in a torn
// line: each line goes out in one write(2) with O_APPEND, and when the write fails or is
// short (a full disk, a file-size limit), the file is cut back to its size before the
// write. A reader therefore sees only complete steps. Errors come back as a message that
// names the file and what was being written; nothing is thrown.
#pragma once

#include <string>

namespace ulysses::launch {

class LineAppender {
 public:
  LineAppender() = default;
  ~LineAppender();
  LineAppender(const LineAppender&) = delete;
  LineAppender& operator=(const LineAppender&) = delete;

  // Opens (creating) path for appending. Empty string on success, else the reason.
  std::string open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  // Writes line + '\n' (fdatasync'ed when sync). `what` names the record in a failure,
  // e.g. "step 12": "cannot append step 12 to RUN/metrics.jsonl: No space left on device
  // (the partial line was removed; the file ends at the previous line)".
  std::string append(const std::string& line, const std::string& what, bool sync = false);
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace ulysses::launch
