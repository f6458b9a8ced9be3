// Helpers shared by the end-to-end tests that drive the real programs (ulysses-run,
// ulysses-worker, ulysses-trace) through a shell: run a command and capture its output,
// per-process scratch folders, the tiny GQA config every such test starts from, and the
// parsers for the programs' JSON-lines output. Header-only, torch- and Qt-free.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::test {

struct Proc {
  int code;         // exit status; 128 when the shell did not exit normally
  std::string out;  // stdout (and stderr when merged)
};

// Runs a shell command, in `dir` when given; stdout captured, stderr merged in when `merge`
// (otherwise it goes to the test log).
inline Proc sh(const std::string& cmd, const std::string& dir = "", bool merge = false) {
  std::string full = dir.empty() ? cmd : "cd '" + dir + "' && " + cmd;
  if (merge) full += " 2>&1";
  Proc p{0, ""};
  FILE* f = popen(full.c_str(), "r");
  if (f == nullptr) return {127, "popen failed: " + full};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.out.append(buf, n);
  const int st = pclose(f);
  p.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return p;
}

// <tmp>/ulysses_<suite>_<pid>/<name>; the parent folder exists, `name` itself is not created.
inline std::string scratch_path(const std::string& suite, const std::string& name) {
  const auto d =
      std::filesystem::temp_directory_path() / ("ulysses_" + suite + "_" + std::to_string(::getpid())) / name;
  std::filesystem::create_directories(d.parent_path());
  return d.string();
}

// The tiny GQA model the end-to-end tests train: H 4, Hkv 2, hidden 32 (dh 8), 2 layers,
// N 64, one thread per rank (deterministic BLAS), on the repository's tiny corpus. Tests
// adjust sections before writing it.
inline nlohmann::json tiny_config(int sp, int64_t steps, const std::string& source_dir) {
  return {{"model",
           {{"vocab_size", 256},
            {"hidden_size", 32},
            {"intermediate_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2}}},
          {"parallel", {{"sp_size", sp}, {"dp_size", 1}, {"timeout_s", 60}}},
          {"train",
           {{"seq_length", 64},
            {"steps", steps},
            {"lr", 0.01},
            {"warmup_steps", 1},
            {"min_lr", 0.001},
            {"threads_per_rank", 1}}},
          {"data", {{"kind", "text"}, {"path", source_dir + "/resources/data/tiny_corpus.txt"}}}};
}

inline std::string write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
  return path;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Rewrites a safetensors file with `edit` applied to its JSON header (data bytes unchanged);
// returns the file's new size.
inline uint64_t edit_safetensors_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string all = slurp(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(all[i])) << (8 * i);
  nlohmann::json h = nlohmann::json::parse(all.substr(8, n));
  edit(h);
  std::string hs = h.dump();
  while (hs.size() % 8) hs.push_back(' ');
  std::string le(8, '\0');
  for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  const std::string out = le + hs + all.substr(8 + n);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  return out.size();
}

// One JSON value per non-empty line (`ulysses-run --json`, metrics.jsonl).
inline std::vector<nlohmann::json> json_lines(const std::string& s) {
  std::vector<nlohmann::json> v;
  size_t a = 0;
  while (a < s.size()) {
    size_t b = s.find('\n', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) v.push_back(nlohmann::json::parse(s.substr(a, b - a)));
    a = b + 1;
  }
  return v;
}

// step -> loss from `ulysses-run --json` lines.
inline std::map<int64_t, double> losses_by_step(const std::string& out) {
  std::map<int64_t, double> m;
  for (const auto& j : json_lines(out)) m[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  return m;
}

}  // namespace ulysses::test
