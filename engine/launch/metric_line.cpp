// METRIC line parsing and progress formatting (see metric_line.hpp).
#include "metric_line.hpp"

#include <cmath>
#include <cstdio>

namespace ulysses::launch {

namespace {
const char kPrefix[] = "METRIC ";

std::string trim_metric_text(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool number(const nlohmann::json& j, const char* key, double& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return false;
  out = it->get<double>();
  return std::isfinite(out);
}
}  // namespace

std::optional<MetricLine> parse_metric_line(const std::string& line) {
  if (line.compare(0, sizeof(kPrefix) - 1, kPrefix) != 0) return std::nullopt;
  MetricLine m;
  m.raw = trim_metric_text(line.substr(sizeof(kPrefix) - 1));
  m.value = nlohmann::json::parse(m.raw, nullptr, /*allow_exceptions=*/false);
  if (!m.value.is_object()) return std::nullopt;
  return m;
}

std::string format_si(double v) {
  if (!std::isfinite(v)) return "?";
  const char* suffix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  double a = std::fabs(v);
  while (a >= 999.5 && i < 4) {
    a /= 1000.0;
    v /= 1000.0;
    ++i;
  }
  char buf[32];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 99.95)
    std::snprintf(buf, sizeof buf, "%.0f%s", v, suffix[i]);
  else if (a >= 9.995)
    std::snprintf(buf, sizeof buf, "%.1f%s", v, suffix[i]);
  else
    std::snprintf(buf, sizeof buf, "%.2f%s", v, suffix[i]);
  return buf;
}

// A step count from a METRIC line as text. Numbers beyond what int64 holds (a corrupt or
// hostile line) are printed as they are: casting them would be undefined behaviour.
std::string count_text(double v) {
  if (std::isfinite(v) && std::fabs(v) < 9.0e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) return "?";  // > 30,000 years: not a real ETA
  const long long s = std::llround(seconds);
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

std::string format_progress(const nlohmann::json& m) {
  std::string out;
  auto add = [&](const std::string& part) {
    if (!out.empty()) out += "  ";
    out += part;
  };
  double step = 0, steps = 0, v = 0;
  const bool have_step = number(m, "step", step);
  const bool have_steps = number(m, "steps", steps);
  if (have_step) add("step " + count_text(step + 1) + (have_steps ? "/" + count_text(steps) : std::string()));
  char buf[64];
  if (number(m, "loss", v)) {
    std::snprintf(buf, sizeof buf, "loss %.4f", v);
    add(buf);
  }
  if (number(m, "tokens_per_s", v)) add(format_si(v) + " tok/s");
  double step_ms = 0;
  if (number(m, "step_ms", step_ms)) {
    std::snprintf(buf, sizeof buf, "%.0f ms/step", step_ms);
    add(buf);
    if (have_step && have_steps) add("ETA " + format_eta((steps - step - 1) * step_ms / 1000.0));
  }
  return out;
}

}  // namespace ulysses::launch
