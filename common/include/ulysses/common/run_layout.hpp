// The files of a run folder, named in one place. `ulysses-run --out RUN` writes, and the
// worker, the trace tools and the studio read:
//
//   RUN/run.json            the run's record (state, ranks, pid, final loss, failure)
//   RUN/config.json         the resolved config the workers were given
//   RUN/metrics.jsonl       one JSON object per step (rank 0's METRIC lines)
//   RUN/logs/rank<r>.log    each rank's output
//   RUN/trace/rank<r>.sqlite  each rank's trace (when tracing)
//
// Checkpoint folders have their own layout (engine/config/checkpoint_layout.hpp). Header-only;
// no torch, no Qt.
#pragma once

#include <filesystem>
#include <string>

namespace ulysses::run_layout {

inline constexpr const char* kRunRecord = "run.json";
inline constexpr const char* kConfig = "config.json";
inline constexpr const char* kMetrics = "metrics.jsonl";
inline constexpr const char* kLogsDir = "logs";
inline constexpr const char* kTraceDir = "trace";
inline constexpr const char* kRankPrefix = "rank";      // rank<r>.log, rank<r>.sqlite
inline constexpr const char* kTraceSuffix = ".sqlite";  // a rank's trace file
inline constexpr const char* kLogSuffix = ".log";

// The records of a run that no command may replace (`--force` included).
inline constexpr const char* kRecords[] = {kRunRecord, kConfig, kMetrics};

inline std::string rank_trace_name(int rank) { return kRankPrefix + std::to_string(rank) + kTraceSuffix; }
inline std::string rank_log_name(int rank) { return kRankPrefix + std::to_string(rank) + kLogSuffix; }

inline std::filesystem::path run_record(const std::filesystem::path& run) { return run / kRunRecord; }
inline std::filesystem::path config(const std::filesystem::path& run) { return run / kConfig; }
inline std::filesystem::path metrics(const std::filesystem::path& run) { return run / kMetrics; }
inline std::filesystem::path logs_dir(const std::filesystem::path& run) { return run / kLogsDir; }
inline std::filesystem::path trace_dir(const std::filesystem::path& run) { return run / kTraceDir; }
inline std::filesystem::path rank_log(const std::filesystem::path& run, int rank) {
  return logs_dir(run) / rank_log_name(rank);
}
inline std::filesystem::path rank_trace(const std::filesystem::path& run, int rank) {
  return trace_dir(run) / rank_trace_name(rank);
}

}  // namespace ulysses::run_layout
