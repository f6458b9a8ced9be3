// printf-style formatting into a std::string of any length, shared by the text and HTML
// reports (profiler-internal; no torch, no Qt).
#pragma once

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace ulysses::prof {

inline std::string strfmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string strfmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  std::string out;
  if (n < 0) {
    out = "(format error)";
  } else if (static_cast<size_t>(n) < sizeof buf) {
    out.assign(buf, static_cast<size_t>(n));
  } else {  // longer than the stack buffer (e.g. a 4 KiB trace name): format again at full size
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), f, again);
    out.resize(static_cast<size_t>(n));
  }
  va_end(again);
  return out;
}

// Whether s holds needle (lower case), ignoring the case of s.
inline bool contains_ci(const std::string& s, const char* needle) {
  const size_t n = std::char_traits<char>::length(needle);
  if (n > s.size()) return false;
  for (size_t i = 0; i + n <= s.size(); ++i) {
    size_t k = 0;
    while (k < n && std::tolower(static_cast<unsigned char>(s[i + k])) == needle[k]) ++k;
    if (k == n) return true;
  }
  return false;
}

}  // namespace ulysses::prof
