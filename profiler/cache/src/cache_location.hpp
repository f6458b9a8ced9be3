// Where a trace's caches (summary, overview) live. Our own traces (a run folder, its trace
// folder, one rank*.sqlite that is a Ulysses trace) keep them beside their files, as before.
// Anything else (an Nsight Systems export, a PyTorch profiler trace, a folder of them) belongs
// to the user and is left exactly as it was: its caches go to the user's cache folder,
// $XDG_CACHE_HOME/ulysses/traces (default ~/.cache/ulysses/traces), one file per trace path
// named by a hash of the absolute path and the trace's name; the cache's key (inside the file)
// holds each input's size, mtime and inode, so a changed file is never read from a stale cache.
#pragma once

#include <string>
#include <vector>

namespace ulysses::prof::cache_location {

// Whether the trace is ours: every input file named rank<N>.sqlite and the first one a
// Ulysses trace (not an nsys export under that name). `files` as trace_input_files gives them.
bool own_trace(const std::vector<std::string>& files);

// The user's cache folder for traces ("" when neither XDG_CACHE_HOME nor HOME is set).
std::string user_cache_dir();

// The cache file for `trace_path` with this suffix (".ulysses-summary-cache"): beside the
// files for our own traces, else in user_cache_dir(). "" when there are no input files.
std::string cache_file(const std::string& trace_path, const std::vector<std::string>& files, const std::string& suffix);

}  // namespace ulysses::prof::cache_location
