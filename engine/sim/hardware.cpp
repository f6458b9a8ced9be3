// Hardware descriptions: JSON in and out, and where the shipped ones are (see hardware.hpp).
#include "hardware.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ulysses::sim {

namespace fs = std::filesystem;
using nlohmann::json;

double Hardware::efficiency_of(const std::string& kind) const {
  if (auto it = efficiency.find(kind); it != efficiency.end()) return it->second;
  // "attention_fwd_outer" -> "attention_fwd" -> "attention"
  std::string k = kind;
  for (size_t cut = k.rfind('_'); cut != std::string::npos; cut = k.rfind('_')) {
    k = k.substr(0, cut);
    if (auto it = efficiency.find(k); it != efficiency.end()) return it->second;
  }
  if (auto it = efficiency.find("default"); it != efficiency.end()) return it->second;
  return 1.0;
}

namespace {
json link_json(const Link& l) {
  return {{"bandwidth", l.bandwidth}, {"latency", l.latency}, {"efficiency", l.efficiency}};
}
double positive(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() > 0))
    throw std::runtime_error(where + ": \"" + key + "\" must be a positive number");
  return j[key].get<double>();
}
Link link_from(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_object())
    throw std::runtime_error(std::string("links.") + key + " is missing (bandwidth, latency)");
  const json& o = j[key];
  Link l;
  l.bandwidth = positive(o, "bandwidth", std::string("links.") + key);
  l.latency = o.value("latency", 0.0);
  l.efficiency = o.contains("efficiency") ? positive(o, "efficiency", std::string("links.") + key) : 1.0;
  if (l.latency < 0) throw std::runtime_error(std::string("links.") + key + ".latency must be >= 0");
  return l;
}
}  // namespace

json Hardware::to_json() const {
  json j{{"name", name},
         {"description", description},
         {"source", source},
         {"gpus_per_node", gpus_per_node},
         {"peak_flops", {{"bfloat16", peak_bf16}, {"float32", peak_fp32}}},
         {"memory_bandwidth", memory_bandwidth},
         {"memory_bytes", memory_bytes},
         {"shared_compute", shared_compute},
         {"overhead_s", overhead_s},
         {"rank_skew", rank_skew},
         {"arrival_jitter_s", arrival_jitter_s},
         {"background_load", background_load},
         {"links", {{"node", link_json(node)}, {"network", link_json(network)}, {"host", link_json(host)}}},
         {"efficiency", efficiency}};
  if (!calibrated_from.empty()) j["calibrated_from"] = calibrated_from;
  return j;
}

Hardware Hardware::from_json(const json& j) {
  if (!j.is_object()) throw std::runtime_error("a hardware description is a JSON object");
  Hardware h;
  h.name = j.value("name", std::string());
  h.description = j.value("description", std::string());
  h.source = j.value("source", std::string());
  h.calibrated_from = j.value("calibrated_from", std::string());
  h.gpus_per_node = static_cast<int64_t>(positive(j, "gpus_per_node", "hardware"));
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object())
    throw std::runtime_error("\"peak_flops\" is missing ({\"bfloat16\": FLOP/s, \"float32\": FLOP/s})");
  h.peak_bf16 = positive(j["peak_flops"], "bfloat16", "peak_flops");
  h.peak_fp32 = positive(j["peak_flops"], "float32", "peak_flops");
  h.memory_bandwidth = positive(j, "memory_bandwidth", "hardware");
  h.memory_bytes = positive(j, "memory_bytes", "hardware");
  h.shared_compute = j.value("shared_compute", false);
  h.overhead_s = j.value("overhead_s", 0.0);
  if (!j.contains("links") || !j["links"].is_object())
    throw std::runtime_error("\"links\" is missing ({\"node\": {...}, \"network\": {...}})");
  h.node = link_from(j["links"], "node");
  h.network = link_from(j["links"], "network");
  if (j["links"].contains("host")) h.host = link_from(j["links"], "host");  // else PCIe-like defaults
  h.rank_skew = j.value("rank_skew", 0.0);
  h.arrival_jitter_s = j.value("arrival_jitter_s", 0.0);
  if (!(h.arrival_jitter_s >= 0 && h.arrival_jitter_s < 10))
    throw std::runtime_error("arrival_jitter_s must be seconds in [0, 10)");
  h.background_load = j.value("background_load", 0.0);
  if (!(h.background_load >= 0 && h.background_load < 1e4))
    throw std::runtime_error("background_load must be a number of runnable processes >= 0");
  if (!(h.rank_skew >= 0 && h.rank_skew < 100)) throw std::runtime_error("rank_skew must be a number in [0, 100)");
  if (j.contains("efficiency")) {
    if (!j["efficiency"].is_object()) throw std::runtime_error("\"efficiency\" must be an object of kind: number");
    for (const auto& [k, v] : j["efficiency"].items()) {
      if (!v.is_number() || !(v.get<double>() > 0))
        throw std::runtime_error("efficiency." + k + " must be a positive number");
      h.efficiency[k] = v.get<double>();
    }
  }
  return h;
}

std::string hardware_dir() {
  if (const char* env = std::getenv("ULYSSES_HARDWARE_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* rel : {"../share/ulysses/resources/hardware", "../../share/ulysses/resources/hardware",
                            "../../../share/ulysses/resources/hardware"}) {
      const fs::path d = exe.parent_path() / rel;
      if (fs::is_directory(d, ec)) return fs::weakly_canonical(d, ec).string();
    }
  }
  return "resources/hardware";  // a checkout's, from its root
}

std::vector<std::string> shipped_hardware() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(hardware_dir(), ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

Hardware load_hardware(const std::string& name_or_path) {
  fs::path p = name_or_path;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) {
    const fs::path shipped = fs::path(hardware_dir()) / (name_or_path + ".json");
    if (name_or_path.find('/') != std::string::npos || !fs::is_regular_file(shipped, ec)) {
      std::string names;
      for (const auto& n : shipped_hardware()) names += (names.empty() ? "" : ", ") + n;
      throw std::invalid_argument("hardware '" + name_or_path + "' is neither a shipped name (" +
                                  (names.empty() ? "none found in " + hardware_dir() : names) + ") nor a JSON file");
    }
    p = shipped;
  }
  std::ifstream in(p);
  const json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw std::invalid_argument(p.string() + " is not valid JSON");
  try {
    Hardware h = Hardware::from_json(j);
    if (h.name.empty()) h.name = p.stem().string();
    return h;
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(p.string() + ": " + e.what());
  }
}

}  // namespace ulysses::sim
