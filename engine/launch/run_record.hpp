// RUN/run.json: the launcher's record of a run (docs/CONTRACTS.md, "Run directory").
// Written with status "running" before the workers start and rewritten with the final
// status at the end; each write replaces the file atomically (write + rename), so a reader
// (the studio) never sees half a file.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ulysses::launch {

enum class RunStatus { Running, Finished, Failed, Stopped };

std::string to_string(RunStatus s);
// Throws std::invalid_argument for an unknown name.
RunStatus run_status_from_string(const std::string& s);

struct RunRecord {
  RunStatus status = RunStatus::Running;
  std::string started_at;  // ISO 8601, UTC
  std::string ended_at;    // empty while running
  double duration_s = 0;
  int64_t world_size = 0;
  std::optional<int> exit_code;      // ulysses-run's exit code (0, 1 or 2)
  std::optional<double> final_loss;  // loss of the last METRIC line seen
  int64_t steps_done = 0;            // last METRIC step + 1
  std::optional<int> failed_rank;
  std::string message;  // one line a user can read
  int64_t pid = 0;      // ulysses-run's process id (tells a stale "running" from a live one)

  // Absent optionals are written as null, so every key is always present.
  nlohmann::json to_json() const;
  static RunRecord from_json(const nlohmann::json& j);
};

// Atomic replace of path with j pretty-printed. Throws LaunchError on I/O failure.
void write_json_file_atomic(const std::string& path, const nlohmann::json& j);
// run.json is written padded to kRunJsonReserve bytes (trailing spaces are valid JSON), so
// the final status can still be written on a full disk: when the atomic replace fails
// (no space for the temporary file), the reserved bytes of the existing file are
// overwritten in place. Throws LaunchError when neither works.
inline constexpr size_t kRunJsonReserve = 4096;
void write_run_record(const std::string& path, const RunRecord& r);
// Throws LaunchError when the file is missing or not a run record.
RunRecord read_run_record(const std::string& path);

// "2024-05-01T12:03:04.123Z"
std::string iso8601_utc(std::chrono::system_clock::time_point t);
// "20240501-140304" in local time, for default run directory names.
std::string compact_local_timestamp(std::chrono::system_clock::time_point t);

}  // namespace ulysses::launch
