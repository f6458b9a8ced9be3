// run.json reading and writing (see run_record.hpp).
#include "run_record.hpp"

#include <cerrno>
#include <limits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_error.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "run_config.hpp"

namespace ulysses::launch {

using nlohmann::json;

void write_json_file_atomic(const std::string& path, const json& j) {
  try {
    ulysses::write_file_atomically(path, j.dump(2) + "\n");  // temp file, fsync, rename, fsync folder
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
}

void write_run_record(const std::string& path, const RunRecord& r) {
  try {
    write_run_record_file(path, r);
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
}

RunRecord read_run_record(const std::string& path) {
  const RunRecordFile f = read_run_record_file(path);
  struct stat st {};
  if (!f.present && ::stat(path.c_str(), &st) != 0) throw LaunchError("cannot read " + path + ": no such file");
  if (!f.problems.empty()) throw LaunchError(path + " is not a valid run record: " + f.problems.front());
  if (!f.status_known) throw LaunchError(path + " is not a valid run record: it has no status");
  return f.record;
}

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::string compact_local_timestamp(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace ulysses::launch
