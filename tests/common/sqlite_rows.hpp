// Test helper: every row of a read-only SQL query on a trace file, integer columns (a test's
// own SQL, independent of the profiler's reader). A file or query that fails is a test failure.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ulysses::test {

inline std::vector<std::vector<int64_t>> sql_rows(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::vector<std::vector<int64_t>> out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << path;
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << ": " << sql;
    sqlite3_close(db);
    return out;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    std::vector<int64_t> r;
    for (int c = 0; c < sqlite3_column_count(st); ++c) r.push_back(sqlite3_column_int64(st, c));
    out.push_back(r);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

}  // namespace ulysses::test
