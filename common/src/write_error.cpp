// Failed writes named with their cause (see write_error.hpp).
#include "ulysses/common/write_error.hpp"

#include <sys/resource.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace ulysses {

int64_t file_size_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(r.rlim_cur);
}

namespace {
std::string limit_words(int64_t limit) {
  return "the file-size limit of this process (ulimit -f: " + std::to_string(limit) + " bytes)";
}
}  // namespace

std::string write_failed(const std::string& path, int err, const std::string& written) {
  const int64_t limit = file_size_limit();
  struct stat st {};
  const std::string& file = written.empty() ? path : written;
  const bool at_limit = limit >= 0 && ::stat(file.c_str(), &st) == 0 && st.st_size >= limit;
  if (err == EFBIG || (err == 0 && at_limit))
    return "writing " + path + " failed: it reached " +
           (limit >= 0 ? limit_words(limit) : std::string("the largest file size allowed")) +
           "; raise it (ulimit -f unlimited) or write less";
  if (err == ENOSPC || err == EDQUOT)
    return "writing " + path + " failed: " + std::strerror(err) + " (free some space, or pick another folder)";
  return "writing " + path + " failed" + (err ? ": " + std::string(std::strerror(err)) : std::string(" (disk full?)"));
}

std::string file_size_limit_hint(const std::string& message) {
  const int64_t limit = file_size_limit();
  if (limit < 0) return "";
  for (const char* k : {"disk I/O error", "disk is full", "File too large", "failed (disk full?)"})
    if (message.find(k) != std::string::npos)
      return " (" + limit_words(limit) +
             " is set: a write past it fails, which is likely the cause; raise it with ulimit -f unlimited)";
  return "";
}

}  // namespace ulysses
