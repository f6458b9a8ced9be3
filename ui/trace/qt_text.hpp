// Qt text of the profiler's strings and durations: one definition for every view (file-local
// copies in each view would clash when unity builds put them in one batch).
#pragma once

#include <QString>
#include <string>

#include "trace/phase_style.hpp"

namespace ulysses::ui {

inline QString to_qs(const std::string& s) { return QString::fromStdString(s); }
// "1.25 ms", "830 ns" (format_duration_ns).
inline QString duration_qs(double ns) { return QString::fromStdString(format_duration_ns(ns)); }

}  // namespace ulysses::ui
