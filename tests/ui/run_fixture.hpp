// A small recorded run written by hand, for tests of what the front ends read from a run
// directory: RUN/config.json, RUN/run.json, RUN/metrics.jsonl (exactly as the worker writes
// it) and RUN/trace/rank{r}.sqlite (profiler TraceWriter: step records carrying the same
// per-step figures as rank 0's METRIC lines, ranges with all-to-all bytes, memory samples).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_writer.hpp"

namespace ulysses::test {

struct FixtureStep {
  double step_ms = 0;
  double loss = 0;
  int64_t max_mem_bytes = 0;
};

inline constexpr int64_t kFixtureTokensPerStep = 1024;

// Defaults write the original fixture (one traced layer, no projections). With more layers,
// the forward part of each step (its first 70 %) is cut into slices of width proportional
// to (layer + 1)^2, each holding that layer's ranges at the same relative places, so layer
// l's stage times are (l + 1)^2 / sum((k + 1)^2) times those of the one-layer fixture (the
// median over layers differs from their mean).
struct FixtureOptions {
  int layers = 1;
  bool projections = false;  // qkv_proj at 0-5 % and out_proj at 65-70 % of each slice
  // Merged into the run's config (RUN/config.json and the trace's) as a JSON merge patch
  // (e.g. a ring layout: {"parallel": {"sp_size": 2, "ring_size": 2}}).
  nlohmann::json config_patch = nlohmann::json::object();
};

// Writes a finished run of steps.size() steps on `world` ranks into dir (created).
inline void write_fixture_run(const std::string& dir, int world, const std::vector<FixtureStep>& steps,
                              const FixtureOptions& opt = {}) {
  namespace fs = std::filesystem;
  namespace prof = ulysses::prof;
  fs::create_directories(fs::path(dir) / "trace");
  nlohmann::json cfg = {
      {"model",
       {{"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"hidden_size", 64}, {"num_hidden_layers", 2}}},
      {"parallel", {{"sp_size", world}, {"dp_size", 1}}},
      {"train", {{"steps", steps.size()}, {"seq_length", kFixtureTokensPerStep}}}};
  cfg.merge_patch(opt.config_patch);
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2) << "\n";
  double elapsed = 0;
  std::ofstream metrics(fs::path(dir) / "metrics.jsonl");
  for (size_t s = 0; s < steps.size(); ++s) {
    elapsed += steps[s].step_ms / 1000.0;
    const nlohmann::json j = {{"step", s},
                              {"steps", steps.size()},
                              {"loss", steps[s].loss},
                              {"lr", 1e-3},
                              {"grad_norm", 1.5},
                              {"tokens", kFixtureTokensPerStep},
                              {"tokens_per_s", kFixtureTokensPerStep / (steps[s].step_ms / 1000.0)},
                              {"step_ms", steps[s].step_ms},
                              {"max_mem_bytes", steps[s].max_mem_bytes},
                              {"elapsed_s", elapsed}};
    metrics << j.dump() << "\n";
  }
  const nlohmann::json run = {{"status", "finished"},
                              {"started_at", "2026-11-30T12:00:00.000Z"},
                              {"ended_at", "2026-11-30T12:00:05.000Z"},
                              {"duration_s", elapsed},
                              {"world_size", world},
                              {"exit_code", 0},
                              {"final_loss", steps.back().loss},
                              {"steps_done", steps.size()},
                              {"failed_rank", nullptr},
                              {"message", ""},
                              {"pid", 0}};
  std::ofstream(fs::path(dir) / "run.json") << run.dump(2) << "\n";
  for (int rank = 0; rank < world; ++rank) {
    prof::TracerOptions o;
    o.path = (fs::path(dir) / "trace" / ("rank" + std::to_string(rank) + ".sqlite")).string();
    o.rank = rank;
    o.world_size = world;
    o.sp_rank = rank;
    o.sp_size = world;
    o.run_config_json = cfg.dump();
    prof::TraceWriter w(o, 5000 + rank);
    w.name_thread(100, "main");
    int64_t t = 1'000'000;
    for (size_t s = 0; s < steps.size(); ++s) {
      w.begin();
      const int64_t step_ns = static_cast<int64_t>(steps[s].step_ms * 1e6) + rank * 1000;  // rank 1 a little slower
      const int64_t begin = t;
      // forward: per layer [qkv_proj,] a2a seq->head, attention, a2a head->seq[, out_proj];
      // backward: grad all-reduce
      struct Part {
        prof::Phase phase;
        double from, to;
        bool comm;
        int layer;
      };
      std::vector<Part> parts;
      double wsum = 0;
      for (int l = 0; l < opt.layers; ++l) wsum += (l + 1) * (l + 1);
      double slice0 = 0;
      for (int l = 0; l < opt.layers; ++l) {
        const double width = 0.70 * (l + 1) * (l + 1) / wsum;
        auto at = [&](double f) { return opt.layers == 1 ? f : slice0 + f / 0.70 * width; };
        if (opt.projections) parts.push_back({prof::Phase::QkvProj, at(0.0), at(0.05), false, l});
        parts.push_back({prof::Phase::A2ASeqToHead, at(0.05), at(0.20), true, l});
        parts.push_back({prof::Phase::Attention, at(0.15), at(0.55), false, l});
        parts.push_back({prof::Phase::A2AHeadToSeq, at(0.55), at(0.65), true, l});
        if (opt.projections) parts.push_back({prof::Phase::OutProj, at(0.65), at(0.70), false, l});
        slice0 += width;
      }
      parts.push_back({prof::Phase::GradAllReduce, 0.80, 0.95, true, -1});
      for (const auto& p : parts) {
        prof::RangeRecord r;
        r.start_ns = begin + static_cast<int64_t>(p.from * static_cast<double>(step_ns));
        r.end_ns = begin + static_cast<int64_t>(p.to * static_cast<double>(step_ns));
        r.tid = p.comm ? prof::kCommTid : 100;
        r.push_pop = !p.comm;
        r.step = static_cast<int64_t>(s);
        r.info.phase = p.phase;
        r.info.dir = p.phase == prof::Phase::GradAllReduce ? prof::Direction::Backward : prof::Direction::Forward;
        r.info.layer = p.layer;
        if (p.comm) r.info.bytes_sent = p.phase == prof::Phase::GradAllReduce ? 4096 : 8192;
        w.write_range(r);
      }
      w.write_memory(begin + step_ns / 2, static_cast<int64_t>(s), "after attention",
                     prof::MemorySample{steps[s].max_mem_bytes, steps[s].max_mem_bytes, steps[s].max_mem_bytes});
      prof::StepRecord sr;
      sr.step = static_cast<int64_t>(s);
      sr.loss = steps[s].loss;
      sr.tokens = kFixtureTokensPerStep;
      sr.step_ms = steps[s].step_ms + (rank == 0 ? 0 : 1.0);  // the run's figures are rank 0's
      sr.tokens_per_s = kFixtureTokensPerStep / (sr.step_ms / 1000.0);
      sr.max_mem_bytes = steps[s].max_mem_bytes;
      w.write_step(sr, begin, begin + step_ns);
      w.commit();
      t += step_ns + 100'000;
    }
    w.close();
  }
}

}  // namespace ulysses::test
