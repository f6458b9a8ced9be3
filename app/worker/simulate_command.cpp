// ulysses-worker --simulate / --calibrate: the step simulator (engine/sim) as commands.
//   ulysses-worker --simulate HW --config CONFIG [--set key=value]... --out DIR [--json]
//   ulysses-worker --simulate list
//   ulysses-worker --calibrate RUN --simulate HW --out FILE.json
// The step program is recorded here, from the engine itself: a Trainer over Comm::shape_only
// runs Trainer::step on the meta device (as the memory planner does, meta_dry_run.hpp) with a
// sim::RecordingTracer; the second step is kept. Then engine/sim replays it on the hardware
// and writes a run folder (or fits a hardware description to a measured run).
// Exit codes: 0 done, 2 bad input, 1 failure.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "comm.hpp"
#include "data.hpp"
#include "meta_dry_run.hpp"
#include "run_config.hpp"
#include "simulated_run.hpp"
#include "trainer.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses {

namespace {

// The configuration as the hardware runs it: a GPU description plans and records for CUDA
// (flash attention's shapes), a CPU one for the CPU.
RunConfig for_hardware(RunConfig cfg, const sim::Hardware& hw) {
  cfg.train.device = hw.shared_compute ? "cpu" : "cuda";
  cfg.train.init_from.clear();
  return cfg;
}

// One rank's step, recorded from Trainer::step on meta (the second step: the first makes the
// optimizer state).
sim::StepProgram record_step(const RunConfig& cfg) {
  Comm comm = Comm::shape_only(0, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size),
                               static_cast<int>(cfg.parallel.ring_size));
  sim::RecordingTracer rec;
  comm.set_tracer(&rec);  // the untraced scalar collectives (loss sum, peak memory), where the ranks wait
  TrainerOptions o;
  o.plan_for_cuda = cfg.train.device == "cuda";
  o.data = TokenSource::zeros(cfg.train.seq_length + 1);
  Trainer tr(cfg, comm, &rec, o);
  tr.step(0);
  rec.on = true;
  tr.step(1);
  rec.on = false;
  return rec.build();
}

sim::SimulatedRun prepare(const RunConfig& user_cfg, const sim::Hardware& hw, bool with_plan, double* record_s) {
  sim::SimulatedRun run;
  run.cfg = for_hardware(user_cfg, hw);
  run.hw = hw;
  const auto t0 = std::chrono::steady_clock::now();
  run.program = record_step(run.cfg);
  *record_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (with_plan) {  // the memory view's planned figures
    plan::PlanOptions po;
    po.detail = false;
    const plan::MemoryPlan p = plan::plan_memory(run.cfg, po);
    run.has_plan = true;
    run.planned = p.peak_categories;
    run.curve = p.curve;
  }
  return run;
}

int list_hardware() {
  std::cout << "Shipped hardware descriptions (" << sim::hardware_dir() << "):\n";
  for (const auto& n : sim::shipped_hardware()) {
    const sim::Hardware h = sim::load_hardware(n);
    std::cout << "  " << n << "  " << h.description << "\n";
  }
  std::cout << "Or give the path of a JSON file (e.g. one ulysses-run --calibrate wrote).\n";
  return 0;
}

}  // namespace

