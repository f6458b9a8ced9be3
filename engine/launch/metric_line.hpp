// METRIC lines: rank 0 of the worker prints one `METRIC {json}` line per finished step on
// stdout (fields in docs/CONTRACTS.md: step, steps, loss, lr, grad_norm, tokens,
// tokens_per_s, step_ms, max_mem_bytes, elapsed_s). Parsing them, and the one-line progress
// text ulysses-run prints for a human ("step 3/20  loss 5.4321  12.3K tok/s  45 ms/step  ETA 0:10").
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ulysses::launch {

struct MetricLine {
  nlohmann::json value;  // the JSON object
  std::string raw;       // its text exactly as the worker printed it (surrounding blanks trimmed)
};

// The METRIC object of a line "METRIC {...}", or nullopt when the line is not a METRIC
// line or its payload is not a JSON object (then it is an ordinary log line).
std::optional<MetricLine> parse_metric_line(const std::string& line);

// "12.3K", "1.50M", "950": rates and counts with a metric suffix, three significant digits.
std::string format_si(double v);
// "0:07", "12:34", "1:02:03" (hours only when needed); "?" for negative or non-finite.
std::string format_eta(double seconds);
// The human progress line for one METRIC object; fields that are missing are left out.
// Step numbers are shown 1-based (the worker's step is 0-based), the ETA is
// (steps - step - 1) * step_ms.
std::string format_progress(const nlohmann::json& metric);

}  // namespace ulysses::launch
