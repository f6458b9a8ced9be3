// Which BLAS this process actually runs: the file libblas.so.3 was loaded from (from
// /proc/self/maps) and, for OpenBLAS, its build string and threading model. Benchmarks
// print it next to their figures, because Debian's libtorch calls whatever libblas.so.3
// resolves to (reference BLAS on a plain Debian 12, OpenBLAS once it is installed).
#pragma once

#include <dlfcn.h>

#include <fstream>
#include <string>

namespace ulysses::bench {

struct BlasInfo {
  std::string libblas;    // path of the mapped libblas.so.3 (resolved), "" if none
  std::string openblas;   // openblas_get_config(), "" when not OpenBLAS
  std::string threading;  // "openmp", "pthread", "sequential" or "" (not OpenBLAS)
  // OpenBLAS's liblapack.so.3 loads libopenblas.so.0 even when libblas.so.3 is the reference
  // one, so the BLAS is told by the libblas.so.3 file, not by OpenBLAS symbols being present.
  bool is_openblas() const { return libblas.find("openblas") != std::string::npos; }
  bool reference() const { return !is_openblas() && libblas.find("/blas/") != std::string::npos; }
  std::string describe() const {
    if (is_openblas()) return "OpenBLAS (" + threading + ") " + openblas + " via " + libblas;
    return (reference() ? "reference BLAS (slow) " : "unknown BLAS ") + libblas;
  }
};

inline BlasInfo blas_info() {
  BlasInfo b;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto p = line.find('/');
    if (p != std::string::npos && line.find("libblas.so.3") != std::string::npos) {
      b.libblas = line.substr(p);
      break;
    }
  }
  using cfg_fn = char* (*)();
  using par_fn = int (*)();
  if (auto f = reinterpret_cast<cfg_fn>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) b.openblas = f();
  if (auto f = reinterpret_cast<par_fn>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"))) {
    const int p = f();
    b.threading = p == 2 ? "openmp" : p == 1 ? "pthread" : "sequential";
  }
  return b;
}

// OpenBLAS's own thread count (its pthread pool ignores at::set_num_threads); no-op otherwise.
inline void set_blas_threads(int n) {
  using fn = void (*)(int);
  if (auto f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

}  // namespace ulysses::bench
