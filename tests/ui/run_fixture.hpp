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

// Writes a finished run of steps.size() steps on `world` ranks into dir (created).
inline void write_fixture_run(const std::string& dir, int world, const std::vector<FixtureStep>& steps) {
  namespace fs = std::filesystem;
  namespace prof = ulysses::prof;
  fs::create_directories(fs::path(dir) / "trace");
  const nlohmann::json cfg = {
      {"model", {{"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"hidden_size", 64}, {"num_hidden_layers", 2}}},
      {"parallel", {{"sp_size", world}, {"dp_size", 1}}},
      {"train", {{"steps", steps.size()}, {"seq_length", kFixtureTokensPerStep}}}};
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
  const nlohmann::json run = {{"status", "finished"}, {"started_at", "2026-11-30T12:00:00.000Z"},
                              {"ended_at", "2026-11-30T12:00:05.000Z"}, {"duration_s", elapsed},
                              {"world_size", world}, {"exit_code", 0}, {"final_loss", steps.back().loss},
                              {"steps_done", steps.size()}, {"failed_rank", nullptr}, {"message", ""}, {"pid", 0}};
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
      // forward: a2a seq->head, attention, a2a head->seq; backward: grad all-reduce
      struct Part { prof::Phase phase; double from, to; bool comm; };
      const Part parts[] = {{prof::Phase::A2ASeqToHead, 0.05, 0.20, true},
                            {prof::Phase::Attention, 0.15, 0.55, false},
                            {prof::Phase::A2AHeadToSeq, 0.55, 0.65, true},
                            {prof::Phase::GradAllReduce, 0.80, 0.95, true}};
      for (const auto& p : parts) {
        prof::RangeRecord r;
        r.start_ns = begin + static_cast<int64_t>(p.from * static_cast<double>(step_ns));
        r.end_ns = begin + static_cast<int64_t>(p.to * static_cast<double>(step_ns));
        r.tid = p.comm ? prof::kCommTid : 100;
        r.push_pop = !p.comm;
        r.step = static_cast<int64_t>(s);
        r.info.phase = p.phase;
        r.info.dir = p.phase == prof::Phase::GradAllReduce ? prof::Direction::Backward : prof::Direction::Forward;
        r.info.layer = p.phase == prof::Phase::GradAllReduce ? -1 : 0;
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
