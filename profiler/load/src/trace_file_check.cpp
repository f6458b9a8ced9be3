// File checks before a trace is read: finds a run's rank files and validates one file
// (missing, a directory, empty, not SQLite, truncated, written by a newer version, neither a
// Ulysses trace nor an nsys export) with a message that names the file and what to do.
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/profiler/trace_path.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace fs = std::filesystem;

namespace ulysses::prof {

std::vector<std::string> find_rank_files(const std::string& run_dir) {
  std::vector<std::pair<int32_t, std::string>> found;
  for (const fs::path& dir : {run_layout::trace_dir(run_dir), fs::path(run_dir)}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (const int32_t r = detail::rank_in_file_name(e.path().string()); r >= 0)
        found.emplace_back(r, e.path().string());
    if (!found.empty()) break;
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::vector<std::string> find_foreign_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    auto ends = [&](const char* suf) {
      const std::string x(suf);
      return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
    };
    const bool trace_name = ends(".sqlite") || ends(".sqlite.gz") || ends(".json.gz") || ends(".json");
    if (!e.is_regular_file(ec)) {
      // A FIFO, socket or device named like a trace is listed, so that loading refuses it by
      // name (validate_file) instead of dropping that rank without a word.
      if (trace_name && !e.is_directory(ec)) out.push_back(e.path().string());
      continue;
    }
    // Profiler JSON only when it looks like one (a run folder's config.json does not);
    // compressed traces are listed so that loading says to unpack them.
    // A .json that is in fact an SQLite database (an export renamed) is a trace, read by content.
    if (trace_name && (!ends(".json") || detail::looks_like_profiler_json(e.path().string()) ||
                       detail::has_sqlite_header(e.path().string())))
      out.push_back(e.path().string());
  }
  // Natural order: "rank2" before "rank10".
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
        size_t i2 = i, j2 = j;
        while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
        while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
        const std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
        if (x.size() != y.size()) return x.size() < y.size();
        if (x != y) return x < y;
        i = i2;
        j = j2;
      } else {
        if (a[i] != b[j]) return a[i] < b[j];
        ++i;
        ++j;
      }
    }
    return a.size() - i < b.size() - j;
  });
  return out;
}

bool is_foreign_trace(const std::string& path) {
  const TracePathKind k = classify_trace_path(path).kind;
  return k == TracePathKind::ExportFolder || k == TracePathKind::KinetoJson;
}

bool is_trace_input(const std::string& path) { return classify_trace_path(path).trace_input(); }

