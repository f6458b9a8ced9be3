// Fuzzes the METRIC line reader (engine/launch/metric_line.cpp): any line a worker prints
// goes through parse_metric_line; an accepted object goes through format_progress, which
// must cope with any field types (the launcher prints it for every step). No exception may
// escape either.
#include <cstdint>
#include <string>

#include "metric_line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses::launch;
  const std::string line(reinterpret_cast<const char*>(data), size);
  if (auto m = parse_metric_line(line)) {
    if (!m->value.is_object()) __builtin_trap();
    (void)format_progress(m->value);
  }
  (void)parse_metric_line("METRIC " + line);
  return 0;
}
