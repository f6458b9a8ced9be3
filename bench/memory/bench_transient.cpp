// Transient-memory benchmark (prints figures; not a test; docs/LONG_SEQUENCES.md "Transient per
// token"): what a training step holds above the state and the kept activations, per token, on a
// CPU rank (sp 1, this process, one thread), for a base config and each cut applied on top of the
// ones before it, side by side in one run, beside the memory planner's figure for the same config.
//
//   transient = peak of the step - live bytes right after the forward
//
// both measured (every CPU tensor storage counted by the counting allocator, memory_categories.hpp)
// and planned (the meta-device dry run of the same config, counted the same way). Each row also
// names the largest groups alive at the measured peak (memory_labels.hpp).
//
//   bench_transient [--set k=v]... [--variant NAME [--set k=v]...]...
//
// --set before any --variant changes the base; each --variant adds a row whose --set values apply
// on top of the base and of every variant before it (a cut's config fields). Without --variant
// the rows are the cuts this build has: activation checkpointing, tiled loss, TiledMLP, and the
// all-to-all exchange of two head chunks (sp 1: a copy), the path whose buffers issue 48 cut.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/bench_main.hpp"
#include "memory_categories.hpp"
#include "memory_labels.hpp"
#include "meta_dry_run.hpp"
#include "trainer.hpp"

using namespace ulysses;

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> sets;
};

// A Llama whose layers, not its vocabulary, make the transient: hidden 256, 4 layers, 8 heads
// with 4 kv heads, ffn 1024, vocab 8000, 4096 tokens, fp32.
json base_config() {
  RunConfig c;
  c.model.vocab_size = 8000;
  c.model.hidden_size = 256;
  c.model.intermediate_size = 1024;
  c.model.num_hidden_layers = 4;
  c.model.num_attention_heads = 8;
  c.model.num_key_value_heads = 4;
  c.train.seq_length = 4096;
  c.train.steps = 2;
  c.train.device = "cpu";
  c.train.threads_per_rank = 1;
  c.data.kind = "synthetic";
  c.profile.enabled = false;
  return c.to_json();
}

// The planner's view of the trainer's memory samples, for a real CPU step: the live counted bytes
// at "after_forward" (the first micro-batch's), and the ranges that name what is allocated.
class AfterForwardTracer final : public prof::Tracer {
 public:
  int64_t after_forward = -1;
  void begin_step(int64_t) override {}
  void end_step(const prof::StepRecord&) override {}
  bool active() const override { return true; }
  void push(const prof::RangeInfo& info) override { mem::push_range(info.phase, info.dir, info.layer); }
  void pop() override { mem::pop_range(); }
  void record_range(const prof::RangeInfo&, int64_t, int64_t, int32_t) override {}
  void sample_memory(const char* label, const prof::MemorySample&) override {
    if (after_forward < 0 && std::string(label) == "after_forward") after_forward = mem::cpu().live().total();
  }
  void set_metric(const std::string&, double) override {}
  void close() override {}
};

struct Row {
  std::string name;
  int64_t tokens = 0;
  int64_t measured_peak = 0, measured_transient = 0;
  int64_t planned_peak = 0, planned_transient = 0;
  double step_s = 0;
  std::vector<mem::TensorGroup> top;
};

Row measure(const std::string& name, const RunConfig& cfg, Comm& comm) {
  Row r;
  r.name = name;
  r.tokens = cfg.train.seq_length / cfg.parallel.seq_ranks() * cfg.train.micro_batch_size;
  {
    plan::PlanOptions po;
    po.detail = false;
    const plan::MemoryPlan p = plan::plan_memory(cfg, po);
    // the same decomposition as measured: the peak above the live bytes after the forward
    // (the state held, the kept activations, the step's inputs)
    const int64_t inputs = 2 * r.tokens * 8;
    r.planned_peak = p.peak_bytes;
    r.planned_transient = p.peak_bytes - p.measured_static_bytes - p.activation_bytes - inputs;
  }
  const int64_t base = mem::cpu().live().total();
  AfterForwardTracer tracer;
  {
    Trainer tr(cfg, comm, &tracer);
    tr.step(0);  // creates the AdamW state
    tracer.after_forward = -1;
    mem::cpu().reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    tr.step(1);
    r.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.measured_peak = mem::cpu().peak() - base;
    r.measured_transient = mem::cpu().peak() - tracer.after_forward;
    r.top = mem::name_groups(mem::cpu().at_peak_groups());
  }
  return r;
}

