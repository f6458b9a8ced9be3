// Fuzzes the trace loader (profiler/load/src/trace_store.cpp) with mutated small SQLite files
// (seed: fuzz/corpus/trace_loader/, a two-step trace of one rank). load_trace may only
// raise TraceError; a model it returns must be consistent: every range's name and lane
// index inside its tables, no string longer than the loader's cap.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "ulysses/profiler/trace_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace prof = ulysses::prof;
  const std::string path = fuzz::as_file(data, size, ".sqlite");
  try {
    const prof::TraceModel m = prof::load_trace(path);
    for (const auto& s : m.strings)
      if (s.size() > 4096 + 3) fuzz::broken("a string beyond the cap");
    for (const auto& r : m.ranges)
      if (r.name_id < 0 || static_cast<size_t>(r.name_id) >= m.strings.size())
        fuzz::broken("range name out of the table");
    for (const auto& r : m.ranges)
      if (r.lane < 0 || static_cast<size_t>(r.lane) >= m.lanes.size()) fuzz::broken("range lane out of the table");
  } catch (const prof::TraceError&) {
  }
  return 0;
}
