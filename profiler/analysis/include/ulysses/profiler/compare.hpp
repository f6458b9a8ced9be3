// Two analysed traces side by side, as one table: headline rows (step time, compute, comm,
// exposed comm, idle, overlap ratio, tokens/s, comm bytes, peak memory), then per phase and
// direction, then per layer, direction and phase: run A, run B, B - A and B / A.
// `ulysses-trace compare` prints it and the studio's run comparison shows it. No torch, no Qt.
//
// Statistic of the time rows (step, compute, comm, exposed comm, idle, phases, layers): the
// MEDIAN OVER STEPS of the time per rank in that step (the sum over ranks / the ranks that ran
// the step), with step_stats.hpp's rule: the true median, leaving out step 0 (warm-up) when
// any other step is in the window. The steps are those of each Summary (its AnalysisOptions
// window); a trace without step records counts as one step (-1). A phase or layer absent in
// a step counts 0 there. Phase / layer time is prof::phase_times (analysis.hpp): host ranges
// on CPU ranks, GPU kernel time on GPU ranks. The other headline rows are the Summary's own
// figures: overlap ratio = overall.ratio (whole window), tokens/s = headline.tokens_per_s
// (median, step_stats.hpp), bytes = headline's per-step means, peak memory = headline's.
// A row present in one run only has the other side absent (no difference, no ratio).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/analysis.hpp"

namespace ulysses::prof {

enum class CompareSection : uint8_t { Headline, Phase, Layer };
const char* compare_section_name(CompareSection s);  // "headline", "phase", "layer"

struct CompareRow {
  CompareSection section = CompareSection::Headline;
  std::string
      key;  // headline: "step_ns", "compute_ns", ...; phase/layer: "attention forward", "layer 1 attention forward"
  std::string unit;            // "ns", "ratio", "tokens/s", "bytes"
  Phase phase = Phase::Other;  // phase and layer rows
  Direction dir = Direction::None;
  int32_t layer = -1;  // layer rows
  bool has_a = false, has_b = false;
  double a = 0, b = 0;
  bool has_ratio = false;  // both present and a != 0
  double diff = 0;         // b - a (both present)
  double ratio = 0;        // b / a (has_ratio)
  // Both present and either |b / a - 1| > threshold, or a == 0 and b != 0.
  bool flagged = false;
};

struct CompareSide {
  std::string source;
  int32_t world_size = 0;
  int64_t steps = 0;    // steps in the window (distinct step numbers)
  int64_t counted = 0;  // steps the medians are over (step 0 left out when others exist)
  // No step records (the whole trace counts as one step, -1): its times are totals over the
  // trace, not per step, so a comparison with a run that has steps is said to be off.
  bool no_step_records = false;
};

struct Comparison {
  CompareSide a, b;
  double threshold = 0.10;
  std::vector<CompareRow> rows;  // headline rows, then phase rows, then layer rows
  int64_t flagged() const;
  // The row with that section and key, or nullptr.
  const CompareRow* find(CompareSection s, const std::string& key) const;
};

struct CompareOptions {
  double threshold = 0.10;  // rows whose B / A differs from 1 by more are flagged
};

// `sa` / `sb` are analyze(a) / analyze(b) (any step window: the comparison uses their steps).
Comparison compare_summaries(const TraceModel& a, const Summary& sa, const TraceModel& b, const Summary& sb,
                             const CompareOptions& o = {});

// A row's label in text ("step ms", "attention fwd ms", "layer 1 attention fwd ms", "all-to-all
// MiB/step") and a value of it in those units ("12.345"); shared by the text and the studio.
std::string compare_row_label(const CompareRow& r);
std::string compare_value_text(const CompareRow& r, double v);

// Text (times in ms) and JSON (times in ns; absent sides, differences and ratios are null).
std::string comparison_to_text(const Comparison& c);
nlohmann::json comparison_to_json(const Comparison& c);

}  // namespace ulysses::prof
