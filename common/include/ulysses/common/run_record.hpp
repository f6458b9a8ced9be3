// RUN/run.json, ulysses-run's record of a run (docs/CONTRACTS.md, "Run directory"): the one
// struct, the one reader and the one writer, used by the launcher, the worker's tools, the
// trace loader and the studio. Written with status "running" before the workers start and
// rewritten with the final status at the end; each write replaces the file atomically, so a
// reader never sees half a file. Reading is lenient (a reader shows what it can): what is
// missing or of the wrong type stays at its default and is said in `problems`; the launcher,
// which acts on a record, refuses one with problems (launch::read_run_record).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses {

enum class RunStatus { Running, Finished, Failed, Stopped };

std::string to_string(RunStatus s);
// Throws std::invalid_argument for an unknown name.
RunStatus run_status_from_string(const std::string& s);

inline constexpr int64_t kMaxRunRanks = 1024;                   // as validate() allows
inline constexpr int64_t kMaxRunJsonBytes = int64_t{16} << 20;  // run.json (and config.json) at most
// run.json is written padded to kRunJsonReserve bytes (trailing spaces are valid JSON), so the
// final status can still be written on a full disk: when the atomic replace fails (no space for
// the temporary file), the reserved bytes of the existing file are overwritten in place.
inline constexpr size_t kRunJsonReserve = 4096;

struct RunRecord {
  RunStatus status = RunStatus::Running;
  std::string started_at;  // ISO 8601, UTC
  std::string ended_at;    // empty while running
  double duration_s = 0;
  int64_t world_size = 0;            // 0 to kMaxRunRanks
  std::optional<int> exit_code;      // ulysses-run's exit code (0, 1 or 2)
  std::optional<double> final_loss;  // loss of the last METRIC line seen
  int64_t steps_done = 0;            // last METRIC step + 1
  std::optional<int> failed_rank;
  std::string message;  // one line a user can read
  int64_t pid = 0;      // ulysses-run's process id (tells a stale "running" from a live one)
  // A simulated run's (ulysses-worker --simulate, engine/sim/simulated_run.cpp): the hardware
  // and figures it was simulated with; null for a run that trained (then not written).
  nlohmann::json simulated;

  // Absent optionals are written as null, so every key is always present (but `simulated`).
  nlohmann::json to_json() const;
};

// What a reader found in a run.json.
struct RunRecordFile {
  bool present = false;               // the file is there and holds one JSON object
  bool status_known = false;          // `status` is one ulysses-run writes (else record.status is Running)
  RunRecord record;                   // each field read, or its default
  std::vector<std::string> keys;      // the fields read (a value of the right type, null for an optional)
  std::vector<std::string> problems;  // each field refused, a claim beyond the limits, an unreadable file
  bool has(std::string_view key) const;
};

// The one parser of run.json's object: every field leniently, each refusal in `problems`.
RunRecordFile run_record_from_json(const nlohmann::json& j);
// The one reader: a regular file of at most kMaxRunJsonBytes (never a FIFO), nested at most
// 64 deep. A missing file is not present and has no problem; one that is there but is no JSON
// object says so in problems.
RunRecordFile read_run_record_file(const std::string& path);
// The one writer: run.json padded to kRunJsonReserve, replaced atomically (atomic_file.hpp),
// else rewritten in place in the reserved bytes. Throws std::runtime_error when neither works.
void write_run_record_file(const std::string& path, const RunRecord& r);

}  // namespace ulysses
