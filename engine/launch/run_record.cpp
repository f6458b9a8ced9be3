// run.json reading and writing (see run_record.hpp).
#include "run_record.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "launch_error.hpp"

namespace ulysses::launch {

using nlohmann::json;

std::string to_string(RunStatus s) {
  switch (s) {
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Failed: return "failed";
    case RunStatus::Stopped: return "stopped";
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
  r.world_size = j.value("world_size", int64_t{0});
  r.exit_code = get_opt<int>(j, "exit_code");
  r.final_loss = get_opt<double>(j, "final_loss");
  r.steps_done = j.value("steps_done", int64_t{0});
  r.failed_rank = get_opt<int>(j, "failed_rank");
  r.message = j.value("message", std::string());
  r.pid = j.value("pid", int64_t{0});
  return r;
}

void write_json_file_atomic(const std::string& path, const json& j) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw LaunchError("cannot write " + tmp + ": " + std::strerror(errno));
    out << j.dump(2) << '\n';
    out.flush();
    if (!out) throw LaunchError("cannot write " + tmp + " (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw LaunchError("cannot replace " + path + ": " + why);
  }
}

void write_run_record(const std::string& path, const RunRecord& r) { write_json_file_atomic(path, r.to_json()); }

RunRecord read_run_record(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw LaunchError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return RunRecord::from_json(json::parse(ss.str()));
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
