// What a training checkpoint's identity costs (issue 54): writing a checkpoint's files whole and
// synced (as train_state.cpp does, ulysses::write_file_atomically) beside the manifest's XXH64 of
// every file (ckpt::make_manifest, the save's extra work) and the resume check
// (ckpt::checkpoint_contents_problem: every header's identity and every file's XXH64), in one run.
//   bench_checkpoint_check [MiB]     (default 512: model 1/3, optimizer 2/3, 2 RNG files)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_layout.hpp"
#include "common/bench_main.hpp"
#include "ulysses/common/atomic_file.hpp"

namespace fs = std::filesystem;
using namespace ulysses;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A safetensors file of `bytes` data bytes carrying `meta` (one U8 tensor).
std::string safetensors(size_t bytes, const std::map<std::string, std::string>& meta) {
  nlohmann::json h = {{"__metadata__", meta},
                      {"x", {{"dtype", "U8"}, {"shape", {bytes}}, {"data_offsets", {0, bytes}}}}};
  std::string hs = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  out += hs;
  out.resize(out.size() + bytes);
  for (size_t i = 8 + hs.size(); i < out.size(); ++i) out[i] = static_cast<char>(i * 2654435761u >> 13);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main("bench_checkpoint_check [MiB]", argc, argv, [&] {
    const size_t mib = argc > 1 ? static_cast<size_t>(std::atoll(argv[1])) : 512;
    const fs::path dir = fs::temp_directory_path() / ("ulysses_bench_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string run = "0123456789abcdef0123456789abcd";
    ckpt::Layout l;
    const std::vector<std::pair<std::string, size_t>> files = {{"model.safetensors", (mib << 20) / 3},
                                                               {"optimizer.safetensors", 2 * (mib << 20) / 3}};
    std::vector<std::string> bodies;  // made before the clock starts: only the writes are timed
    for (const auto& [name, bytes] : files) bodies.push_back(safetensors(bytes, ckpt::file_identity(run, 4, name, l)));
    auto t = Clock::now();
    for (size_t i = 0; i < files.size(); ++i)
      ulysses::write_file_atomically((dir / files[i].first).string(), bodies[i]);
    for (int r = 0; r < 2; ++r)
      ulysses::write_file_atomically((dir / ckpt::rng_file_name(r)).string(), std::string(5056, 'r'));
    ulysses::write_file_atomically((dir / "state.json").string(),
                                   nlohmann::json({{"run_id", run}, {"step", 4}}).dump());
    const double write_s = since(t);
    t = Clock::now();
    const nlohmann::json m = ckpt::make_manifest(dir.string(), 4, run, l);
    const double manifest_s = since(t);
    ulysses::write_file_atomically((dir / ckpt::kCompleteFile).string(), m.dump());
    t = Clock::now();
    const std::string why = ckpt::checkpoint_contents_problem(dir.string());
    const double check_s = since(t);
    fs::remove_all(dir);
    if (!why.empty()) throw std::runtime_error(why);
    std::printf(
        "%zu MiB checkpoint: write + fsync %.3f s | manifest XXH64 %.3f s (%.0f%% of the write) | resume "
        "check %.3f s (%.2f GB/s)\n",
        mib, write_s, manifest_s, 100.0 * manifest_s / write_s, check_s,
        static_cast<double>(mib << 20) / check_s / 1e9);
    return 0;
  });
}
