// Text and JSON renderings of an analysis Summary, shared by `ulysses-trace summary` and
// anything else that wants the same tables (times in ms in text, ns in JSON).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/analysis.hpp"

namespace ulysses::prof {

nlohmann::json summary_to_json(const TraceModel& m, const Summary& s);
std::string summary_to_text(const TraceModel& m, const Summary& s);
// One document part of a rank's shard (TraceModel::documents) as the text summary and the
// studio write it: "#7 [20, 50) holds [32, 50)", "#9 @128 of 300 tok [0, 64)", "padding [60, 64)".
std::string document_part_text(const DocumentShard& d);

// `s` with every byte that starts no well-formed UTF-8 sequence (RFC 3629) replaced by U+FFFD:
// names from hand-edited or foreign traces, for outputs that must be valid UTF-8 (the HTML
// report, the text summary).
std::string with_valid_utf8(const std::string& s);

// The one verdict on a trace with nothing to show (no range, no kernel, no memory sample):
// the reason, naming `source`, or "" when it has something. The studio's trace views and
// ulysses-trace's summary, report and export refuse such a trace with it (exit 2); they
// disagreed (the studio refused, summary printed empty tables).
std::string empty_trace_reason(const std::string& source, int64_t ranges_and_kernels, size_t memory_samples);
// The same for a loaded model: a foreign trace (Nsight Systems, PyTorch profiler) is not asked
// about our profile.* settings but told what its importer left out (the model's notes).
std::string empty_trace_reason(const TraceModel& m, int64_t ranges_and_kernels);

}  // namespace ulysses::prof
