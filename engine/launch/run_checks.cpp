// ulysses-run's checks before anything starts (run_checks.hpp).
#include "run_checks.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "device_decision.hpp"
#include "run_output.hpp"

namespace ulysses::launch {

std::optional<int> load_checked_config(const std::string& config_path, const std::vector<std::string>& overrides,
                                       bool on_this_host, RunConfig& cfg, std::string& tokens_checked) {
  const bool here = on_this_host;
  try {
    cfg = load_run_config(config_path, overrides);
    if (here) tokens_checked = tokens_file_identity(cfg.data.path, cfg.data, cfg.model.vocab_size);
    // A large token file's id check reads it whole (about 0.4 GiB/s here): said first, not
    // minutes of silence.
    if (here && cfg.data.kind == "tokens") {
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(cfg.data.path, ec);
      if (!ec && bytes >= (uintmax_t{1} << 30))
        say("checking the token ids of " + cfg.data.path + " (" + std::to_string(bytes >> 30) +
            " GiB) against model.vocab_size before anything starts; Ctrl-C stops it");
    }
    auto issues = here ? validate_with_files(cfg) : validate(cfg);
    // Device and backend, decided as each worker will: every rank runs on this host.
    if (issues.empty() && here)
      decide_device(cfg, DeviceFacts::detect(0, static_cast<int>(cfg.parallel.world_size())), &issues);
    if (!issues.empty()) {
      for (const auto& i : issues) say_each_line(i.message);
      return 2;
    }
  } catch (const ConfigError& e) {
    say_each_line(e.what());
    return 2;
  }
  if (here && (cfg.data.kind == "text" || cfg.data.kind == "tokens")) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(cfg.data.path, ec);
    if (!ec)
      if (const std::string note = repeated_windows_note(cfg, bytes); !note.empty()) say(note);
  }
  return std::nullopt;
}

// Data with fewer windows of seq_length + 1 tokens than the run draws sequences: windows
// repeat (a file of exactly seq_length + 1 tokens trained on one sequence every step, unsaid).
std::string repeated_windows_note(const RunConfig& cfg, uint64_t data_bytes) {
  const int64_t width = cfg.data.token_bytes();
  if (width <= 0) return "";
  const int64_t windows = static_cast<int64_t>(data_bytes) / width - cfg.train.seq_length;
  const double draws = double(cfg.train.steps) * double(cfg.train.micro_batch_size) * double(cfg.parallel.dp_size) *
                       double(std::max<int64_t>(1, cfg.train.gradient_accumulation_steps));
  if (windows < 1 || double(windows) >= draws) return "";
  return "note: " + cfg.data.path + " holds " + std::to_string(windows) +
         " distinct window(s) of train.seq_length + 1 = " + std::to_string(cfg.train.seq_length + 1) +
         " tokens for the " + std::to_string(static_cast<long long>(draws)) +
         " sequences this run draws: sequences repeat (more data, or a shorter seq_length, gives more)";
}

std::string thread_count_problem(const std::string& name, const std::string& text) {
  bool ok = !text.empty();
  size_t at = 0;
  while (ok && at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    ok = !part.empty() && part.size() <= 6 && part.find_first_not_of("0123456789") == std::string::npos &&
         std::stol(part) >= 1;
    at = comma + 1;
  }
  if (ok) return "";
  return name + "='" + text +
         "' is not a thread count (a positive whole number); unset it to get train.threads_per_rank (or cores / "
         "ranks) per rank, or set it to, say, 1";
}

std::string thread_env_problem() {
  for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char* v = std::getenv(k))
      if (std::string why = thread_count_problem(k, v); !why.empty()) return why;
  return "";
}

}  // namespace ulysses::launch