int simulate_command(int argc, char** argv) {
  CLI::App app{"ulysses-worker --simulate: one training step simulated on hardware you may not have (engine/sim)"};
  std::string hw_name, config_path, out, calibrate_run;
  std::vector<std::string> overrides;
  bool as_json = false, no_plan = false;
  double background = -1;  // < 0: the description's own background_load
  int steps = 0;           // 0: 3 steps, 1 above 64 ranks (every rank file holds each step)
  app.add_option("--simulate", hw_name, "hardware: a shipped name (list: --simulate list) or a JSON file")->required();
  app.add_option("--config", config_path, "run config JSON");
  app.add_option("--set", overrides, "override a config key, e.g. --set train.seq_length=65536");
  app.add_option("--out", out, "run folder to write (with --calibrate: the hardware JSON file to write)");
  app.add_option("--calibrate", calibrate_run, "fit the hardware's efficiencies and link to this measured run");
  app.add_option("--steps", steps, "simulated steps written (identical; default 3, 1 above 64 ranks)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--json", as_json, "print the result as one JSON object");
  app.add_flag("--no-plan", no_plan, "leave the memory planner's figures out of the simulated run");
  app.add_option("--background-load", background,
                 "CPU ranks: other runnable processes sharing the cores (the machine's load besides the run; with "
                 "--calibrate: during the measured run)")
      ->check(CLI::Range(0.0, 1e4));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (hw_name == "list") return list_hardware();
    sim::Hardware hw = sim::load_hardware(hw_name);
    if (background >= 0) hw.background_load = background;
    if (out.empty()) throw ConfigError("--simulate needs --out (the run folder, or with --calibrate the JSON file)");
    if (!calibrate_run.empty()) {
      if (!config_path.empty() || !overrides.empty())
        throw ConfigError("--calibrate takes the measured run's own config (" +
                          run_layout::config(calibrate_run).string() + "); leave out --config and --set");
      const std::string cfg_file = run_layout::config(calibrate_run).string();
      if (!std::filesystem::is_regular_file(cfg_file))
        throw ConfigError("--calibrate " + calibrate_run + ": no " + cfg_file + " (is it a run folder?)");
      RunConfig cfg = load_run_config(cfg_file, {});
      throw_if_invalid(validate(cfg));
      double record_s = 0;
      const sim::SimulatedRun run = prepare(cfg, hw, false, &record_s);
      std::string report;
      const sim::Hardware fitted = sim::calibrate(run, calibrate_run, &report);
      ulysses::write_file_atomically(out, fitted.to_json().dump(2) + "\n");
      std::cout << "calibrated " << hw.name << " to " << calibrate_run << ":\n" << report << "wrote " << out << "\n";
      return 0;
    }
    if (config_path.empty()) throw ConfigError("--simulate needs a run config (--config CONFIG)");
    RunConfig cfg = load_run_config(config_path, overrides);
    throw_if_invalid(validate(cfg));
    double record_s = 0;
    const sim::SimulatedRun run = prepare(cfg, hw, !no_plan, &record_s);
    if (steps == 0) steps = cfg.parallel.world_size() > 64 ? 1 : 3;
    const sim::WriteStats st = sim::write_simulated_run(out, run, steps);
    const double step_ms = double(st.result.step_ns) / 1e6;
    const int64_t tokens = cfg.train.seq_length * cfg.train.micro_batch_size *
                           std::max<int64_t>(1, cfg.train.gradient_accumulation_steps) * cfg.parallel.dp_size;
    if (as_json) {
      std::cout << json{{"hardware", hw.name},
                        {"world_size", cfg.parallel.world_size()},
                        {"step_ms", step_ms},
                        {"tokens_per_s", double(tokens) / (step_ms / 1e3)},
                        {"compute_ms", st.result.own_compute_s * 1e3},
                        {"comm_ms", st.result.comm_s * 1e3},
                        {"record_s", record_s},
                        {"simulate_s", st.simulate_s},
                        {"write_s", st.write_s},
                        {"ranges_per_rank", st.ranges_per_rank},
                        {"out", out}}
                       .dump()
                << std::endl;
      return 0;
    }
    char line[512];
    std::snprintf(line, sizeof line,
                  "simulated on %s: %lld ranks (sp %lld x ring %lld x dp %lld), seq %lld: step %.2f ms, %.0f tok/s "
                  "(compute %.2f ms, collectives %.2f ms before overlap)\n"
                  "  recorded from the meta-device dry run in %.2f s, simulated in %.3f s, wrote %lld rank files "
                  "(%lld ranges each) in %.2f s\n",
                  hw.name.c_str(), static_cast<long long>(cfg.parallel.world_size()),
                  static_cast<long long>(cfg.parallel.sp_size), static_cast<long long>(cfg.parallel.ring_size),
                  static_cast<long long>(cfg.parallel.dp_size), static_cast<long long>(cfg.train.seq_length), step_ms,
                  double(tokens) / (step_ms / 1e3), st.result.own_compute_s * 1e3, st.result.comm_s * 1e3, record_s,
                  st.simulate_s, static_cast<long long>(st.rank_files), static_cast<long long>(st.ranges_per_rank),
                  st.write_s);
    std::cout << line << "Simulated run folder: " << out << "  (ulysses-trace summary " << out << ")\n";
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "ulysses-worker --simulate: " << e.what() << std::endl;
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "ulysses-worker --simulate: " << e.what() << std::endl;
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ulysses-worker --simulate: error: " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ulysses-worker --simulate: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace ulysses