namespace detail {

bool has_sqlite_header(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;  // a FIFO would block the open
  std::ifstream f(path, std::ios::binary);
  char hdr[16] = {};
  f.read(hdr, sizeof hdr);
  return f.gcount() == 16 && std::memcmp(hdr, "SQLite format 3", 16) == 0;
}

std::string sqlite_uri(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "file:";
  for (const unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string describe_content(const std::string& head) {
  if (head.empty()) return "no bytes";
  size_t printable = 0;
  for (const unsigned char c : head)
    printable += (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t' || c >= 0x80;
  if (printable == head.size()) {
    std::string start;
    for (const unsigned char c : head.substr(0, 24))
      start += c == '\n' || c == '\r' || c == '\t' ? ' ' : c >= 0x80 ? '?' : static_cast<char>(c);
    return "a text file starting \"" + start + (head.size() > 24 ? "..." : "") + "\"";
  }
  static const char* hex = "0123456789abcdef";
  std::string bytes;
  for (size_t i = 0; i < head.size() && i < 4; ++i) {
    const auto c = static_cast<unsigned char>(head[i]);
    bytes += std::string(i ? " " : "") + hex[c >> 4] + hex[c & 15];
  }
  return "binary data starting " + bytes;
}

size_t json_text_start(const std::string& head) {
  // A UTF-8 byte order mark (Windows editors write one) may come first; the JSON parser skips it too.
  const size_t from = head.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  return head.find_first_not_of(" \t\r\n", from);
}

bool looks_like_profiler_json(const std::string& path) {
  if (!looks_like_json(path)) return false;  // false for anything but a regular file, too
  std::ifstream f(path, std::ios::binary);
  std::string head(65536, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  const size_t first = json_text_start(head);
  if (first != std::string::npos && head[first] == '[') {  // legacy profiler: an array of event objects
    // ...not any array: a run folder's run.json or config.json holding [1, 2] would make the
    // folder a "profiler trace folder" and hide the run.
    const size_t next = head.find_first_not_of(" \t\r\n", first + 1);
    return next == std::string::npos || head[next] == '{' || head[next] == ']';
  }
  // Kineto writes these keys first; a run's config.json / run.json has none of them.
  return head.find("\"traceEvents\"") != std::string::npos || head.find("\"schemaVersion\"") != std::string::npos ||
         head.find("\"distributedInfo\"") != std::string::npos;
}

int32_t rank_in_file_name(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const std::string prefix = run_layout::kRankPrefix, suffix = run_layout::kTraceSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  int64_t n = 0;
  for (const char c : digits) {
    n = n * 10 + (c - '0');
    if (n > INT32_MAX)
      throw TraceError(describe(path) + " is named for rank " + digits +
                       ", past the largest rank (2147483647): rename it rank<N>.sqlite with N the rank it holds");
  }
  return static_cast<int32_t>(n);
}

namespace {
// The file's first 100 bytes: not compressed, an SQLite database (else what it is said by what
// it holds), and as long as its header says (without a WAL). Throws TraceError.
void check_sqlite_header(const std::string& path, uintmax_t size) {
  std::error_code ec;
  std::ifstream f(path, std::ios::binary);
  unsigned char hdr[100] = {};
  f.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  if (hdr[0] == 0x1f && hdr[1] == 0x8b) {
    // By content: a gzip file named .json or .sqlite cannot be given to gunzip as it is.
    const bool gz_name = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    throw TraceError(describe(path) + " is gzip-compressed: unpack it first (" +
                     (gz_name ? "gunzip -k '" + path + "'" : "gzip -dc '" + path + "' > '" + path + ".unpacked'") +
                     ")");
  }
  if (hdr[0] == 0x28 && hdr[1] == 0xb5 && hdr[2] == 0x2f && hdr[3] == 0xfd)
    throw TraceError(describe(path) + " is zstd-compressed: unpack it first (zstd -d -k '" + path + "')");
  if (!f || std::memcmp(hdr, "SQLite format 3", 16) != 0) {
    // Said by what the file holds, not by its name: a text file was "not an SQLite
    // database" whatever it was meant to be.
    const std::string head(reinterpret_cast<const char*>(hdr), static_cast<size_t>(f.gcount()));
    if (looks_like_json(path))
      throw TraceError(describe(path) + " is JSON, not an SQLite database" +
                       (looks_like_profiler_json(path) ? std::string(" (a PyTorch profiler trace?)") : std::string()) +
                       ": expected a RUN/trace/rank*.sqlite file or an 'nsys export --type sqlite' file");
    throw TraceError(describe(path) + " is neither JSON nor an SQLite database (" + describe_content(head) +
                     "): expected a PyTorch profiler trace (.json), an 'nsys export --type sqlite' file or a "
                     "RUN/trace/rank*.sqlite file");
  }
  // Database header: page size (offset 16), size in pages (28) valid when the change
  // counter (24) equals version-valid-for (92). Without a WAL the file must hold them all.
  auto be32 = [&](int o) {
    return (uint32_t(hdr[o]) << 24) | (uint32_t(hdr[o + 1]) << 16) | (uint32_t(hdr[o + 2]) << 8) | hdr[o + 3];
  };
  uint64_t page_size = (uint32_t(hdr[16]) << 8) | hdr[17];
  if (page_size == 1) page_size = 65536;
  uint64_t pages = be32(28);
  if (be32(24) == be32(92) && !fs::exists(path + "-wal", ec) && page_size * pages > size) {
    throw TraceError(describe(path) + " is truncated (" + std::to_string(size) + " of " +
                     std::to_string(page_size * pages) + " bytes); it was cut short while copying or writing");
  }
}

// Opens the database read-only; a file whose -wal holds nothing is read as immutable. Sets *uv
// to its user_version.
sql::Db open_trace_db(const std::string& path, int64_t* uv) {
  std::error_code ec;
  sql::Db db;
  try {
    db = sql::Db(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
    *uv = db.query_int("PRAGMA user_version");
  } catch (const sql::Busy&) {
    throw;
  } catch (const std::exception& first) {
    // A hot rollback journal (a writer killed mid-transaction, its uncommitted pages already in
    // the file): SQLite rolls it back only on a connection that may write, so the read-only
    // open fails. Read as immutable, the file would give the uncommitted data: refused instead (a
    // reader never writes a trace, so it does not roll back itself).
    if (const auto journal = fs::file_size(path + "-journal", ec); !ec && journal > 0)
      throw TraceError(describe(path) + " has an unfinished transaction (" +
                       fs::path(path + "-journal").filename().string() +
                       ", left by a writer that stopped mid-write): open it once with sqlite3 in a writable folder "
                       "to roll it back (sqlite3 '" +
                       path + "' 'PRAGMA quick_check'), then read it again");
    // A WAL-mode file (a trace of an earlier build, an nsys export) needs its -shm created
    // even to be read; on a read-only mount or a full disk that fails ("unable to open
    // database file", "disk I/O error"). With no -wal frames there is nothing such a file
    // could be missing, and it is read as immutable: SQLite then creates nothing beside it.
    const auto wal = fs::file_size(path + "-wal", ec);
    if (!ec && wal > 0)
      throw std::runtime_error(std::string(first.what()) + "; its -wal holds " + std::to_string(wal) +
                               " bytes not yet in the file, which SQLite reads only where it can write beside "
                               "the trace: copy the .sqlite and its -wal to a writable folder");
    db = sql::Db(sqlite_uri(path) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI);
    *uv = db.query_int("PRAGMA user_version");
  }
  return db;
}

// Which trace the database is, by its tables; a Ulysses trace must have every table its reader
// reads. Throws TraceError.
FileKind trace_db_kind(sql::Db& db, const std::string& path, int64_t uv) {
  FileKind kind;
  if (db.has_table("ULYSSES_RANGES") || db.has_table("ULYSSES_RUN") || db.has_table("ULYSSES_RANKS") ||
      db.has_table("ULYSSES_STEPS")) {
    kind = FileKind::Ulysses;
    // Every table the reader reads: without one a rank would lose its ranges (NVTX_EVENTS
    // renamed), the file would pass for an Nsight Systems export (ULYSSES_RANGES and
    // ULYSSES_STEPS dropped) or its clock would go unaligned (ULYSSES_CLOCK, format 3 on), each
    // without a word.
    std::vector<std::string> missing;
    for (const char* t : {"NVTX_EVENTS", "ULYSSES_RUN", "ULYSSES_RANKS", "ULYSSES_STEPS", "ULYSSES_MEMORY"})
      if (!db.has_table(t)) missing.emplace_back(t);
    if (uv >= 3 && !db.has_table("ULYSSES_CLOCK")) missing.emplace_back("ULYSSES_CLOCK");
    if (uv < 4 && !db.has_table("ULYSSES_RANGES")) missing.emplace_back("ULYSSES_RANGES");
    if (!missing.empty()) {
      std::string list;
      for (const auto& t : missing) list += (list.empty() ? "" : ", ") + t;
      throw TraceError(describe(path) + " is a Ulysses trace without the table(s) " + list + " (trace format " +
                       std::to_string(uv) +
                       "): it was edited or damaged; use the rank file "
                       "as ulysses-run wrote it");
    }
  } else if (db.has_table("NVTX_EVENTS") || db.has_table("CUPTI_ACTIVITY_KIND_KERNEL") ||
             db.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") || db.has_table("META_DATA_EXPORT") ||
             db.has_table("EXPORT_META_DATA")) {  // an export without kernels or NVTX is still one
    kind = FileKind::Nsys;
  } else {
    throw TraceError(describe(path) +
                     " is an SQLite database but not a Ulysses trace or an Nsight Systems "
                     "export (it has neither ULYSSES_RANGES nor NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL)");
  }
  return kind;
}
}  // namespace

// Checks a file before SQLite reads it; returns its kind. Throws TraceError.
FileKind validate_file(const std::string& path, sql::Db* out_db) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw TraceError(describe(path) + " does not exist");
  if (fs::is_directory(path, ec)) throw TraceError("'" + path + "' is a directory without trace files");
  require_regular_file(path);
  auto size = fs::file_size(path, ec);
  if (ec) throw TraceError("cannot read " + describe(path) + ": " + ec.message());
  if (size == 0) throw TraceError(describe(path) + " is empty (the rank may have died before writing anything)");
  check_sqlite_header(path, size);
  try {
    int64_t uv = 0;
    sql::Db db = open_trace_db(path, &uv);
    if (uv > trace_schema_version()) {
      throw TraceError(describe(path) + " was written by a newer Ulysses Studio (trace format " + std::to_string(uv) +
                       "; this build reads up to format " + std::to_string(trace_schema_version()) +
                       "): update ulysses-trace / ulysses-studio");
    }
    const FileKind kind = trace_db_kind(db, path, uv);
    *out_db = std::move(db);
    return kind;
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw_unreadable(path, e);
  }
}

}  // namespace detail
}  // namespace ulysses::prof
