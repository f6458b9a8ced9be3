// Loading traces into a TraceModel: a run directory (RUN/trace/rank*.sqlite), one rank's
// file, an `nsys export --type sqlite` file or PyTorch profiler JSON. This file holds the
// dispatch: load_trace (the path classified once, a folder's inputs checked) and read_file (a
// file to its reader by content). The readers (native_reader.cpp, nsys_reader.cpp,
// kineto_reader.cpp), the post-processing (trace_assembly.cpp), file checks and lane building
// live beside it (see trace_loading.hpp).
#include "ulysses/profiler/trace_store.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_loading.hpp"
#include "ulysses/profiler/nsys_ids.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/common/run_record.hpp"
#include "ulysses/profiler/trace_path.hpp"

namespace fs = std::filesystem;

namespace ulysses::prof {

namespace {

using namespace detail;

}  // namespace

void detail::read_file(Builder& b, const std::string& path, int32_t file_index, const LoadOptions& opts) {
  // The kind comes from the content (JSON or SQLite), whatever the name says; a name that says
  // otherwise is noted, so that a renamed file is no surprise.
  const std::string fname = fs::path(path).filename().string();
  auto named = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return fname.size() >= n && fname.compare(fname.size() - n, n, suffix) == 0;
  };
  if (looks_like_json(path)) {
    if (named(".sqlite") || named(".db") || named(".sqlite3"))
      b.m.notes.push_back(fname + ": holds JSON, not SQLite: read as a PyTorch profiler trace");
    return read_kineto_file(b, path, file_index, opts);
  }
  sql::Db db;
  FileKind kind = validate_file(path, &db);
  if (named(".json"))
    b.m.notes.push_back(fname + ": is an SQLite database, not JSON: read as " +
                        (kind == FileKind::Nsys ? "an Nsight Systems export" : "a Ulysses rank trace"));
  if (kind == FileKind::Nsys) return read_nsys_file(b, db, path, file_index, opts);
  read_native_file(b, db, path, file_index, opts, kind, fname);
}

namespace {

// Whether two files hold the same bytes (the second of a pair of equal sizes: read only then).
bool same_file_content(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;  // a hard link or a symlink to the other
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::vector<char> x(1 << 16), y(1 << 16);
  while (fa && fb) {
    fa.read(x.data(), static_cast<std::streamsize>(x.size()));
    fb.read(y.data(), static_cast<std::streamsize>(y.size()));
    if (fa.gcount() != fb.gcount() || std::memcmp(x.data(), y.data(), static_cast<size_t>(fa.gcount())) != 0)
      return false;
  }
  return !fa && !fb;
}

std::string folder_file_name(const std::string& p) { return fs::path(p).filename().string(); }

}  // namespace

// A folder's inputs before any is read: the same trace twice (a copy counted its ranks twice)
// and traces of two tools (a PyTorch profiler JSON beside an Nsight export: one of them was
// passed over unsaid) are refused, naming the files; trace files a run folder's rank files
// leave unread are named in a note.
static void check_folder_inputs(const std::string& dir, const std::vector<std::string>& files,
                                std::vector<std::string>* notes) {
  std::error_code ec;
  // Copies: files of one size compared byte for byte (distinct sizes cost nothing). A run's own
  // rank<N>.sqlite files are left to the rank check ("two trace files claim rank N"): two ranks
  // killed before their first step leave byte-identical files that are no copy.
  const std::vector<std::string> own = find_rank_files(dir);
  std::map<std::uintmax_t, std::vector<std::string>> by_size;
  for (const auto& f : files)
    if (fs::is_regular_file(f, ec) && std::find(own.begin(), own.end(), f) == own.end())
      by_size[fs::file_size(f, ec)].push_back(f);
  for (const auto& [size, same] : by_size)
    for (size_t i = 0; i < same.size() && size > 0; ++i)
      for (size_t j = i + 1; j < same.size(); ++j)
        if (same_file_content(same[i], same[j]))
          throw TraceError("'" + dir + "' holds the same trace twice: " + folder_file_name(same[i]) + " and " +
                           folder_file_name(same[j]) +
                           " have the same content (a copy?); its ranks would count twice. Remove one of them");
  // Two tools: JSON (PyTorch profiler) beside SQLite (Nsight Systems export, Ulysses trace).
  std::string a_json, a_sqlite;
  for (const auto& f : files) {
    if (detail::looks_like_json(f)) {
      if (a_json.empty()) a_json = f;
    } else if (detail::has_sqlite_header(f) && a_sqlite.empty()) {
      a_sqlite = f;
    }
  }
  if (!a_json.empty() && !a_sqlite.empty())
    throw TraceError("'" + dir + "' mixes a PyTorch profiler trace (" + folder_file_name(a_json) +
                     ") and an SQLite trace (" + folder_file_name(a_sqlite) +
                     "): they would be read as ranks of one run. Keep one tool's traces in the folder (move the others "
                     "to a folder of their own)");
  // Rank files beside foreign traces in the same folder: the rank files are read, the others named.
  const std::vector<std::string> ranks = find_rank_files(dir);
  if (!ranks.empty() && fs::path(ranks.front()).parent_path() == fs::path(dir)) {
    std::string unread;
    int n = 0;
    for (const auto& f : find_foreign_files(dir))
      if (std::find(files.begin(), files.end(), f) == files.end() && ++n <= 4)
        unread += (unread.empty() ? "" : ", ") + folder_file_name(f);
    if (n > 0)
      notes->push_back(unread + (n > 4 ? " and " + std::to_string(n - 4) + " more" : std::string()) +
                       (n == 1 ? " is" : " are") +
                       " in the folder but not read: its trace is its rank<N>.sqlite files (open the other file on "
                       "its own)");
  }
}

