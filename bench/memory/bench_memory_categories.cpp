// Cost of memory by category (issue 42; prints figures, not a test). Traced training steps of
// a small Llama with a 32000-token vocabulary on one CPU thread (sp 1), in one process, with the
// categories on (the counting CPU allocator charging every storage, a category sample at both
// edges of every range and at the step's peak) and off (counting switched off, no probe),
// alternated round by round so that both see the same machine. Printed side by side:
//   - the median step time of each, as wall time and as the stepping thread's CPU time (what
//     other processes on a shared machine add least to), and their ratios;
//   - the unit costs measured apart from the step's noise (one counted allocation + free of a
//     small tensor against an uncounted one; a traced range's push + pop with the probe against
//     without, per edge), the counts per step (allocations counted, samples written), and the
//     cost they make per step as a share of the step's CPU time.
//
//   bench_memory_categories [seq_length [layers [rounds [steps_per_round]]]]   default: 2048 4 3 3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

#include "comm.hpp"
#include "memory_categories.hpp"
#include "trainer.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

namespace {

RunConfig config(int64_t seq, int64_t layers) {
  RunConfig c;
  c.model.vocab_size = 32000;
  c.model.hidden_size = 64;
  c.model.intermediate_size = 176;
  c.model.num_hidden_layers = layers;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 2;
  c.train.seq_length = seq;
  c.train.micro_batch_size = 1;
  c.train.device = "cpu";
  c.train.threads_per_rank = 1;
  c.data.kind = "synthetic";
  c.profile.enabled = true;
  return c;
}

// CPU time of the calling (stepping) thread, ms.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Side {
  std::vector<double> wall, cpu;  // per timed step, ms
  int64_t allocations = 0;        // counted during the timed steps
  int64_t steps = 0;
};

// One round: a fresh traced Trainer, one warm-up step, then `steps` timed steps.
void round(const RunConfig& cfg, bool categories, const std::string& path, int steps, Side* out) {
  mem::set_cpu_counting(categories);
  Comm comm(DistEnv{}, 1, 1, "gloo", std::chrono::milliseconds(60000));
  prof::TracerOptions to;
  to.path = path;
  if (categories) to.memory_probe = mem::cpu_probe();
  auto tracer = prof::Tracer::open(to);
  {
    Trainer tr(cfg, comm, tracer.get());
    for (int s = 0; s <= steps; ++s) {
      tracer->begin_step(s);
      const int64_t a0 = mem::cpu().allocations();
      const double c0 = thread_cpu_ms();
      const auto t0 = std::chrono::steady_clock::now();
      const StepMetrics m = tr.step(s);
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const double dc = thread_cpu_ms() - c0;
      prof::StepRecord r;
      r.step = s;
      r.loss = m.loss;
      tracer->end_step(r);
      if (s == 0) continue;
      out->wall.push_back(dt);
      out->cpu.push_back(dc);
      out->allocations += mem::cpu().allocations() - a0;
      ++out->steps;
    }
  }
  tracer->close();
  mem::set_cpu_counting(true);
}

// Stepping-thread CPU ns per call of `body`, the least of 5 repetitions of n calls.
template <class F>
double ns_per(int n, F body) {
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const double c0 = thread_cpu_ms();
    for (int i = 0; i < n; ++i) body();
    best = std::min(best, (thread_cpu_ms() - c0) * 1e6 / n);
  }
  return best;
}

// The two unit costs: a counted allocation + free against an uncounted one; a traced range's
// push + pop with the probe against without (halved: two edges).
void unit_costs(const std::string& dir, double* alloc_ns, double* edge_ns) {
  constexpr int kN = 100000;
  auto alloc = [] { auto t = at::empty({16}); };
  mem::set_cpu_counting(false);
  const double plain = ns_per(kN, alloc);
  mem::set_cpu_counting(true);
  *alloc_ns = ns_per(kN, alloc) - plain;
  auto traced = [&](bool probe) {
    prof::TracerOptions to;
    to.path = dir + (probe ? "/unit_probe.sqlite" : "/unit_bare.sqlite");
    if (probe) to.memory_probe = mem::cpu_probe();
    auto tr = prof::Tracer::open(to);
    tr->begin_step(0);
    const double ns = ns_per(kN / 5, [&] { ULYSSES_RANGE(tr.get(), prof::Phase::Other, prof::Direction::None); });
    tr->end_step(prof::StepRecord{});
    tr->close();
    return ns;
  };
  const double bare = traced(false);
  *edge_ns = (traced(true) - bare) / 2;
}

// Category samples written per step (both edges of every range and the step peak), read back
// from the trace of a categories round.
double samples_per_step(const std::string& path, int64_t steps) {
  sqlite3* db = nullptr;
  double n = 0;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM ULYSSES_MEMORY_CATEGORIES WHERE step >= 1", -1, &st, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      n = double(sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n / double(steps);
}

int bench_main(int argc, char** argv) {
  const int64_t seq = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int64_t layers = argc > 2 ? std::atoll(argv[2]) : 4;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 3;
  if (seq < 16 || layers < 1 || rounds < 1 || steps < 1) {
    std::fprintf(stderr, "bench_memory_categories: seq_length >= 16, layers, rounds and steps >= 1\n");
    return 2;
  }
  at::set_num_threads(1);
  mem::install_cpu_counting();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ulysses_bench_memcat_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::printf(
      "Llama d 64, %lld layers, vocab 32000, seq %lld, sp 1, 1 thread, traced; %d rounds of %d steps, "
      "categories on / off alternated in one process\n\n",
      static_cast<long long>(layers), static_cast<long long>(seq), rounds, steps);
  Side on, off;
  std::string last_on;
  for (int r = 0; r < rounds; ++r) {
    last_on = (dir / ("on" + std::to_string(r) + ".sqlite")).string();
    round(config(seq, layers), true, last_on, steps, &on);
    round(config(seq, layers), false, (dir / ("off" + std::to_string(r) + ".sqlite")).string(), steps, &off);
  }
  const double won = median(on.wall), woff = median(off.wall), con = median(on.cpu), coff = median(off.cpu);
  std::printf("%-34s %14s %14s %8s\n", "median per step", "categories on", "off", "on/off");
  std::printf("%-34s %14.2f %14.2f %8.3f\n", "wall ms", won, woff, won / woff);
  std::printf("%-34s %14.2f %14.2f %8.3f\n\n", "stepping-thread CPU ms", con, coff, con / coff);
  double alloc_ns = 0, edge_ns = 0;
  unit_costs(dir.string(), &alloc_ns, &edge_ns);
  const double allocs = double(on.allocations) / double(std::max<int64_t>(1, on.steps));
  const double samples = samples_per_step(last_on, steps);
  const double est_ms = (allocs * alloc_ns + samples * edge_ns) / 1e6;
  std::printf(
      "unit costs (stepping-thread CPU, least of 5): counted allocation + free %+.0f ns, "
      "category sample %+.0f ns per range edge\n",
      alloc_ns, edge_ns);
  std::printf("per step: %.0f allocations counted, %.0f category samples written\n", allocs, samples);
  std::printf("estimated cost per step: %.3f ms = %.3f%% of the step's CPU time (%.2f ms off)\n", est_ms,
              100.0 * est_ms / coff, coff);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_memory_categories [seq_length [layers [rounds [steps_per_round]]]]   (default 2048 4 3 3)\n"
      "  step time with memory by category (counting allocator + samples) on and off, alternated in one process, "
      "side by side; unit costs and the estimated cost per step",
      argc, argv, [&] { return bench_main(argc, argv); });
}
