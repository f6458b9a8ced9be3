// The one definition of "median step time" (and median tokens/s) of a run, used by
// `ulysses-trace summary` (profiler analysis, over the trace's step records) and by the
// studio (engine/launch/run_dir_reader, over RUN/metrics.jsonl). docs/CONTRACTS.md,
// "Median step time", states it: the true median (mean of the two middle values for an even
// count) over the steps given, leaving out step 0 (warm-up: allocator, thread pools, first
// touch) whenever any other step is present. Header-only, no dependencies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ulysses {

// One step's figures as rank 0 measured them (METRIC line or trace step record).
struct StepFigure {
  int64_t step = 0;  // 0-based step index of the run
  double step_ms = 0;
  double tokens_per_s = 0;
};

struct SteadyState {
  int64_t counted = 0;  // steps the medians are taken over
  double median_step_ms = 0;
  double median_tokens_per_s = 0;
};

// True median; 0 for an empty vector.
inline double true_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Medians over the steps given, without step 0 when any other step is present.
inline SteadyState steady_state(const std::vector<StepFigure>& steps) {
  const bool skip_warmup = std::any_of(steps.begin(), steps.end(), [](const StepFigure& s) { return s.step != 0; });
  std::vector<double> ms, tps;
  for (const auto& s : steps) {
    if (skip_warmup && s.step == 0) continue;
    ms.push_back(s.step_ms);
    tps.push_back(s.tokens_per_s);
  }
  SteadyState r;
  r.counted = static_cast<int64_t>(ms.size());
  r.median_step_ms = true_median(ms);
  r.median_tokens_per_s = true_median(tps);
  return r;
}

}  // namespace ulysses
