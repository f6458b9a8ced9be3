// Run directory reader (see run_dir_reader.hpp).
#include "run_dir_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "json_checked.hpp"
#include "metric_line.hpp"
#include "run_record.hpp"
#include "ulysses/common/step_stats.hpp"

namespace ulysses::launch {

using nlohmann::json;

namespace {
bool regular_file_within(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= max_bytes;
}
double num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
// A double as int64, clamped (a value of 1e300 must not be undefined behaviour).
int64_t to_i64(double v) {
  if (!std::isfinite(v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}
std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}
}  // namespace

std::optional<MetricPoint> metric_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  auto step = j.find("step"), loss = j.find("loss");
  if (step == j.end() || !step->is_number() || loss == j.end() || !loss->is_number()) return std::nullopt;
  MetricPoint p;
  p.step = to_i64(step->get<double>());
  p.steps = to_i64(num(j, "steps"));
  p.loss = loss->get<double>();
  p.lr = num(j, "lr");
  p.grad_norm = num(j, "grad_norm");
  p.tokens = to_i64(num(j, "tokens"));
  p.tokens_per_s = num(j, "tokens_per_s");
  p.step_ms = num(j, "step_ms");
  p.max_mem_bytes = to_i64(num(j, "max_mem_bytes"));
  p.elapsed_s = num(j, "elapsed_s");
  return p;
}

std::optional<MetricPoint> parse_metric_text(const std::string& raw) {
  const std::string line = trim(raw);
  if (auto m = parse_metric_line(line)) return metric_from_json(m->value);  // "METRIC {...}"
  if (line.empty() || line.front() != '{') return std::nullopt;
  return metric_from_json(json::parse(line, nullptr, /*allow_exceptions=*/false));
}

std::vector<MetricPoint> read_metrics_file(const std::string& path) {
  std::vector<MetricPoint> out;
  if (!regular_file_within(path, kMaxMetricsBytes)) return out;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  constexpr size_t kMaxLine = 64 * 1024;  // a METRIC object is a few hundred bytes
  while (static_cast<int64_t>(out.size()) < kMaxMetricPoints && std::getline(in, line)) {
    if (line.size() > kMaxLine) continue;
    if (auto p = parse_metric_text(line)) out.push_back(*p);
  }
  return out;
}

std::optional<MetricPoint> read_last_metric(const std::string& path) {
  if (!regular_file_within(path, kMaxMetricsBytes)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  std::streamoff end = in.tellg();
  // Back from the end, a window at a time, line by line until one parses (a torn last line
  // and lines that are no METRIC are skipped, as read_metrics_file skips them). `in_line`: the
  // window ends inside a line that began before it (longer than the window: no METRIC).
  constexpr std::streamoff kWindow = 128 * 1024;
  bool in_line = false;
  while (end > 0) {
    const std::streamoff begin = std::max<std::streamoff>(0, end - kWindow);
    std::string buf(static_cast<size_t>(end - begin), '\0');
    in.clear();  // no state of the previous read carries over to this one
    in.seekg(begin);
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() != static_cast<std::streamsize>(buf.size())) return std::nullopt;
    size_t stop = buf.size();  // the current line is buf[from, stop)
    for (;;) {
      const size_t nl = stop == 0 ? std::string::npos : buf.rfind('\n', stop - 1);
      if (nl == std::string::npos && begin > 0) break;  // the line starts before the window
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if (!in_line && stop - from <= 64 * 1024)
        if (auto p = parse_metric_text(buf.substr(from, stop - from))) return p;
      in_line = false;
      if (nl == std::string::npos) return std::nullopt;  // the file's first line
      stop = nl;
    }
    // Read again from the start of the window's first (cut) line; a window with no newline at
    // all lies inside one over-long line, whose head the next window skips.
    in_line = stop == buf.size() || in_line;
    end = begin + static_cast<std::streamoff>(stop);
    if (in_line) end = begin;
  }
  return std::nullopt;
}

std::optional<json> read_json_object_file(const std::string& path, int64_t max_bytes) {
  if (!regular_file_within(path, max_bytes)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Nesting at most 64 deep, no key twice (json_checked.hpp): a config.json nested 100 000
  // deep parses fine and then crashes the studio (SIGSEGV) in the recursive dump().
  json j;
  try {
    j = parse_checked_json(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!j.is_object()) return std::nullopt;
  return j;
}

MetricStats metric_stats(const std::vector<MetricPoint>& points) {
  MetricStats m;
  m.steps = static_cast<int64_t>(points.size());
  if (points.empty()) return m;
  std::vector<ulysses::StepFigure> figures;
  for (const auto& p : points) {
    m.max_mem_bytes = std::max(m.max_mem_bytes, p.max_mem_bytes);
    figures.push_back({p.step, p.step_ms, p.tokens_per_s});
  }
  const ulysses::SteadyState s = ulysses::steady_state(figures);
  m.median_step_ms = s.median_step_ms;
  m.median_tokens_per_s = s.median_tokens_per_s;
  m.final_loss = points.back().loss;
  m.elapsed_s = points.back().elapsed_s;
  return m;
}

}  // namespace ulysses::launch
