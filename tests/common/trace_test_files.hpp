// Test helpers shared by the profiler's bad-input and foreign-import tests: a file written
// byte for byte, the TraceError a load gives, and ulysses-trace run with its output captured.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::test {

// PATH holds exactly BYTES (replaced when it exists).
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// The TraceError message of loading PATH; "" when it loads.
inline std::string load_error(const std::string& path) {
  try {
    ulysses::prof::load_trace(path);
  } catch (const ulysses::prof::TraceError& e) {
    return e.what();
  }
  return "";
}

// ulysses-trace ARGS run by /bin/sh after SHELL_PREFIX (e.g. "ulimit -f 0;"): its exit code (-1
// for a signal death), stdout and stderr together in *out (a pipe: no file-size limit applies).
// -2 when the target has no ULYSSES_TRACE_BIN.
inline int trace_cli(const std::string& args, std::string* out, const std::string& shell_prefix = "") {
  out->clear();
#ifdef ULYSSES_TRACE_BIN
  std::FILE* p = ::popen(("(" + shell_prefix + " exec " + ULYSSES_TRACE_BIN + " " + args + ") 2>&1").c_str(), "r");
  if (!p) return -2;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
#else
  (void)args, (void)shell_prefix;
  *out = "ulysses-trace not built";
  return -2;
#endif
}

}  // namespace ulysses::test
