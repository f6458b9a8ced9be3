// Fuzzes the run.json reader (common/src/run_record.cpp, as the launcher reads it):
// read_run_record may only raise LaunchError; a record it accepts is written back (padded to the 4 KiB reserve) and
// must read back with the same status, rank and step count.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "launch_error.hpp"
#include "run_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses::launch;
  const std::string path = fuzz::as_file(data, size, ".run.json");
  RunRecord r;
  try {
    r = read_run_record(path);
  } catch (const LaunchError&) {
    return 0;
  }
  const std::string out = path + ".out";
  write_run_record(out, r);
  const RunRecord back = read_run_record(out);
  if (back.status != r.status || back.failed_rank != r.failed_rank || back.steps_done != r.steps_done ||
      back.pid != r.pid)
    fuzz::broken("run.json does not round-trip");
  return 0;
}
