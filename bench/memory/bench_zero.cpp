// ZeRO static-state benchmark (prints figures; not a test): a ~50M-parameter Llama trained
// for 2 steps at sp 2 x dp 2 (4 Gloo ranks as threads of this process, fp32, CPU) at each
// train.zero_stage (0-3) and with offload_optimizer. Per rank, measured: the CPU tensor bytes the rank
// holds after its steps (MemoryTracker on the rank's thread, started before its Trainer:
// parameters, gradients, masters, AdamW state, the small data tensors), in bytes per parameter,
// beside the planner's static figure for the same config (cost model, engine/cost/cost_model.hpp:
// device static + offloaded host bytes, everything on the CPU here) and the meta-device dry
// run's measured static state (engine/core/meta_dry_run.hpp), and their ratios.
//
//   bench_zero [--steps N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "engine/rank_threads.hpp"  // tests/engine
#include "cost_model.hpp"
#include "memory_tracker.hpp"
#include "meta_dry_run.hpp"
#include "trainer.hpp"

using namespace ulysses;

namespace {

RunConfig model_config(int64_t stage, bool offload) {
  RunConfig c;
  c.model.vocab_size = 16000;
  c.model.hidden_size = 512;
  c.model.intermediate_size = 2048;
  c.model.num_hidden_layers = 8;
  c.model.num_attention_heads = 8;
  c.model.num_key_value_heads = 8;
  c.parallel.sp_size = 2;
  c.parallel.dp_size = 2;
  c.parallel.timeout_s = 600;
  c.train.seq_length = 64;
  c.train.steps = 2;
  c.train.zero_stage = stage;
  c.train.offload_optimizer = offload;
  c.profile.enabled = false;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 2;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::atoi(argv[++i]);
  std::printf("ZeRO static state per rank, %s params, sp 2 x dp 2 (4 ranks), fp32, CPU, after %d step(s)\n",
              std::to_string(model_config(0, false).model.num_parameters()).c_str(), steps);
  std::printf("%-22s %12s %12s %12s %10s %12s %10s %9s\n", "config", "measured B/p", "plan B/p", "plan MiB",
              "plan/meas", "dry-run B/p", "dry/meas", "step s");
  struct Cfg {
    int64_t stage;
    bool offload;
  };
  for (const Cfg& k :
       {Cfg{0, false}, Cfg{1, false}, Cfg{2, false}, Cfg{3, false}, Cfg{1, true}, Cfg{2, true}, Cfg{3, true}}) {
    const RunConfig cfg = model_config(k.stage, k.offload);
    const double P = static_cast<double>(cfg.model.num_parameters());
    std::vector<int64_t> held(4, 0);
    double step_s = 0;
    std::mutex mu;
    ulysses::testing::run_ranks(4, [&](const DistEnv& env) {
      at::set_num_threads(1);
      Comm comm(env, 2, 2, "gloo", std::chrono::milliseconds(600000));
      MemoryTracker mt;  // this rank's CPU tensors from here on
      Trainer tr(cfg, comm, nullptr);
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) tr.step(s);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lk(mu);
      held[env.rank] = mt.current_bytes();
      if (env.rank == 0) step_s = dt / steps;
    });
    int64_t most = 0;
    for (int64_t h : held) most = std::max(most, h);
    const cost::CostEstimate est = cost::estimate(cfg);
    const double plan = static_cast<double>(est.static_bytes() + est.host_bytes);
    plan::PlanOptions po;
    po.detail = false;
    const plan::MemoryPlan mp = plan::plan_memory(cfg, po);
    // The dry run counts device (meta) memory: offloaded state is not in it.
    const double dry = static_cast<double>(mp.measured_static_bytes + (k.offload ? est.host_bytes : 0));
    const std::string name = "zero_stage " + std::to_string(k.stage) + (k.offload ? " + offload" : std::string());
    std::printf("%-22s %12.2f %12.2f %12.1f %10.3f %12.2f %10.3f %9.2f\n", name.c_str(), most / P, plan / P,
                plan / 1048576.0, plan / static_cast<double>(most), dry / P, dry / static_cast<double>(most), step_s);
    std::fflush(stdout);
  }
  return 0;
}
