// A self-contained one-page HTML report of an analysis Summary (`ulysses-trace report RUN
// --html OUT.html`): headline figures, time breakdown per rank, overlap, per-layer times,
// straggler (rank skew) table when the trace has several ranks, memory, and inline SVG
// charts. No scripts, no external resource (a Content-Security-Policy of default-src 'none'
// forbids any request), so it opens offline in any browser. Every headline figure carries
// its exact value in a data-key / data-value attribute, with the same keys as
// `ulysses-trace summary --json` ("headline.step_ms", "overall.overlap_ratio", ...).
#pragma once

#include <string>

#include "ulysses/profiler/analysis.hpp"

namespace ulysses::prof {

std::string summary_to_html(const TraceModel& m, const Summary& s, const std::string& title);

}  // namespace ulysses::prof
