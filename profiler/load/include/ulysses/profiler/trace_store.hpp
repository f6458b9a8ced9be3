// Reading traces: load a run directory (RUN/trace/rank*.sqlite), one rank's .sqlite, an
// `nsys export --type sqlite` file or PyTorch profiler JSON (one file or a folder) into a
// TraceModel. The schema version and text the writer uses (profiler/schema.sql, embedded at
// build time) are in schema.hpp, the options and the error in load_options.hpp; both are
// included here. No torch, no Qt.
#pragma once

#include <string>
#include <vector>

#include "ulysses/profiler/load_options.hpp"
#include "ulysses/profiler/schema.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::prof {

// The rank files of a run directory: RUN/trace/rank*.sqlite sorted by rank number, or
// RUN/rank*.sqlite when RUN is itself the trace folder. Empty when none.
std::vector<std::string> find_rank_files(const std::string& run_dir);

// Foreign traces in a folder: *.sqlite (Nsight Systems exports), *.json (PyTorch profiler),
// any file name, in natural name order ("rank2" before "rank10"). Empty when none.
std::vector<std::string> find_foreign_files(const std::string& dir);

// The files load_trace(path) reads, in its order: a folder's rank files, else its foreign
// traces; a file itself. Empty when the path is missing or a folder without traces.
std::vector<std::string> trace_input_files(const std::string& path);

// Whether `path` is a foreign trace load_trace reads: a PyTorch profiler .json (not a run
// config), or a folder of such files / Nsight Systems exports without Ulysses rank files.
bool is_foreign_trace(const std::string& path);

// Whether load_trace(path) reads `path` as a trace, by content, not by name: a file that is an
// SQLite database, a PyTorch profiler JSON or gzip-compressed (the loader says to unpack it),
// or a folder with trace files (trace_input_files). The studio's test for "open as a trace",
// so that it takes what ulysses-trace takes (a .json that is an Nsight export, a folder of
// Nsight exports named rank0.sqlite, rank1.sqlite).
bool is_trace_input(const std::string& path);

// path = run directory, a single rank .sqlite, an nsys-exported .sqlite, a PyTorch profiler
// .json, or a folder of nsys exports / profiler traces (one per rank, any file names).
// Throws TraceError on missing/corrupt/empty/truncated/future-version input.
TraceModel load_trace(const std::string& path);
TraceModel load_trace(const std::string& path, const LoadOptions& opts);

}  // namespace ulysses::prof
