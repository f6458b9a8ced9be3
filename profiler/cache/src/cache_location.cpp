// Where a trace's caches live (cache_location.hpp).
#include "cache_location.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ulysses/profiler/sqlite_db.hpp"
#include "ulysses/profiler/trace_loading.hpp"

namespace fs = std::filesystem;

namespace ulysses::prof::cache_location {

bool own_trace(const std::vector<std::string>& files) {
  if (files.empty()) return false;
  for (const auto& f : files)
    if (detail::rank_in_file_name(f) < 0 || detail::looks_like_json(f)) return false;
  try {
    sql::Db db;
    return detail::validate_file(files.front(), &db) == detail::FileKind::Ulysses;
  } catch (...) {  // unreadable: not known to be ours, so nothing is written beside it
    return false;
  }
}

std::string user_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg && fs::path(xdg).is_absolute()) return (fs::path(xdg) / "ulysses" / "traces").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "ulysses" / "traces").string();
  return "";
}

std::string cache_file(const std::string& trace_path, const std::vector<std::string>& files,
                       const std::string& suffix) {
  if (files.empty()) return "";
  std::error_code ec;
  const bool dir = fs::is_directory(trace_path, ec);
  const fs::path first(files.front());
  if (own_trace(files))
    return dir ? (first.parent_path() / ("" + suffix)).string()
               : (first.parent_path() / ("." + first.filename().string() + suffix)).string();
  const std::string base = user_cache_dir();
  if (base.empty()) return "";
  // Keyed by the absolute path (FNV-1a 64); the name is kept for whoever lists the folder.
  fs::path abs = fs::absolute(fs::path(trace_path), ec);
  if (ec) abs = trace_path;
  abs = abs.lexically_normal();
  std::string key = abs.string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  const std::string name = fs::path(key).filename().string();
  fs::create_directories(base, ec);  // written there later; a failure just means no cache
  return (fs::path(base) / (std::string(hex) + "-" + name + suffix)).string();
}

}  // namespace ulysses::prof::cache_location
