// Internal to the cache room (summary_cache.cpp, trace_overview.cpp): the key of the caches it
// keeps beside a trace, cache_io::make_key with the summary cache's format and the analysis
// options that change a Summary (step range, top names), as one line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulysses/profiler/cache_io.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/summary_cache.hpp"

namespace ulysses::prof::cache_io {

inline std::string make_key(const std::vector<std::string>& files, const LoadOptions& lo, const AnalysisOptions& ao,
                            bool lanes_matter, int64_t* newest_ns) {
  return make_key(files, lo, kSummaryCacheFormat,
                  "step_begin=" + std::to_string(ao.step_begin) + " step_end=" + std::to_string(ao.step_end) +
                      " top_names=" + std::to_string(ao.top_names) + "\n",
                  lanes_matter, newest_ns);
}

}  // namespace ulysses::prof::cache_io
