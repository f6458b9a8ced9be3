// Memory benchmark (prints figures; not a test): one training step of a small Llama with a
// 32000-token vocabulary (so the logits matter) on one CPU thread, sp 1, for each
// long-sequence technique against sequence length: peak bytes tracked by MemoryTracker
// (CPU tensor allocations during the step; parameters, optimizer state and the flat
// gradient buffer exist before and are not counted) and step wall time. Then how much of
// a layer's recompute is attention (what keeping attention output + log-sum-exp would skip).
// Beside each measured peak: the memory planner's prediction for the same config (meta-device
// dry run, engine/core/meta_dry_run.hpp), counted the same way (planned peak minus the state
// that exists before the step), and the ratio planned / measured.
//
//   bench_memory [--share-only] [seq lengths...]      default: 512 1024 2048
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "local_attention.hpp"
#include "meta_dry_run.hpp"
#include "memory_tracker.hpp"
#include "trainer.hpp"
#include "common/bench_main.hpp"

using namespace ulysses;

namespace {

// One row of the table; add a column by adding a field here and in print_header / print_row.
struct Row {
  std::string technique;
  int64_t seq = 0;
  int64_t peak_bytes = 0;
  double step_ms = 0;
  double peak_ratio = 0;   // peak / peak of "off" at the same length
  double time_ratio = 0;   // step time / step time of "off"
  int64_t plan_bytes = 0;  // the planner's prediction of peak_bytes
};

void print_header() {
  std::printf("%-22s %7s %12s %9s %10s %9s %12s %10s\n", "technique", "seq", "peak MiB", "x off", "step ms", "x off",
              "plan MiB", "plan/meas");
}
void print_row(const Row& r) {
  std::printf("%-22s %7lld %12.1f %9.2f %10.0f %9.2f %12.1f %10.3f\n", r.technique.c_str(),
              static_cast<long long>(r.seq), r.peak_bytes / 1048576.0, r.peak_ratio, r.step_ms, r.time_ratio,
              r.plan_bytes / 1048576.0,
              static_cast<double>(r.plan_bytes) / static_cast<double>(std::max<int64_t>(1, r.peak_bytes)));
  std::fflush(stdout);
}
void print_table(const std::vector<Row>& rows) {
  print_header();
  for (const auto& r : rows) print_row(r);
}

RunConfig model_config(int64_t seq) {
  RunConfig c;
  c.model.vocab_size = 32000;
  c.model.hidden_size = 64;
  c.model.intermediate_size = 256;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 4;
  c.train.seq_length = seq;
  c.train.steps = 2;
  c.train.attention = "sdpa";
  c.data.kind = "synthetic";
  c.profile.enabled = false;
  return c;
}

struct Technique {
  const char* name;
  void (*apply)(TrainConfig&);
};

double median_ms(const std::function<void()>& f) {
  std::vector<double> v;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[1];
}

// What a layer's recompute costs and how much of it is attention (the part that keeping
// the attention output + log-sum-exp per layer would skip): forward only, no grad,
// medians of 3; layer = (forward with 2 layers - forward with 0 layers) / 2.
void attention_share(const std::vector<int64_t>& seqs) {
  std::printf("\nRecompute of one layer (forward, no grad) and its attention part, medians of 3:\n");
  std::printf("%7s %16s %18s %8s\n", "seq", "layer fwd ms", "attention fwd ms", "share");
  for (int64_t seq : seqs) {
    auto mc = model_config(seq).model;
    LlamaModel two(mc, ParallelConfig{}, torch::kFloat32, nullptr);
    two.init_parameters(1);
    auto mc0 = mc;
    mc0.num_hidden_layers = 0;
    LlamaModel none(mc0, ParallelConfig{}, torch::kFloat32, nullptr);
    none.init_parameters(1);
    torch::NoGradGuard ng;
    auto ids = torch::randint(0, mc.vocab_size, {1, seq}, torch::kInt64);
    const double t2 = median_ms([&] { two.forward_logits(ids, 0); });
    const double t0 = median_ms([&] { none.forward_logits(ids, 0); });
    const int64_t H = mc.num_attention_heads, dh = mc.head_dim();
    auto q = torch::randn({1, H, seq, dh}), k = torch::randn({1, H, seq, dh}), v = torch::randn({1, H, seq, dh});
    const double att = median_ms([&] { causal_attention(q, k, v, AttentionKernel{}); });
    const double layer = (t2 - t0) / 2;
    std::printf("%7lld %16.1f %18.1f %7.0f%%\n", static_cast<long long>(seq), layer, att,
                100.0 * att / std::max(1e-9, layer));
    std::fflush(stdout);
  }
}

}  // namespace

static int bench_main(int argc, char** argv) {
  std::vector<int64_t> seqs;
  bool share_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--share-only")
      share_only = true;
    else
      seqs.push_back(std::atoll(argv[i]));
  }
  if (seqs.empty()) seqs = {512, 1024, 2048};
  at::set_num_threads(1);
  if (share_only) {
    attention_share(seqs);
    return 0;
  }
  const Technique techniques[] = {
      {"off", [](TrainConfig&) {}},
      {"+checkpointing", [](TrainConfig& t) { t.activation_checkpointing = "layer"; }},
      {"+tiled loss (128)", [](TrainConfig& t) { t.loss_chunk_tokens = 128; }},
      {"+TiledMLP (128)", [](TrainConfig& t) { t.mlp_chunk_tokens = 128; }},
      {"all",
       [](TrainConfig& t) {
         t.activation_checkpointing = "layer";
         t.loss_chunk_tokens = 128;
         t.mlp_chunk_tokens = 128;
       }},
  };
  std::printf(
      "Llama: vocab 32000, hidden 64, 2 layers, 4 heads (dh 16), ffn 256, batch 1, sp 1, fp32, 1 thread,\n"
      "SDPA math attention (saves the N x N probabilities). One step after one warm-up step.\n\n");
  std::vector<Row> rows;
  print_header();  // rows as they are measured, then the whole table again
  DistEnv env;
  Comm comm(env, 1, 1, "gloo", std::chrono::milliseconds(600000));
  for (int64_t seq : seqs) {
    Row off;
    for (const auto& t : techniques) {
      auto cfg = model_config(seq);
      t.apply(cfg.train);
      Trainer tr(cfg, comm, nullptr);
      tr.step(0);  // warm-up
      Row r;
      r.technique = t.name;
      r.seq = seq;
      {
        MemoryTracker mt;
        const auto t0 = std::chrono::steady_clock::now();
        tr.step(1);
        r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        r.peak_bytes = mt.peak_bytes();
      }
      if (rows.empty() || rows.back().seq != seq) off = r;
      r.peak_ratio = static_cast<double>(r.peak_bytes) / static_cast<double>(off.peak_bytes);
      {
        plan::PlanOptions po;
        po.detail = false;
        const plan::MemoryPlan plan = plan::plan_memory(cfg, po);
        r.plan_bytes = plan.peak_bytes - plan.measured_static_bytes;  // the step's peak above the state held before it
      }
      r.time_ratio = r.step_ms / off.step_ms;
      rows.push_back(r);
      print_row(r);
    }
  }
  std::printf("\n");
  print_table(rows);

  attention_share(seqs);
  return 0;
}

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "usage: bench_memory [--share-only] [seq lengths...]   (default: 512 1024 2048)\n  peak memory and step time per "
      "long-sequence technique, with the planner's prediction",
      argc, argv, [&] { return bench_main(argc, argv); });
}
