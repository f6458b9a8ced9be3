// Test data library (ulysses::testdata): a small `nsys export --type sqlite` file written by
// hand with SQLite, shaped as real exports are (StringIds, CUPTI kernel and runtime tables with
// correlationId and globalPid, NVTX push/pop ranges, PROCESSES, TARGET_INFO_GPU), for tests of
// the importer, the CLI and the studio. Hostile rows are added with `extra_sql`. A few KB.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace ulysses::testdata {

struct TinyKernel {
  int64_t start = 0, end = 0;
  int device = 0, stream = 7;
  std::string name;
};

// Nsight's global ids: pid << 24, plus the tid for a thread.
inline int64_t nsys_global_pid(int64_t pid) { return pid << 24; }

// Writes `path` (replacing it): one process `pid` named `process` whose main thread launched
// each kernel (a cudaLaunchKernel runtime call 100 ns before it, same correlationId, numbered
// from 1) and holds one NVTX push/pop range "step" over all of them. `extra_sql` runs last.
inline void write_tiny_nsys(const std::string& path, int64_t pid, const std::vector<TinyKernel>& kernels,
                            const std::string& extra_sql = "", const std::string& process = "python3") {
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("cannot create " + path);
  std::string sql =
      "BEGIN;"
      "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);"
      "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25');"
      "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, "
      "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER);"
      "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, "
      "correlationId INTEGER, nameId INTEGER, returnValue INTEGER);"
      "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER, "
      "textId INTEGER);"
      "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);"
      "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT);"
      "INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel');";
  const int64_t gpid = nsys_global_pid(pid), gtid = gpid + pid;
  sql += "INSERT INTO PROCESSES VALUES (" + std::to_string(gpid) + ", " + std::to_string(pid) + ", '" + process + "');";
  int64_t lo = 0, hi = 0;
  int next_id = 2;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const TinyKernel& k = kernels[i];
    const int id = next_id++;
    const std::string corr = std::to_string(i + 1);
    sql += "INSERT INTO StringIds VALUES (" + std::to_string(id) + ", '" + k.name + "');";
    sql += "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(k.start) + ", " + std::to_string(k.end) +
           ", " + std::to_string(k.device) + ", 1, " + std::to_string(k.stream) + ", " + corr + ", " +
           std::to_string(gpid) + ", " + std::to_string(id) + ", " + std::to_string(id) + ");";
    sql += "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (" + std::to_string(k.start - 100) + ", " +
           std::to_string(k.start - 50) + ", 0, " + std::to_string(gtid) + ", " + corr + ", 1, 0);";
    sql += "INSERT INTO TARGET_INFO_GPU SELECT " + std::to_string(k.device) +
           ", 'NVIDIA H100' WHERE NOT EXISTS (SELECT 1 FROM TARGET_INFO_GPU WHERE id = " + std::to_string(k.device) +
           ");";
    lo = i == 0 ? k.start - 100 : std::min(lo, k.start - 100);
    hi = i == 0 ? k.end : std::max(hi, k.end);
  }
  if (!kernels.empty())
    sql += "INSERT INTO NVTX_EVENTS VALUES (" + std::to_string(lo) + ", " + std::to_string(hi) + ", 59, 'step', " +
           std::to_string(gtid) + ", NULL);";
  sql += extra_sql + "COMMIT;";
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("writing " + path + ": " + msg);
}

}  // namespace ulysses::testdata
