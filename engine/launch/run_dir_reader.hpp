// The one reader of a run directory's files (docs/CONTRACTS.md, "Run directory"):
// RUN/metrics.jsonl and METRIC lines, RUN/config.json, and the figures the
// front ends quote from them (steady-state medians: ulysses/common/step_stats.hpp).
// Qt-free and torch-free: ulysses-run, ulysses-trace and the studio (ui/models/run_data)
// all read through here. Only regular files of bounded size are read (a FIFO named
// run.json would block a reader forever); claims beyond the limits are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ulysses/common/run_record.hpp"

namespace ulysses::launch {

using ulysses::kMaxRunJsonBytes;  // run.json, config.json (ulysses/common/run_record.hpp)
using ulysses::kMaxRunRanks;      // as validate() allows
inline constexpr int64_t kMaxMetricsBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxMetricPoints = 10'000'000;

// One METRIC object (rank 0, one per finished step; fields in docs/CONTRACTS.md).
struct MetricPoint {
  int64_t step = -1;
  int64_t steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_ms = 0, elapsed_s = 0;
  int64_t tokens = 0, max_mem_bytes = 0;
};

// A METRIC object; nullopt unless `step` and `loss` are numbers. Missing fields stay 0.
std::optional<MetricPoint> metric_from_json(const nlohmann::json& j);
// `{json}` or `METRIC {json}` (surrounding blanks ignored); nullopt for anything else.
std::optional<MetricPoint> parse_metric_text(const std::string& line);
// Every METRIC object of a metrics.jsonl file, skipping lines that do not parse and lines
// over 64 KiB; empty when the file is missing, not a regular file or over kMaxMetricsBytes.
std::vector<MetricPoint> read_metrics_file(const std::string& path);
// The last METRIC object of a metrics.jsonl file (the last line that parses), reading only
// the file's end: reading every file whole takes 10 s for a runs list of 3000 live or failed runs.
// nullopt when there is none, or as read_metrics_file would find none.
std::optional<MetricPoint> read_last_metric(const std::string& path);

// The JSON object in a regular file of at most max_bytes; nullopt when missing, not a
// regular file, too large, not JSON or not an object.
std::optional<nlohmann::json> read_json_object_file(const std::string& path, int64_t max_bytes = kMaxRunJsonBytes);

// RUN/run.json is read by the common floor's one reader (ulysses/common/run_record.hpp:
// read_run_record_file, lenient, each problem said).

// Figures of a run from its METRIC objects. Medians are step_stats.hpp's steady_state
// (the definition `ulysses-trace summary` uses for the same steps).
struct MetricStats {
  int64_t steps = 0;  // METRIC objects read
  double median_step_ms = 0;
  double median_tokens_per_s = 0;
  int64_t max_mem_bytes = 0;  // max over steps
  double final_loss = 0;      // last step's
  double elapsed_s = 0;       // last step's
};
MetricStats metric_stats(const std::vector<MetricPoint>& points);

}  // namespace ulysses::launch
