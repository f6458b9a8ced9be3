// Benchmark helper: run ulysses-run on a config with overrides, collect its METRIC lines
// and the run directory. Figures are medians over the steps after warm-up.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::bench {

struct RunResult {
  std::string dir;
  std::vector<nlohmann::json> metrics;
  double cpu_s = 0;  // user + system CPU of ulysses-run and all its workers
  double median(const char* key, size_t skip = 2) const {
    std::vector<double> v;
    for (size_t i = skip; i < metrics.size(); ++i) v.push_back(metrics[i][key].get<double>());
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

inline RunResult run(const std::string& config, const std::vector<std::string>& sets, const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::string cmd =
      std::string(ULYSSES_RUN_BIN) + " " + config + " --json --worker " + ULYSSES_WORKER_BIN + " --out " + dir;
  for (const auto& s : sets) cmd += " --set " + s;
  cmd += " 2>/dev/null";
  RunResult r{dir, {}, 0};
  auto cpu = [] {
    rusage u{};
    getrusage(RUSAGE_CHILDREN, &u);  // every waited-for descendant: the shell, ulysses-run, workers
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const double cpu0 = cpu();
  FILE* f = popen(cmd.c_str(), "r");
  char line[65536];
  while (fgets(line, sizeof line, f)) r.metrics.push_back(nlohmann::json::parse(line));
  const int st = pclose(f);
  r.cpu_s = cpu() - cpu0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw std::runtime_error("run failed: " + cmd);
  return r;
}

inline std::string scratch(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / "ulysses_bench" / name;
  std::filesystem::create_directories(d.parent_path());
  return d.string();
}

}  // namespace ulysses::bench