void print_row(const Row& r, const Row& first) {
  const double mt = double(r.measured_transient) / double(r.tokens),
               pt = double(r.planned_transient) / double(r.tokens);
  std::printf("%-28s %10.0f %8.2f %10.0f %9.3f %11.1f %11.1f %8.2f\n", r.name.c_str(), mt,
              mt / (double(first.measured_transient) / double(first.tokens)), pt, pt / std::max(1.0, mt),
              double(r.measured_peak) / 1048576.0, double(r.planned_peak) / 1048576.0, r.step_s);
  std::fflush(stdout);
}

int bench_main(int argc, char** argv) {
  std::vector<std::string> base_sets;
  std::vector<Variant> variants;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--variant" && i + 1 < argc) {
      variants.push_back({argv[++i], {}});
    } else if (a == "--set" && i + 1 < argc) {
      (variants.empty() ? base_sets : variants.back().sets).push_back(argv[++i]);
    } else {
      throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
    }
  }
  if (variants.empty())
    variants = {{"+activation checkpointing", {"train.activation_checkpointing=layer"}},
                {"+tiled loss (512)", {"train.loss_chunk_tokens=512"}},
                {"+TiledMLP (512)", {"train.mlp_chunk_tokens=512"}},
                // the all-to-all path at sp 1 (each head chunk's exchange is a copy): what its
                // buffers add per token now that each send buffer is freed once it is sent
                {"+head chunks 2 (exchange)", {"parallel.head_chunks=2"}}};
  at::set_num_threads(1);
  mem::install_cpu_counting();
  json cfg = base_config();
  for (const auto& s : base_sets) apply_override(cfg, s);
  std::vector<std::pair<std::string, RunConfig>> rows{{"base", RunConfig::from_json(cfg)}};
  for (const auto& v : variants) {
    for (const auto& s : v.sets) apply_override(cfg, s);
    rows.emplace_back(v.name, RunConfig::from_json(cfg));
  }
  for (auto& [name, c] : rows) throw_if_invalid(validate(c));
  const RunConfig& b = rows.front().second;
  std::printf(
      "Transient per token on one CPU rank: Llama hidden %lld, %lld layers, %lld heads (%lld kv), ffn %lld, vocab "
      "%lld, "
      "%lld tokens, %s, attention %s; each row adds its cut to the rows above. transient = step peak - live after "
      "forward.\n\n",
      (long long)b.model.hidden_size, (long long)b.model.num_hidden_layers, (long long)b.model.num_attention_heads,
      (long long)b.model.num_key_value_heads, (long long)b.model.intermediate_size, (long long)b.model.vocab_size,
      (long long)b.train.seq_length, b.train.dtype.c_str(), b.train.attention.c_str());
  std::printf("%-28s %10s %8s %10s %9s %11s %11s %8s\n", "config", "meas B/tok", "x base", "plan B/tok", "plan/meas",
              "meas peak", "plan peak", "step s");
  std::vector<Row> measured;
  Comm comm(DistEnv{}, 1, 1, "gloo", std::chrono::milliseconds(600000));
  for (const auto& [name, c] : rows) {
    measured.push_back(measure(name, c, comm));
    print_row(measured.back(), measured.front());
  }
  std::printf("\nLargest groups alive at each measured peak (CPU counting allocator, named as the plan names them):\n");
  for (const Row& r : measured) {
    std::printf("  %s\n", r.name.c_str());
    for (size_t i = 0; i < r.top.size() && i < 4; ++i)
      std::printf("    %10.1f MiB  %-13s %s\n", double(r.top[i].bytes) / 1048576.0, r.top[i].category.c_str(),
                  r.top[i].name.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_transient [--set k=v]... [--variant NAME [--set k=v]...]...\n"
      "  transient bytes per token (step peak - live after forward) measured on one CPU rank and planned, for a base\n"
      "  config and each variant applied on top of the ones before it (default: checkpointing, tiled loss, TiledMLP,\n"
      "  two head chunks)",
      argc, argv, [&] { return bench_main(argc, argv); });
}
