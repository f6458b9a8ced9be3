// ulysses-worker --plan: the memory planner (engine/core/meta_dry_run.hpp) as a command.
// Dry-runs one rank's training step on the meta device; starts no process group.
//   ulysses-worker --plan --config CONFIG [--set key=value]... [--json] [--max-seq GIB | --gpu-gib GIB] [--tflops T]
// Exit codes: 0 done, 2 bad input, 1 failure.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "cost_model.hpp"
#include "meta_dry_run.hpp"
#include "run_config.hpp"

namespace ulysses {

int plan_command(int argc, char** argv) {
  CLI::App app{
      "ulysses-worker --plan: memory plan of one rank's training step (meta-device dry run of the real model code)"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool plan = false, as_json = false;
  double max_seq_gib = 0, tflops = 0, gpu_gib = 0;
  app.add_flag("--plan", plan, "print the memory plan instead of training");
  app.add_option("--config", config_path, "run config JSON")->required();
  app.add_option("--set", overrides, "override a config key, e.g. --set train.seq_length=65536");
  app.add_flag("--json", as_json, "print the plan as one JSON object");
  app.add_option("--max-seq", max_seq_gib,
                 "answer the longest seq_length whose planned peak fits in this many GiB per rank");
  app.add_option("--tflops", tflops,
                 "sustained TFLOP/s of one rank: also print the step's compute time (FLOPs as the cost model counts)");
  app.add_option("--gpu-gib", gpu_gib,
                 "whether the plan fits a GPU of this many GiB per rank (the allocator replayed at that limit, as "
                 "--max-seq searches)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    RunConfig cfg = load_run_config(config_path, overrides);
    throw_if_invalid(validate(cfg));
    // At most 1 PiB (2^20 GiB): the byte count must fit in int64 (1e10 GiB wrapped to a
    // negative limit and answered "none fits" with exit 0).
    if (app.count("--max-seq") && !(max_seq_gib > 0 && max_seq_gib <= 1048576.0))
      throw ConfigError("--max-seq must be a number of GiB per rank between 0 and 1048576 (1 PiB), got " +
                        std::to_string(max_seq_gib));
    if (!(tflops >= 0 && tflops <= 1e9))
      throw ConfigError("--tflops must be a throughput per rank in TFLOP/s (0 to 1e9), got " + std::to_string(tflops));
    if (app.count("--gpu-gib") && !(gpu_gib > 0 && gpu_gib <= 1048576.0))
      throw ConfigError("--gpu-gib must be a number of GiB per rank between 0 and 1048576 (1 PiB), got " +
                        std::to_string(gpu_gib));
    if (app.count("--gpu-gib") && app.count("--max-seq"))
      throw ConfigError("--gpu-gib and --max-seq both name the device: give one (--max-seq plans its answer at it)");
    if (app.count("--gpu-gib")) {
      // The one rule of plan::fits_device: the allocator replayed at the device's limit, the
      // GPU total (or a CPU plan's peak) against it less the headroom, as --max-seq decides.
      const auto limit = static_cast<int64_t>(gpu_gib * 1024.0 * 1024.0 * 1024.0);
      plan::MemoryPlan p;
      const bool fits = plan::fits_device(cfg, limit, {}, &p);
      json j = plan::plan_to_json(p);
      j["gpu_limit_bytes"] = limit;
      j["fits"] = fits;
      const std::string verdict =
          std::string("  fits ") + cost::format_bytes(double(limit)) + " per rank (allocator replayed at that limit, " +
          std::to_string(static_cast<int>(cost::kGpuHeadroom * 100)) + "% headroom): " + (fits ? "yes" : "no") + "\n";
      std::cout << (as_json ? j.dump() + "\n" : plan::plan_to_text(p) + verdict) << std::flush;
      return 0;
    }
    if (app.count("--max-seq")) {
      const auto limit = static_cast<int64_t>(max_seq_gib * 1024.0 * 1024.0 * 1024.0);
      const int64_t N = plan::max_seq_length(cfg, limit);
      json j = {{"limit_bytes", limit}, {"max_seq_length", N}};
      std::string text =
          "longest train.seq_length whose planned peak fits in " + cost::format_bytes(double(limit)) + " per rank: ";
      if (N > 0) {
        cfg.train.seq_length = N;
        plan::PlanOptions po;
        po.gpu_limit_bytes = limit;  // the allocator replay at this device's size, as the search ran it
        po.tflops_per_rank = tflops;
        const auto p = plan::plan_memory(cfg, po);
        j["plan"] = plan::plan_to_json(p);
        j["peak_bytes"] = p.peak_bytes;
        j["activation_bytes"] = p.activation_bytes;
        text += std::to_string(N) + " tokens (planned peak " + cost::format_bytes(double(p.peak_bytes)) + ")\n" +
                plan::plan_to_text(p);
      } else {
        text += "none (not even " + std::to_string(cfg.parallel.sp_size) + " tokens fit)\n";
      }
      std::cout << (as_json ? j.dump() + "\n" : text) << std::flush;
      return 0;
    }
    plan::PlanOptions po;
    po.tflops_per_rank = tflops;
    const auto p = plan::plan_memory(cfg, po);
    std::cout << (as_json ? plan::plan_to_json(p).dump() + "\n" : plan::plan_to_text(p)) << std::flush;
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "ulysses-worker --plan: " << e.what() << std::endl;
    return 2;
  } catch (const c10::Error& e) {  // libtorch's message without its C++ stack (16 frame lines)
    std::cerr << "ulysses-worker --plan: error: " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ulysses-worker --plan: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace ulysses
