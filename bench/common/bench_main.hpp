// The edge every hand-parsed benchmark shares (bench_attention, bench_gemm, bench_memory,
// bench_engine, bench_overlap): --help / -h prints the usage and exits 0 (it was read as a
// number: a run of 0 steps that aborted with 134, or the full benchmark started), and every
// exception ends as a one-line message and exit 1, never as an abort.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

namespace ulysses::bench {

template <class Body>
int guarded_main(const char* usage, int argc, char** argv, Body&& body) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", usage);
      return 0;
    }
  }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: unknown exception\n", argv[0]);
  }
  return 1;
}

}  // namespace ulysses::bench