// Rank files that are one Nsight Systems export copied under several names (rank0.sqlite and
// rank1.sqlite of one profile read as two ranks, issue 54): each copy is left out with a note.
// Ulysses rank files are not compared here: ranks killed before their first step leave
// byte-identical files that are no copy, and the rank check names real duplicates.
// (Copies under other names are refused by check_folder_inputs.)
static void drop_copied_exports(const std::string& dir, std::vector<std::string>& files,
                                std::vector<std::string>* notes) {
  if (files.size() < 2) return;
  const std::vector<std::string> own = find_rank_files(dir);
  std::error_code ec;
  auto is_ulysses = [](const std::string& f) {
    // A rank killed mid-run leaves its pages in the write-ahead log, which immutable=1 does not
    // read: its main file can then equal another rank's byte for byte without being a copy.
    std::error_code wal_ec;
    if (fs::file_size(f + "-wal", wal_ec) > 0 && !wal_ec) return true;
    try {
      sql::Db db(sqlite_uri(f) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI);
      return db.has_table("ULYSSES_RUN") || db.has_table("ULYSSES_RANKS");
    } catch (const std::exception&) {
      return true;  // unreadable: left to the reader, which names it
    }
  };
  std::vector<std::string> kept;
  for (const auto& f : files) {
    const std::string* original = nullptr;
    if (std::find(own.begin(), own.end(), f) != own.end() && detail::has_sqlite_header(f) && !is_ulysses(f))
      for (const auto& k : kept)
        if (fs::file_size(k, ec) == fs::file_size(f, ec) && same_file_content(k, f)) {
          original = &k;
          break;
        }
    if (!original) {
      kept.push_back(f);
      continue;
    }
    notes->push_back(folder_file_name(f) + " is a byte-for-byte copy of " + folder_file_name(*original) +
                     " (one Nsight Systems export under two names): left out, its processes would count as "
                     "another rank's");
  }
  files = kept;
}

std::vector<std::string> trace_input_files(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return {};
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files = find_rank_files(path);
  if (files.empty()) files = find_foreign_files(path);
  return files;
}

TraceModel load_trace(const std::string& path) { return load_trace(path, LoadOptions{}); }

