// What a path given to the loader is (load room; no torch, no Qt): the one place that checks
// a trace path's existence and decides its kind, for load_trace, the caches, ulysses-trace and
// the studio. A symbolic link is followed (its target decides the kind).
#pragma once

#include <string>
#include <vector>

namespace ulysses::prof {

enum class TracePathKind {
  Missing,       // nothing there (a dangling symbolic link too)
  Unreadable,    // there, but not a file that can be read (no permission, a FIFO, a socket, a device)
  RunFolder,     // a folder of Ulysses rank files (RUN/trace/rank*.sqlite or rank*.sqlite)
  ExportFolder,  // a folder of Nsight Systems exports and/or PyTorch profiler traces, no rank files
  EmptyFolder,   // a folder without trace files
  RankSqlite,    // one Ulysses rank file
  NsysExport,    // one `nsys export --type sqlite` file
  SqliteOther,   // an SQLite database of neither kind, or one that cannot be read (the loader says why)
  KinetoJson,    // one PyTorch profiler (Kineto) JSON trace
  Compressed,    // a gzip-compressed file (the loader says to unpack it)
  Other,         // a file of none of these kinds
};

struct TracePath {
  std::string path;
  TracePathKind kind = TracePathKind::Missing;
  bool symlink = false;            // the path itself is a symbolic link
  std::vector<std::string> files;  // what load_trace reads, in its order (trace_input_files)
  std::string why;                 // for RunFolder without files, SqliteOther, Unreadable: the reason

  bool folder() const {
    return kind == TracePathKind::RunFolder || kind == TracePathKind::ExportFolder ||
           kind == TracePathKind::EmptyFolder;
  }
  // load_trace reads it as a trace (or says what is wrong with it): is_trace_input.
  bool trace_input() const;
};

// The path's kind, decided by content, never by name. Never throws. A single SQLite file is
// opened read-only to tell a rank file from an Nsight export (detail::validate_file).
TracePath classify_trace_path(const std::string& path);

// "run folder", "Nsight Systems export", ... (for messages and tests).
const char* trace_path_kind_name(TracePathKind k);

}  // namespace ulysses::prof
