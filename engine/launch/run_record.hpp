// RUN/run.json as the launcher writes and reads it (docs/CONTRACTS.md, "Run directory"): the
// common floor's one record, reader and writer (ulysses/common/run_record.hpp), with the
// launcher's errors; and the launcher's timestamps.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "ulysses/common/run_record.hpp"

namespace ulysses::launch {

// The record itself, its one reader and its one writer are the common floor's
// (ulysses/common/run_record.hpp); the launcher names them here.
using ulysses::kRunJsonReserve;
using ulysses::run_status_from_string;
using ulysses::RunRecord;
using ulysses::RunStatus;
using ulysses::to_string;

// Atomic replace of path with j pretty-printed. Throws LaunchError on I/O failure.
void write_json_file_atomic(const std::string& path, const nlohmann::json& j);
// write_run_record_file (padded, atomic, else in place). Throws LaunchError when neither works.
void write_run_record(const std::string& path, const RunRecord& r);
// read_run_record_file, for a launcher that acts on the record: throws LaunchError when the
// file is missing, is no JSON object, has no status ulysses-run writes or has a field refused.
RunRecord read_run_record(const std::string& path);

// "2024-05-01T12:03:04.123Z"
std::string iso8601_utc(std::chrono::system_clock::time_point t);
// "20240501-140304" in local time, for default run directory names.
std::string compact_local_timestamp(std::chrono::system_clock::time_point t);

}  // namespace ulysses::launch
