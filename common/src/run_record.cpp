// run.json: the one reader and the one writer (run_record.hpp).
#include "ulysses/common/run_record.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ulysses/common/atomic_file.hpp"

namespace ulysses {

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

bool RunRecordFile::has(std::string_view key) const { return std::find(keys.begin(), keys.end(), key) != keys.end(); }

namespace {
template <class T>
json run_record_opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Reads the fields of one run.json object into f, each refusal said in f.problems.
class RunRecordFields {
 public:
  RunRecordFields(const json& j, RunRecordFile& f) : j_(j), f_(f) {}

  // A string field; false when absent or refused.
  bool text(const char* key, std::string& out, bool nullable = false) {
    const json* v = find(key);
    if (!v || (nullable && v->is_null())) return v && took(key);
    if (!v->is_string()) return refuse(key, "is not a string");
    out = v->get<std::string>();
    return took(key);
  }
  bool number(const char* key, double& out) {
    const json* v = find(key);
    if (!v) return false;
    if (!v->is_number()) return refuse(key, "is not a number");
    out = v->get<double>();
    return took(key);
  }
  bool number(const char* key, std::optional<double>& out) {
    const json* v = find(key);
    if (v && v->is_null()) return took(key);
    double x = 0;
    if (!number(key, x)) return false;
    out = x;
    return true;
  }
  // An integer field within [lo, hi] (an integral double counts).
  template <class T>
  bool integer(const char* key, T& out, int64_t lo = std::numeric_limits<T>::min(),
               int64_t hi = std::numeric_limits<T>::max()) {
    const json* v = find(key);
    if (!v) return false;
    if (!v->is_number()) return refuse(key, "is not a number");
    const auto out_of_range = [&] {
      return refuse(key,
                    "= " + v->dump() + " is out of range (" + std::to_string(lo) + " to " + std::to_string(hi) + ")");
    };
    int64_t i = 0;
    if (v->is_number_float()) {  // a whole number written as a float still reads
      const double x = v->get<double>();
      if (x != std::trunc(x)) return refuse(key, "is not an integer");
      if (!(x > -9.2e18 && x < 9.2e18)) return out_of_range();  // casting beyond int64 is undefined
      i = static_cast<int64_t>(x);
    } else if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return out_of_range();
      i = static_cast<int64_t>(v->get<uint64_t>());
    } else {
      i = v->get<int64_t>();
    }
    if (i < lo || i > hi) return out_of_range();
    out = static_cast<T>(i);
    return took(key);
  }
  template <class T>
  bool integer(const char* key, std::optional<T>& out) {
    const json* v = find(key);
    if (v && v->is_null()) return took(key);
    T x{};
    if (!integer(key, x)) return false;
    out = x;
    return true;
  }

 private:
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  bool took(const char* key) {
    f_.keys.emplace_back(key);
    return true;
  }
  bool refuse(const char* key, const std::string& why) {
    f_.problems.push_back(std::string("run.json's ") + key + " " + why + "; ignored");
    return false;
  }
  const json& j_;
  RunRecordFile& f_;
};

// Deeper than this is no run record (and printing such a value recurses once per level).
bool run_json_nested_within(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}
}  // namespace

json RunRecord::to_json() const {
  json j;
  j["status"] = to_string(status);
  j["started_at"] = started_at;
  j["ended_at"] = ended_at.empty() ? json(nullptr) : json(ended_at);
  j["duration_s"] = duration_s;
  j["world_size"] = world_size;
  j["exit_code"] = run_record_opt(exit_code);
  j["final_loss"] = run_record_opt(final_loss);
  j["steps_done"] = steps_done;
  j["failed_rank"] = run_record_opt(failed_rank);
  j["message"] = message;
  j["pid"] = pid;
  if (simulated.is_object()) j["simulated"] = simulated;
  return j;
}

RunRecordFile run_record_from_json(const json& j) {
  RunRecordFile f;
  if (!j.is_object()) {
    f.problems.emplace_back("run.json cannot be read as a run record (not a JSON object)");
    return f;
  }
  f.present = true;
  RunRecord& r = f.record;
  RunRecordFields read(j, f);
  std::string status;
  // Only the four statuses ulysses-run writes; anything else is no status a reader can act on
  // (shown raw, its control characters and all would stand as the run's state).
  if (read.text("status", status)) {
    try {
      r.status = run_status_from_string(status);
      f.status_known = true;
    } catch (const std::invalid_argument&) {
      f.problems.emplace_back(
          "run.json's status is not running, finished, failed or stopped; the run's state is unknown");
    }
  }
  read.text("started_at", r.started_at);
  read.text("ended_at", r.ended_at, /*nullable=*/true);
  read.number("duration_s", r.duration_s);
  read.number("final_loss", r.final_loss);
  read.integer("steps_done", r.steps_done);
  read.integer("failed_rank", r.failed_rank);
  read.integer("exit_code", r.exit_code);
  read.integer("pid", r.pid);
  read.text("message", r.message);
  if (auto s = j.find("simulated"); s != j.end() && s->is_object()) {
    r.simulated = *s;
    f.keys.emplace_back("simulated");
  }
  // Claims are bounded: a run.json may say 2e9 ranks, and a row per rank would exhaust memory.
  auto w = j.find("world_size");
  if (w != j.end() && w->is_number() && !(w->get<double>() >= 0 && w->get<double>() <= double(kMaxRunRanks))) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "run.json's world_size claims %g ranks (at most %lld are shown); ignored",
                  w->get<double>(), static_cast<long long>(kMaxRunRanks));
    f.problems.emplace_back(buf);
  } else {
    read.integer("world_size", r.world_size, 0, kMaxRunRanks);
  }
  return f;
}

RunRecordFile read_run_record_file(const std::string& path) {
  RunRecordFile f;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return f;  // no run.json: nothing to say
  const auto unreadable = [&] {
    f.problems.push_back("run.json cannot be read as a run record (not a JSON object, not a regular file, or over " +
                         std::to_string(kMaxRunJsonBytes >> 20) + " MiB)");
    return f;
  };
  // A regular file of bounded size: a FIFO named run.json would block a reader forever.
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxRunJsonBytes) return unreadable();
  std::ifstream in(path, std::ios::binary);
  if (!in) return unreadable();
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!run_json_nested_within(text, 64)) return unreadable();
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return unreadable();
  return run_record_from_json(j);
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
bool rewrite_run_record_in_place(const std::string& path, const std::string& text) {
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

void write_run_record_file(const std::string& path, const RunRecord& r) {
  const std::string text = run_record_text(r);
  std::string why;
  try {
    write_file_atomically(path, text);  // temp file, fsync, rename, fsync folder
    return;
  } catch (const std::runtime_error& e) {
    why = e.what();
  }
  // The disk may be full: the first write reserved kRunJsonReserve bytes; reuse them. One
  // pwrite of one page (4 KiB): a crash leaves the old record or the new one.
  if (rewrite_run_record_in_place(path, text)) return;
  throw std::runtime_error("cannot write " + path + " (status " + to_string(r.status) +
                           (r.steps_done > 0 ? ", after step " + std::to_string(r.steps_done - 1) : std::string()) +
                           "): " + why);
}

}  // namespace ulysses
