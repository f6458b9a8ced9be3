// bench_kineto_load: memory and time of reading a PyTorch profiler (Kineto) trace, side by side
// in one run, each in a forked child (its own peak RSS):
//   document  nlohmann::json::parse of the whole file: what the reader held before it took each
//             event out of the document as the parser completed it (a lower bound of that
//             reader's peak: it then built the model beside the document)
//   load      prof::load_trace of the file (the reader now: compact records, then the model)
// The file is generated (CPU ops with Kineto's args, kernels, runtime calls, one
// ProfilerStep# per step) into --dir, about 3.4 MB per step. Prints figures; not a test.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_store.hpp"

namespace fs = std::filesystem;

namespace {

void write_trace(const std::string& path, int steps, int ops_per_step) {
  std::ofstream o(path, std::ios::trunc);
  o << R"({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [)"
    << R"({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python3"}})";
  int64_t t = 0;
  for (int s = 0; s < steps; ++s) {
    const int64_t s0 = t;
    for (int i = 0; i < ops_per_step; ++i) {
      o << R"(, {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": )" << t
        << R"(, "dur": 3, "args": {"External id": )" << i
        << R"(, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["float", "float", "Scalar"], )"
        << R"("Input Strides": [[4096, 1], [4096, 1], []], "Input Dims": [[8, 4096], [8, 4096], []], "Ev Idx": )" << i
        << R"(, "Sequence number": )" << i << R"(, "Fwd thread id": 0}})";
      if (i % 3 == 0) {
        o << R"(, {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, )"
          << R"(at::native::CUDAFunctor_add<float>>", "pid": 0, "tid": 7, "ts": )" << t + 5
          << R"(, "dur": 2, "args": {"External id": )" << i
          << R"(, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": )" << i
          << R"(, "registers per thread": 16, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2, )"
          << R"("grid": [1, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 3}})";
        o << R"(, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": )" << t + 1
          << R"(, "dur": 1, "args": {"External id": )" << i << R"(, "cbid": 211, "correlation": )" << i << "}}";
      }
      t += 4;
    }
    o << R"(, {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" << s << R"(", "pid": 1, "tid": 1, "ts": )"
      << s0 << R"(, "dur": )" << t - s0 << "}";
  }
  o << R"(], "traceName": "bench", "baseTimeNanoseconds": 1700000000000000000})";
}

struct Figures {
  double wall_s = 0;
  long peak_kb = 0;
  long items = 0;
};

// Runs fn in a forked child; its wall time, peak RSS and what fn returned.
Figures in_child(const std::function<long()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const auto t0 = std::chrono::steady_clock::now();
    Figures f;
    f.items = fn();
    f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    f.peak_kb = ru.ru_maxrss;
    if (::write(fds[1], &f, sizeof f) != static_cast<ssize_t>(sizeof f)) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  Figures f;
  const bool got = ::read(fds[0], &f, sizeof f) == static_cast<ssize_t>(sizeof f);
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!got) std::fprintf(stderr, "bench_kineto_load: a measurement failed (exit status %d)\n", st);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Memory and time of reading a PyTorch profiler trace: whole document vs the reader"};
  int steps = 40, ops = 6000;
  std::string dir = (fs::temp_directory_path() / "ulysses_bench_kineto").string();
  app.add_option("--steps", steps, "ProfilerStep# ranges")->check(CLI::Range(1, 100000));
  app.add_option("--ops-per-step", ops, "CPU ops per step (a kernel and a runtime call every third)")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--dir", dir, "where the generated trace is written");
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(dir);
  const std::string path = (fs::path(dir) / "rank0.json").string();
  write_trace(path, steps, ops);
  const double mb = static_cast<double>(fs::file_size(path)) / 1e6;
  std::printf("Kineto trace %s: %.1f MB, %d steps x %d CPU ops\n", path.c_str(), mb, steps, ops);
  const Figures doc = in_child([&] {
    std::ifstream f(path, std::ios::binary);
    const auto j = nlohmann::json::parse(f, nullptr, false);
    return j.is_discarded() ? -1L : static_cast<long>(j["traceEvents"].size());
  });
  const Figures load = in_child([&] {
    const auto m = ulysses::prof::load_trace(path);
    return static_cast<long>(m.ranges.size() + m.runtime.size());
  });
  std::printf("%-10s %10s %14s %10s\n", "", "wall s", "peak RSS MB", "items");
  std::printf("%-10s %10.2f %14.1f %10ld  (events in the document)\n", "document", doc.wall_s, doc.peak_kb / 1024.0,
              doc.items);
  std::printf("%-10s %10.2f %14.1f %10ld  (ranges + runtime calls in the model)\n", "load", load.wall_s,
              load.peak_kb / 1024.0, load.items);
  if (load.peak_kb > 0)
    std::printf("peak RSS: the document alone %.1fx the reader's whole load; %.2f x the file's size for the load\n",
                static_cast<double>(doc.peak_kb) / static_cast<double>(load.peak_kb),
                load.peak_kb / 1024.0 / (mb / 1.048576));
  fs::remove(path);
  return doc.items > 0 && load.items > 0 ? 0 : 1;
}
