// run.json reading and writing (see run_record.hpp).
#include "run_record.hpp"

#include <cerrno>
#include <limits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_error.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "run_config.hpp"

namespace ulysses::launch {

using nlohmann::json;

std::string to_string(RunStatus s) {
  switch (s) {
    case RunStatus::Running:
      return "running";
    case RunStatus::Finished:
      return "finished";
    case RunStatus::Failed:
      return "failed";
    case RunStatus::Stopped:
      return "stopped";
  }
  return "unknown";
}

RunStatus run_status_from_string(const std::string& s) {
  if (s == "running") return RunStatus::Running;
  if (s == "finished") return RunStatus::Finished;
  if (s == "failed") return RunStatus::Failed;
  if (s == "stopped") return RunStatus::Stopped;
  throw std::invalid_argument("unknown run status '" + s + "' (expected running, finished, failed or stopped)");
}

namespace {
template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
template <class T>
std::optional<T> get_opt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}
// An integer field as T (int64, int): json_int64's rules, then T's range.
template <class T>
T integer(const json& v, const char* key) {
  const int64_t x = json_int64(v, key);
  if (x < int64_t{std::numeric_limits<T>::min()} || x > int64_t{std::numeric_limits<T>::max()})
    throw std::invalid_argument(std::string(key) + " = " + v.dump() + " is out of range (" +
                                std::to_string(std::numeric_limits<T>::min()) + " to " +
                                std::to_string(std::numeric_limits<T>::max()) + ")");
  return static_cast<T>(x);
}
template <class T>
T integer_or(const json& j, const char* key, T def) {
  auto it = j.find(key);
  return it == j.end() ? def : integer<T>(*it, key);
}
template <class T>
std::optional<T> integer_opt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return integer<T>(*it, key);
}
}  // namespace

json RunRecord::to_json() const {
  json j;
  j["status"] = to_string(status);
  j["started_at"] = started_at;
  j["ended_at"] = ended_at.empty() ? json(nullptr) : json(ended_at);
  j["duration_s"] = duration_s;
  j["world_size"] = world_size;
  j["exit_code"] = opt(exit_code);
  j["final_loss"] = opt(final_loss);
  j["steps_done"] = steps_done;
  j["failed_rank"] = opt(failed_rank);
  j["message"] = message;
  j["pid"] = pid;
  return j;
}

RunRecord RunRecord::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("run.json must be a JSON object");
  RunRecord r;
  r.status = run_status_from_string(j.at("status").get<std::string>());
  r.started_at = j.value("started_at", std::string());
  r.ended_at = get_opt<std::string>(j, "ended_at").value_or("");
  r.duration_s = j.value("duration_s", 0.0);
  r.world_size = integer_or(j, "world_size", int64_t{0});
  r.exit_code = integer_opt<int>(j, "exit_code");
  r.final_loss = get_opt<double>(j, "final_loss");
  r.steps_done = integer_or(j, "steps_done", int64_t{0});
  r.failed_rank = integer_opt<int>(j, "failed_rank");
  r.message = j.value("message", std::string());
  r.pid = integer_or(j, "pid", int64_t{0});
  return r;
}

void write_json_file_atomic(const std::string& path, const json& j) {
  try {
    ulysses::write_file_atomically(path, j.dump(2) + "\n");  // temp file, fsync, rename, fsync folder
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
}

namespace {
// run.json's text, padded with spaces (valid trailing JSON whitespace) to kRunJsonReserve
// bytes, so that the file's blocks are allocated when the run starts.
std::string run_record_text(const RunRecord& r) {
  RunRecord copy = r;
  if (copy.message.size() > 2000) copy.message = copy.message.substr(0, 2000) + "...";
  std::string text = copy.to_json().dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  while (text.size() >= kRunJsonReserve && copy.message.size() > 64) {  // escapes can grow a message 6x
    copy.message = copy.message.substr(0, copy.message.size() / 2) + "...";
    text = copy.to_json().dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  }
  if (text.size() < kRunJsonReserve) text.append(kRunJsonReserve - text.size() - 1, ' ').push_back('\n');
  return text;
}

// Overwrites the existing file's bytes without growing it: no new block is needed, so this
// works on a full disk. False when the file is missing or too small, or a write fails.
bool rewrite_in_place(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= text.size();
  if (ok) {
    std::string padded = text;
    if (padded.size() < static_cast<size_t>(st.st_size)) {
      padded.pop_back();  // the final newline goes last again
      padded.append(static_cast<size_t>(st.st_size) - padded.size() - 1, ' ').push_back('\n');
    }
    size_t done = 0;
    while (ok && done < padded.size()) {
      const ssize_t n = ::pwrite(fd, padded.data() + done, padded.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
  }
  ::close(fd);
  return ok;
}
}  // namespace

void write_run_record(const std::string& path, const RunRecord& r) {
  const std::string text = run_record_text(r);
  std::string why;
  try {
    ulysses::write_file_atomically(path, text);  // temp file, fsync, rename, fsync folder
    return;
  } catch (const std::runtime_error& e) {
    why = e.what();
  }
  // The disk may be full: the first write reserved kRunJsonReserve bytes; reuse them. One
  // pwrite of one page (4 KiB): a crash leaves the old record or the new one.
  if (rewrite_in_place(path, text)) return;
  throw LaunchError("cannot write " + path + " (status " + to_string(r.status) +
                    (r.steps_done > 0 ? ", after step " + std::to_string(r.steps_done - 1) : std::string()) +
                    "): " + why);
}

RunRecord read_run_record(const std::string& path) {
  json j;
  try {
    j = load_json_file(path);  // a regular file of bounded size (never a FIFO)
  } catch (const ConfigError& e) {
    throw LaunchError(e.what());
  }
  try {
    return RunRecord::from_json(j);
  } catch (const std::exception& e) {
    throw LaunchError(path + " is not a valid run record: " + e.what());
  }
}

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::string compact_local_timestamp(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace ulysses::launch
