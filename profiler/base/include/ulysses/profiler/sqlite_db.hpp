// Thin RAII wrappers over the SQLite C API (connection, prepared statement) used by the
// trace writer and loader. Errors throw std::runtime_error carrying sqlite's message.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace ulysses::prof::sql {

// How long a connection waits for another one's lock before it gives up: a second reader
// rebuilding the WAL index of a file another process is opening too, a writer's checkpoint.
// Without it a trace opened by two tools at once (the studio and `ulysses-trace prepare`)
// failed at once with "database is locked".
constexpr int kBusyTimeoutMs = 10000;

// What a statement throws when the file stayed locked for kBusyTimeoutMs (SQLITE_BUSY /
// SQLITE_LOCKED); every other SQLite error is a plain std::runtime_error.
struct Busy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Db {
 public:
  Db() = default;
  // flags: SQLITE_OPEN_* ; throws on failure.
  Db(const std::string& path, int flags);
  ~Db();
  Db(Db&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* get() const { return db_; }
  void set_busy_timeout_ms(int ms);
  void exec(const std::string& sql);
  // First column of the first row as int64 (0 when no row).
  int64_t query_int(const std::string& sql);
  bool has_table(const std::string& name);
  bool has_column(const std::string& table, const std::string& column);
  std::string errmsg() const;
  void close();

 private:
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  Stmt() = default;
  Stmt(const Db& db, const std::string& sql);
  ~Stmt();
  Stmt(Stmt&& o) noexcept : st_(o.st_), db_(o.db_) { o.st_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void bind(int i, int64_t v);
  void bind(int i, double v);
  void bind(int i, const std::string& v);
  void bind_null(int i);
  // true: a row is ready; false: done. Throws on error.
  bool step();
  // step() for statements without result rows, then reset().
  void run();
  void reset();

  int64_t i64(int col) const;
  double f64(int col) const;
  std::string text(int col) const;
  bool is_null(int col) const;
  sqlite3_stmt* get() const { return st_; }

 private:
  sqlite3_stmt* st_ = nullptr;
  sqlite3* db_ = nullptr;
};

}  // namespace ulysses::prof::sql
