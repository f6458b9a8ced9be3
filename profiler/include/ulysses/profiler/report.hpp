// Text and JSON renderings of an analysis Summary, shared by `ulysses-trace summary` and
// anything else that wants the same tables (times in ms in text, ns in JSON).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/analysis.hpp"

namespace ulysses::prof {

nlohmann::json summary_to_json(const TraceModel& m, const Summary& s);
std::string summary_to_text(const TraceModel& m, const Summary& s);

}  // namespace ulysses::prof
