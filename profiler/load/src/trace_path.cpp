// The one classifier of trace paths (trace_path.hpp).
#include "ulysses/profiler/trace_path.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ulysses/profiler/sqlite_db.hpp"
#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::prof {

namespace fs = std::filesystem;

namespace {

void classify_folder(TracePath* t) {
  try {
    t->files = find_rank_files(t->path);
    if (!t->files.empty()) {
      t->kind = TracePathKind::RunFolder;
      return;
    }
  } catch (const TraceError& e) {  // a rank file named past the largest rank: ours, refused when read
    t->kind = TracePathKind::RunFolder;
    t->why = e.what();
    return;
  }
  t->files = find_foreign_files(t->path);
  t->kind = t->files.empty() ? TracePathKind::EmptyFolder : TracePathKind::ExportFolder;
}

void classify_file(TracePath* t) {
  t->files = {t->path};
  std::ifstream f(t->path, std::ios::binary);
  if (!f) {
    t->kind = TracePathKind::Unreadable;
    t->why = "cannot be opened for reading";
    return;
  }
  char hdr[16] = {};
  f.read(hdr, sizeof hdr);
  const auto got = f.gcount();
  if (got >= 2 && static_cast<unsigned char>(hdr[0]) == 0x1f && static_cast<unsigned char>(hdr[1]) == 0x8b) {
    t->kind = TracePathKind::Compressed;
  } else if (got == 16 && std::memcmp(hdr, "SQLite format 3", 16) == 0) {
    try {  // the one decision between our rank files and Nsight exports
      sql::Db db;
      t->kind = detail::validate_file(t->path, &db) == detail::FileKind::Ulysses ? TracePathKind::RankSqlite
                                                                                 : TracePathKind::NsysExport;
    } catch (const std::exception& e) {
      t->kind = TracePathKind::SqliteOther;
      t->why = e.what();
    }
  } else if (detail::looks_like_profiler_json(t->path)) {
    t->kind = TracePathKind::KinetoJson;
  } else {
    t->kind = TracePathKind::Other;
  }
}

}  // namespace

bool TracePath::trace_input() const {
  switch (kind) {
    case TracePathKind::RunFolder:
    case TracePathKind::ExportFolder:
    case TracePathKind::RankSqlite:
    case TracePathKind::NsysExport:
    case TracePathKind::SqliteOther:
    case TracePathKind::KinetoJson:
    case TracePathKind::Compressed:
      return true;
    default:
      return false;
  }
}

TracePath classify_trace_path(const std::string& path) {
  TracePath t;
  t.path = path;
  if (path.empty()) return t;
  std::error_code ec;
  t.symlink = fs::is_symlink(fs::symlink_status(path, ec));
  const fs::file_status st = fs::status(path, ec);  // the one existence check (follows links)
  if (ec || !fs::exists(st)) return t;
  if (fs::is_directory(st)) {
    classify_folder(&t);
  } else if (!fs::is_regular_file(st)) {
    t.files = {path};  // load_trace refuses it by name (a FIFO would block an open)
    t.kind = TracePathKind::Unreadable;
    t.why = "not a regular file (a FIFO, a socket or a device?)";
  } else {
    classify_file(&t);
  }
  return t;
}

const char* trace_path_kind_name(TracePathKind k) {
  switch (k) {
    case TracePathKind::Missing:
      return "missing";
    case TracePathKind::Unreadable:
      return "unreadable";
    case TracePathKind::RunFolder:
      return "run folder";
    case TracePathKind::ExportFolder:
      return "folder of exports";
    case TracePathKind::EmptyFolder:
      return "folder without traces";
    case TracePathKind::RankSqlite:
      return "Ulysses rank file";
    case TracePathKind::NsysExport:
      return "Nsight Systems export";
    case TracePathKind::SqliteOther:
      return "SQLite database";
    case TracePathKind::KinetoJson:
      return "PyTorch profiler trace";
    case TracePathKind::Compressed:
      return "compressed file";
    case TracePathKind::Other:
      return "other file";
  }
  return "?";
}

}  // namespace ulysses::prof