TraceModel load_trace(const std::string& path, const LoadOptions& opts) {
  std::error_code ec;
  if (path.empty()) throw TraceError("no trace path given");
  const TracePath tp = classify_trace_path(path);  // its existence and kind, checked once
  if (tp.kind == TracePathKind::Missing) {
    throw TraceError("'" + path + "' does not exist (expected a run directory or a .sqlite trace)");
  }
  if (tp.kind == TracePathKind::RunFolder && tp.files.empty()) throw TraceError(tp.why);  // a rank past the largest
  std::vector<std::string> files = tp.files;
  const bool folder = tp.folder();
  if (folder) {
    if (files.empty()) {
      // The *.json files that were passed over, and why: "nor PyTorch profiler traces" next to
      // an empty rank0.json left the user guessing.
      std::vector<std::pair<std::string, bool>> jsons;    // name, empty
      if (!fs::exists(run_layout::run_record(path), ec))  // a run folder's config.json is no trace
        for (const auto& e : fs::directory_iterator(path, ec)) {
          const std::string name = e.path().filename().string();
          if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 && e.is_regular_file(ec))
            jsons.emplace_back(name, e.file_size(ec) == 0);
        }
      std::sort(jsons.begin(), jsons.end());
      std::string passed_over;
      for (size_t i = 0; i < jsons.size() && i < 4; ++i)
        passed_over += (i ? ", " : "") + jsons[i].first +
                       (jsons[i].second ? " is empty" : " is not a profiler trace (no traceEvents)");
      if (jsons.size() > 4) passed_over += ", and " + std::to_string(jsons.size() - 4) + " more";
      // A run folder says why, where it can: profiling off in its config.json, or a run that
      // ended before a rank wrote its trace (stopped at start-up: "was the run started with
      // profile.enabled = true?" when it was).
      std::string why = "was the run started with profile.enabled = true?";
      auto small_json = [&](const char* name) {
        const fs::path f = fs::path(path) / name;
        std::error_code e;
        if (!fs::is_regular_file(f, e) || fs::file_size(f, e) > (1u << 20)) return nlohmann::json();
        std::ifstream in(f, std::ios::binary);
        nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        return j.is_object() ? j : nlohmann::json();
      };
      const nlohmann::json cfg = small_json(run_layout::kConfig);
      const RunRecordFile rec = read_run_record_file(run_layout::run_record(path).string());
      const nlohmann::json* prof = cfg.contains("profile") && cfg["profile"].is_object() ? &cfg["profile"] : nullptr;
      if (prof && prof->contains("enabled") && (*prof)["enabled"] == false)
        why = "profiling was off: profile.enabled = false in its config.json";
      else if (rec.status_known && rec.record.status != RunStatus::Finished)
        why = "the run's status is " + to_string(rec.record.status) + ": it ended before a rank wrote its trace?";
      throw TraceError("'" + path + "' holds no trace files (expected " +
                       (run_layout::trace_dir(path) / "rank*.sqlite").string() + "; " + why +
                       "), nor Nsight Systems exports (*.sqlite) nor PyTorch profiler traces (*.json)" +
                       (passed_over.empty() ? std::string() : ": " + passed_over));
    }
  }
  Builder b;
  b.m.source = path;
  if (folder) {
    drop_copied_exports(path, files, &b.m.notes);
    check_folder_inputs(path, files, &b.m.notes);
  }
  std::map<int32_t, std::string> claimed;  // rank -> the file that holds it
  const bool rank_folder = files.size() > 1 && tp.kind == TracePathKind::RunFolder;
  if (opts.stats) opts.stats->files += static_cast<int>(files.size());
  const bool parallel = !opts.legacy && rank_folder && read_rank_files_parallel(b, files, opts, claimed);
  if (!parallel) claimed.clear();
  for (size_t i = 0; i < files.size() && !parallel; ++i) {
    const size_t before = b.m.ranks.size();
    const detail::TimedMarks since = detail::TimedMarks::of(b.m);  // what this file adds is converted at import
    read_file(b, files[i], static_cast<int32_t>(i), opts);
    if (opts.align_clocks) align_to_rank0(b.m, since);
    // A run folder must hold each rank once: two files claiming one rank, or a rank
    // without a file, is reported instead of read silently.
    if (b.m.format != "ulysses") continue;
    for (size_t k = before; k < b.m.ranks.size(); ++k) {
      const int32_t r = b.m.ranks[k].rank;
      auto [it, fresh] = claimed.emplace(r, files[i]);
      if (!fresh)
        throw TraceError("two trace files claim rank " + std::to_string(r) + ": " + it->second + " and " + files[i] +
                         "; remove the stray copy");
    }
  }
  if (b.m.format == "ulysses" && folder && !claimed.empty()) {
    // A file named rank<N>.sqlite holds rank N: one claiming rank 5 was reported as "ranks 1-4
    // missing" (of 6), two that swapped their claims passed unnoticed.
    for (const auto& [r, file] : claimed) {
      if (const int32_t named = rank_in_file_name(file); named >= 0 && named != r)
        throw TraceError(describe(file) + " is named for rank " + std::to_string(named) + " but holds rank " +
                         std::to_string(r) +
                         " (ULYSSES_RANKS): renamed, or edited? Each rank<N>.sqlite must hold rank N");
    }
    const int64_t world = std::max<int64_t>(int64_t{b.m.sp_size} * b.m.dp_size, claimed.rbegin()->first + int64_t{1});
    std::string missing;
    int64_t n_missing = 0;
    for (int64_t r = 0; r < world && r < (int64_t{1} << 20); ++r)
      if (!claimed.count(static_cast<int32_t>(r)) && ++n_missing <= 8)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (n_missing > 0) {
      std::string left_out;  // files of another run, left out above: often the missing rank's
      for (const std::string& n : b.m.notes)
        if (n.find(kLeftOutOfAnotherRun) != std::string::npos) left_out += "; " + n;
      throw TraceError(path + ": the trace of rank(s) " + missing +
                       (n_missing > 8 ? " and " + std::to_string(n_missing - 8) + " more" : "") +
                       " is missing (the run had " + std::to_string(world) + " ranks; expected " +
                       (run_layout::trace_dir(path) / "rank<r>.sqlite").string() + " for each)" + left_out);
    }
    // The run folder's record of the run against its trace: a run.json of another world size
    // (another run's, or a trace copied in) was passed over unsaid.
    const fs::path record = run_layout::run_record(path);
    const RunRecordFile rec = read_run_record_file(record.string());
    if (rec.record.world_size > 0 && rec.record.world_size != world)
      b.m.notes.push_back(describe(record.string()) + " says world_size " + std::to_string(rec.record.world_size) +
                          ", but the trace files are of a run of " + std::to_string(world) +
                          " ranks: run.json is another run's, or the trace was copied in");
  }
  finish_model(b, opts);
  if (opts.seal) b.m.ranges.seal(opts.legacy ? 1 : opts.threads);
  return std::move(b.m);
}

}  // namespace ulysses::prof
