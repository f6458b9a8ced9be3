// What every trace cache's key and switch share (rank-file, summary and overview caches): the
// profiler build id and ULYSSES_TRACE_NO_CACHE. The load room (profiler/README.md), whose
// rank-file caches are the lowest user; summary_cache.hpp includes it. No torch, no Qt.
#pragma once

namespace ulysses::prof {

// A hash of the sources of every profiler library (profiler/*/src, profiler/*/include,
// schema.sql: build_id.cmake), fixed at build time.
const char* profiler_build_id();

// Whether ULYSSES_TRACE_NO_CACHE disables the trace caches.
bool summary_cache_disabled_by_env();

}  // namespace ulysses::prof
