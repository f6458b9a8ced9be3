// RAII wrappers over the SQLite C API (see sqlite_db.hpp).
#include "ulysses/profiler/sqlite_db.hpp"

#include <sqlite3.h>

namespace ulysses::prof::sql {

namespace {
// Throws Busy for a lock held past the busy timeout, std::runtime_error for anything else.
[[noreturn]] void fail(int rc, const std::string& msg) {
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
    throw Busy(msg + " (another process held it for over " + std::to_string(kBusyTimeoutMs / 1000) + " s)");
  throw std::runtime_error(msg);
}
}  // namespace

Db::Db(const std::string& path, int flags) {
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(msg);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

Db::~Db() { close(); }

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    close();
    db_ = o.db_;
    o.db_ = nullptr;
  }
  return *this;
}

void Db::close() {
  if (db_) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
}

void Db::set_busy_timeout_ms(int ms) {
  if (db_) sqlite3_busy_timeout(db_, ms);
}

std::string Db::errmsg() const { return db_ ? sqlite3_errmsg(db_) : "no database"; }

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  if (const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err); rc != SQLITE_OK) {
    std::string msg = err ? err : errmsg();
    sqlite3_free(err);
    fail(rc, msg);
  }
}

int64_t Db::query_int(const std::string& sql) {
  Stmt st(*this, sql);
  return st.step() ? st.i64(0) : 0;
}

bool Db::has_table(const std::string& name) {
  Stmt st(*this, "SELECT 1 FROM sqlite_master WHERE type IN ('table','view') AND name = ?");
  st.bind(1, name);
  return st.step();
}

bool Db::has_column(const std::string& table, const std::string& column) {
  Stmt st(*this, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?");
  st.bind(1, table);
  st.bind(2, column);
  return st.step();
}

Stmt::Stmt(const Db& db, const std::string& sql) : db_(db.get()) {
  if (const int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &st_, nullptr); rc != SQLITE_OK)
    fail(rc, std::string(sqlite3_errmsg(db_)) + " (in: " + sql.substr(0, 80) + ")");
}

Stmt::~Stmt() {
  if (st_) sqlite3_finalize(st_);
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (st_) sqlite3_finalize(st_);
    st_ = o.st_;
    db_ = o.db_;
    o.st_ = nullptr;
  }
  return *this;
}

void Stmt::bind(int i, int64_t v) { sqlite3_bind_int64(st_, i, v); }
void Stmt::bind(int i, double v) { sqlite3_bind_double(st_, i, v); }
void Stmt::bind(int i, const std::string& v) {
  sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
void Stmt::bind_null(int i) { sqlite3_bind_null(st_, i); }

bool Stmt::step() {
  int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(rc, sqlite3_errmsg(db_));
}

void Stmt::run() {
  int rc = sqlite3_step(st_);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_reset(st_);
    fail(rc, msg);
  }
  sqlite3_reset(st_);
}

void Stmt::reset() { sqlite3_reset(st_); }

int64_t Stmt::i64(int col) const { return sqlite3_column_int64(st_, col); }
double Stmt::f64(int col) const { return sqlite3_column_double(st_, col); }
std::string Stmt::text(int col) const {
  const unsigned char* t = sqlite3_column_text(st_, col);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(st_, col)) : std::string();
}
bool Stmt::is_null(int col) const { return sqlite3_column_type(st_, col) == SQLITE_NULL; }

}  // namespace ulysses::prof::sql
