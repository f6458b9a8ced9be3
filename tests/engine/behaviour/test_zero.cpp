// ZeRO stages 1, 2 and 3 (and offload_optimizer) against the replicated run: the same losses
// for 3 steps and the same weights after them (fp32, 1e-5 relative) at sp 2 x dp 2 and sp 4;
// stage 3 with the memory techniques, accumulation, tied embeddings and a ring too, and with
// test faults (a skipped reduce-scatter, a prefetch of the wrong layer) that the checks catch;
// the sharded AdamW against torch::optim::AdamW; Gloo's reduce-scatter (built from an
// all-to-all) and all-gather against sums computed here; the config's refusals.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "checkpoint_layout.hpp"
#include "engine/rank_threads.hpp"
#include "train_state.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/tracer.hpp"
#include "trainer.hpp"
#include "zero_optimizer.hpp"

using namespace ulysses;
using ulysses::testing::run_ranks;

namespace {

RunConfig tiny(int64_t sp, int64_t dp, int64_t stage, bool offload) {
  RunConfig c;
  c.model.vocab_size = 64;
  c.model.hidden_size = 32;
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 4;
  c.parallel.sp_size = sp;
  c.parallel.dp_size = dp;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;
  c.train.steps = 3;
  c.train.lr = 1e-2;
  c.train.warmup_steps = 1;
  c.train.min_lr = 1e-3;
  c.train.grad_clip = 0.5;  // clipping is active: the sharded norm matters
  c.train.zero_stage = stage;
  c.train.offload_optimizer = offload;
  c.profile.enabled = false;
  return c;
}

struct RunResult {
  std::vector<double> losses, norms;
  std::map<std::string, at::Tensor> weights;  // rank 0's parameters after the steps
  std::vector<std::map<std::string, at::Tensor>> all_weights;
};

struct Gathers {
  int64_t prefetches = 0, on_demand = 0;  // rank 0's stage-3 gathers
};

RunResult train(const RunConfig& cfg, int steps, Zero3Fault fault = Zero3Fault::None, Gathers* gathers = nullptr) {
  RunResult res;
  std::mutex mu;
  const int W = static_cast<int>(cfg.parallel.world_size());
  res.all_weights.resize(W);
  run_ranks(W, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
              std::chrono::milliseconds(60000), static_cast<int>(cfg.parallel.ring_size));
    Trainer tr(cfg, comm, nullptr);
    if (tr.zero3()) tr.zero3()->set_fault(fault);
    std::vector<double> losses, norms;
    for (int s = 0; s < steps; ++s) {
      auto m = tr.step(s);
      losses.push_back(m.loss);
      norms.push_back(m.grad_norm);
    }
    if (env.rank == 0 && gathers && tr.zero3()) *gathers = {tr.zero3()->prefetches(), tr.zero3()->on_demand()};
    std::map<std::string, at::Tensor> w;
    for (auto& [n, p] : tr.gathered_parameters()) w[n] = p;  // stage 3: gathered (every rank)
    std::lock_guard<std::mutex> lk(mu);
    res.all_weights[env.rank] = w;
    if (env.rank == 0) {
      res.losses = losses;
      res.norms = norms;
      res.weights = w;
    }
  });
  return res;
}

// The largest relative difference of got from ref: losses, grad norms, and every weight against
// the largest weight of its tensor (what expect_same holds to 1e-5).
double worst(const RunResult& ref, const RunResult& got) {
  double w = 0;
  for (size_t s = 0; s < ref.losses.size() && s < got.losses.size(); ++s) {
    w = std::max(w, std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]));
    w = std::max(w, std::abs(got.norms[s] - ref.norms[s]) / std::abs(ref.norms[s]));
  }
  for (const auto& [n, t] : ref.weights)
    w = std::max(w, (got.weights.at(n) - t).abs().max().item<double>() / t.abs().max().item<double>());
  return w;
}

void expect_same(const RunResult& ref, const RunResult& got, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << what << " loss of step " << s;
    EXPECT_NEAR(got.norms[s], ref.norms[s], 1e-5 * std::abs(ref.norms[s])) << what << " grad norm of step " << s;
  }
  for (const auto& [n, w] : ref.weights) {
    const double scale = w.abs().max().item<double>();
    const double err = (got.weights.at(n) - w).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * scale) << what << ": " << n << " differs by " << err << " (largest weight " << scale
                                 << "); first values " << got.weights.at(n).flatten().slice(0, 0, 3) << " vs "
                                 << w.flatten().slice(0, 0, 3);
  }
  // Every rank ends with the same (all-gathered) weights.
  for (size_t r = 1; r < got.all_weights.size(); ++r)
    for (const auto& [n, w] : got.weights)
      EXPECT_TRUE(torch::equal(got.all_weights[r].at(n), w)) << what << ": rank " << r << " holds another " << n;
}

void stages_match_replicated(int64_t sp, int64_t dp) {
  const RunResult ref = train(tiny(sp, dp, 0, false), 3);
  ASSERT_GT(ref.losses.front(), ref.losses.back()) << "the reference must learn";
  // The weights moved: a comparison with the initial weights would fail.
  const RunResult fresh = train(tiny(sp, dp, 0, false), 0);
  EXPECT_GT(
      (fresh.weights.at("model.layers.0.mlp.up_proj.weight") - ref.weights.at("model.layers.0.mlp.up_proj.weight"))
          .abs()
          .max()
          .item<double>(),
      1e-3);
  const std::string at = "sp " + std::to_string(sp) + " x dp " + std::to_string(dp);
  expect_same(ref, train(tiny(sp, dp, 1, false), 3), "zero_stage 1, " + at);
  expect_same(ref, train(tiny(sp, dp, 2, false), 3), "zero_stage 2, " + at);
  expect_same(ref, train(tiny(sp, dp, 1, true), 3), "zero_stage 1 + offload_optimizer, " + at);
  expect_same(ref, train(tiny(sp, dp, 2, true), 3), "zero_stage 2 + offload_optimizer, " + at);
  // Stage 3: every layer gathered before its forward and backward, prefetched while the one
  // before computes (every gather but the first of each step's forward), gradients
  // reduce-scattered per layer.
  Gathers g;
  expect_same(ref, train(tiny(sp, dp, 3, false), 3, Zero3Fault::None, &g), "zero_stage 3, " + at);
  const int64_t L = tiny(sp, dp, 3, false).model.num_hidden_layers;
  EXPECT_EQ(g.on_demand, 3) << "the embedding, once a step";
  EXPECT_EQ(g.prefetches, 3 * (2 * L + 1)) << "forward: the layers and the head; backward: the layers";
  expect_same(ref, train(tiny(sp, dp, 3, true), 3), "zero_stage 3 + offload_optimizer, " + at);
  // train.offload_gradients (default on): with offload_optimizer the gradient shard lives in CPU
  // memory (on a CPU run the same memory: the branches that add each reduce-scatter into it and
  // take the norm there run); off keeps it on the device as before.
  RunConfig on_device = tiny(sp, dp, 3, true);
  on_device.train.offload_gradients = false;
  expect_same(ref, train(on_device, 3), "zero_stage 3 + offload_optimizer, gradient shard on the device, " + at);
}

}  // namespace

TEST(Zero, StagesMatchTheReplicatedRunAtSp2Dp2) { stages_match_replicated(2, 2); }
TEST(Zero, StagesMatchTheReplicatedRunAtSp4) { stages_match_replicated(4, 1); }

// Stage 3 under what else changes when a layer's weights are needed: activation checkpointing
// (the recompute inside backward) with offloaded inputs, TiledMLP and the tiled loss (the
// head's gradients made in forward), two micro-batches (a reduce-scatter per micro-batch,
// summed), tied embeddings (the head's weight is the embedding's unit), offload_params, a ring.
TEST(Zero, Stage3MatchesWithMemoryTechniquesAccumulationTiedEmbeddingsAndRing) {
  auto with = [](RunConfig c) {
    c.train.activation_checkpointing = "layer";
    c.train.offload_activations = true;
    c.train.loss_chunk_tokens = 5;
    c.train.mlp_chunk_tokens = 6;
    c.train.gradient_accumulation_steps = 2;
    return c;
  };
  {
    const RunResult ref = train(with(tiny(2, 2, 0, false)), 3);
    expect_same(ref, train(with(tiny(2, 2, 3, false)), 3), "zero_stage 3, checkpointing, tiled, 2 micro-batches");
  }
  {
    RunConfig c = tiny(2, 2, 0, false);
    c.model.tie_word_embeddings = true;
    const RunResult ref = train(c, 3);
    c.train.zero_stage = 3;
    expect_same(ref, train(c, 3), "zero_stage 3, tied embeddings");
    c.train.activation_checkpointing = "layer";
    c.train.loss_chunk_tokens = 5;
    expect_same(ref, train(c, 3), "zero_stage 3, tied embeddings, checkpointing, tiled loss");
  }
  {
    // offload_params: the shard in CPU memory between uses (on a CPU run the same memory; the
    // branches that copy it up and step it run), alone and with offload_optimizer.
    const RunConfig plain = tiny(2, 2, 0, false);
    const RunResult ref = train(plain, 3);
    RunConfig c = tiny(2, 2, 3, false);
    c.train.offload_params = true;
    expect_same(ref, train(c, 3), "zero_stage 3 + offload_params");
    c.train.offload_optimizer = true;
    expect_same(ref, train(c, 3), "zero_stage 3 + offload_params + offload_optimizer");
  }
  {
    RunConfig c = tiny(2, 1, 0, false);
    c.parallel.ring_size = 2;
    const RunResult ref = train(c, 3);
    c.train.zero_stage = 3;
    expect_same(ref, train(c, 3), "zero_stage 3, sp 2 x ring 2");
    c.train.offload_optimizer = true;  // with offload_gradients (the default): the gradient shard in CPU memory
    expect_same(ref, train(c, 3), "zero_stage 3 + offload_optimizer, sp 2 x ring 2");
  }
  {
    // One rank (sp 1): the gradient shard in CPU memory and on the device against stage 0.
    const RunResult ref = train(tiny(1, 1, 0, false), 3);
    expect_same(ref, train(tiny(1, 1, 3, true), 3), "zero_stage 3 + offload_optimizer, sp 1");
    RunConfig c = tiny(1, 1, 3, true);
    c.train.offload_gradients = false;
    expect_same(ref, train(c, 3), "zero_stage 3 + offload_optimizer, gradient shard on the device, sp 1");
  }
  {
    // Tiled projections (proj_chunk_tokens): the tile functions read the gathered weights in
    // forward, in the recompute and in each tile's backward.
    RunConfig c = with(tiny(2, 2, 0, false));
    const RunResult ref = train(c, 3);
    c.train.zero_stage = 3;
    c.train.offload_optimizer = true;
    c.train.proj_chunk_tokens = 3;
    expect_same(ref, train(c, 3), "zero_stage 3 + offload_optimizer, checkpointing, tiled projections");
  }
}

namespace {
// One stage-3 run's figures: rank r's gradient shard after the first backward (fp32, divided by
// the token count: what AdamW steps), the losses of `steps` steps, and rank 0's largest
// gathered + gradient-buffer bytes (Zero3Params::peak_gathered_bytes) over the first step.
struct GradRun {
  std::vector<at::Tensor> shards;
  std::vector<double> losses;
  int64_t peak_gathered = 0;
};

GradRun grad_run(const RunConfig& cfg, int steps) {
  GradRun res;
  std::mutex mu;
  const int W = static_cast<int>(cfg.parallel.world_size());
  res.shards.resize(W);
  run_ranks(W, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
              std::chrono::milliseconds(60000), static_cast<int>(cfg.parallel.ring_size));
    Trainer tr(cfg, comm, nullptr);
    tr.zero3()->reset_peak();
    tr.loss_and_grads(0);
    const at::Tensor g = tr.zero3()->grad_shard().clone();
    const int64_t peak = tr.zero3()->peak_gathered_bytes();
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(tr.step(s).loss);
    std::lock_guard<std::mutex> lk(mu);
    res.shards[env.rank] = g;
    if (env.rank == 0) {
      res.losses = losses;
      res.peak_gathered = peak;
    }
  });
  return res;
}

double rel_norm(const GradRun& ref, const GradRun& got) {
  const at::Tensor a = torch::cat(ref.shards), b = torch::cat(got.shards);
  return (b - a).norm().item<double>() / a.norm().item<double>();
}
}  // namespace

// train.grad_accum_dtype (auto: bf16 unit gradients in bf16 training) and grad_reduce_dtype:
// the cut exists only in bf16 training, so it is held against the same bf16 run with fp32 unit
// gradients (grad_accum_dtype=float32, the engine before the cut), at sp 1, 2, 4 and sp 2 x
// ring 2. In bf16 training each weight's gradient arrives as a bf16 value (the cast's backward
// widens it exactly), so a buffer that takes one gradient per weight and backward holds it
// exactly: with the fp32 wire the gradients and losses equal the fp32 buffers' (1e-5; with tiled
// projections too: a tiled weight's gradient arrives summed). What rounds: two uses of a weight
// in one backward (tied embeddings: the head's gradient is added to the embedding's in bf16),
// and a bf16 wire at W > 1 (the sum over ranks in bf16): there the
// tolerance is bf16's, 2^-9 relative per rounding: the gradient shard's difference within 1e-2
// of its norm, and not zero (the cut ran), the losses of 3 steps within 1e-3. Both wires lower
// the gathered bytes' peak. A float32 run: auto keeps fp32, bit for bit.
TEST(Zero, Bf16UnitGradientsMatchFloat32OnesAtSp124AndRing2) {
  struct Case {
    int64_t sp, ring;
    bool tiled, tied;
  };
  for (const Case k : {Case{1, 1, false, false}, Case{2, 1, false, false}, Case{4, 1, false, false},
                       Case{2, 2, false, false}, Case{2, 1, true, false}, Case{2, 1, false, true}}) {
    const std::string at = "sp " + std::to_string(k.sp) + " x ring " + std::to_string(k.ring) +
                           (k.tiled ? ", tiled projections" : "") + (k.tied ? ", tied embeddings" : "");
    SCOPED_TRACE(at);
    RunConfig c = tiny(k.sp, 1, 3, false);
    c.parallel.ring_size = k.ring;
    c.model.tie_word_embeddings = k.tied;
    if (k.tiled) {
      c.train.activation_checkpointing = "layer";
      c.train.proj_chunk_tokens = 3;
    }
    c.train.dtype = "bfloat16";
    c.train.grad_accum_dtype = "float32";
    const GradRun off = grad_run(c, 3);
    c.train.grad_accum_dtype = "auto";
    const GradRun on = grad_run(c, 3);
    c.train.grad_reduce_dtype = "bfloat16";
    const GradRun wire = grad_run(c, 3);
    const bool W1 = k.sp * k.ring == 1;
    for (const GradRun* r : {&on, &wire}) {
      const bool rounds = k.tied || (r == &wire && !W1);
      const double d = rel_norm(off, *r);
      EXPECT_EQ(r->losses.front(), off.losses.front()) << "the forward is untouched";
      if (rounds) {
        EXPECT_GT(d, 0.0) << "nothing was rounded: the cut did not run";
        EXPECT_LE(d, 1e-2);
      } else {
        EXPECT_LE(d, 1e-5);
      }
      for (size_t s = 0; s < off.losses.size(); ++s)
        EXPECT_NEAR(r->losses[s], off.losses[s], (rounds ? 1e-3 : 1e-5) * std::abs(off.losses[s])) << "step " << s;
      EXPECT_LT(r->peak_gathered, off.peak_gathered) << "the gradient buffers did not shrink";
      std::printf(
          "%s, %s wire: |g - g_fp32| / |g_fp32| = %.2e, losses %.6f %.6f %.6f (fp32 buffers: %.6f %.6f "
          "%.6f), peak gathered %lld B (fp32 buffers: %lld B)\n",
          at.c_str(), r == &wire ? "bf16" : "fp32", d, r->losses[0], r->losses[1], r->losses[2], off.losses[0],
          off.losses[1], off.losses[2], static_cast<long long>(r->peak_gathered),
          static_cast<long long>(off.peak_gathered));
    }
  }
  RunConfig f = tiny(2, 1, 3, false);
  f.train.grad_accum_dtype = "float32";
  const GradRun f_off = grad_run(f, 3);
  f.train.grad_accum_dtype = "auto";
  const GradRun f_on = grad_run(f, 3);
  EXPECT_EQ(rel_norm(f_off, f_on), 0.0) << "float32 training: auto must keep float32 unit gradients";
  EXPECT_EQ(f_on.losses, f_off.losses);
  EXPECT_EQ(f_on.peak_gathered, f_off.peak_gathered);
}

// The checks above catch a stage-3 bug: a layer whose gradients are never reduce-scattered
// (its update is weight decay alone), and a prefetch that gathers the next layer's shards.
TEST(Zero, Stage3ChecksCatchASkippedReduceScatterAndAWrongPrefetch) {
  const RunResult ref = train(tiny(2, 2, 0, false), 3);
  ASSERT_LT(worst(ref, train(tiny(2, 2, 3, false), 3)), 1e-5);
  const double skipped = worst(ref, train(tiny(2, 2, 3, false), 3, Zero3Fault::SkipReduceScatter));
  EXPECT_GT(skipped, 1e-3) << "a skipped reduce-scatter went unnoticed";
  const double wrong = worst(ref, train(tiny(2, 2, 3, false), 3, Zero3Fault::PrefetchWrongUnit));
  EXPECT_GT(wrong, 1e-3) << "a prefetch of the wrong layer went unnoticed";
}

TEST(Zero, ShardedAdamWMatchesTorchAdamW) {
  // Three shards of a flat space over parameters of both groups (dim >= 2 decays), each
  // stepped on its own, against torch::optim::AdamW on the whole parameters with the
  // trainer's two groups. 37 + 5 + 6*7 + 3 = 87 elements over 4 ranks: shards of 22, padding 1.
  torch::manual_seed(3);
  std::vector<at::Tensor> ps = {torch::randn({37}), torch::randn({5}), torch::randn({6, 7}), torch::randn({3})};
  // a (37) 1-D: no decay; the first 2-D one decays.
  std::vector<at::Tensor> tp;
  for (auto& p : ps) tp.push_back(p.clone().set_requires_grad(true));
  std::vector<at::Tensor> decay, no_decay;
  for (auto& p : tp) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = torch::optim::AdamWOptions(0.05).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.3);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts));
  auto nd = opts;
  nd.weight_decay(0.0);
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(nd));
  torch::optim::AdamW ref(groups, opts);

  const int64_t numel = 87, W = 4;
  std::vector<std::pair<int64_t, bool>> sizes;
  for (auto& p : ps) sizes.emplace_back(p.numel(), p.dim() >= 2);
  ZeroAdamWOptions zo;
  zo.beta1 = 0.9;
  zo.beta2 = 0.95;
  zo.eps = 1e-8;
  zo.weight_decay = 0.3;
  std::vector<ShardedAdamW> shards;
  for (int64_t r = 0; r < W; ++r) shards.emplace_back(ZeroLayout(numel, W, r), sizes, zo, torch::kCPU);
  EXPECT_EQ(shards[0].layout().shard, 22);
  EXPECT_EQ(shards[3].layout().valid(), 21);
  EXPECT_EQ(shards[1].decay_runs(), (std::vector<std::pair<int64_t, int64_t>>{{20, 2}}));  // 42..43 of the 6x7
  auto flat = torch::zeros({W * 22});
  {
    int64_t off = 0;
    for (auto& p : ps) flat.narrow(0, off, p.numel()).copy_(p.flatten()), off += p.numel();
  }
  for (int step = 0; step < 3; ++step) {
    const double lr = 0.05 * (step + 1);
    auto g = torch::zeros({W * 22});
    int64_t off = 0;
    for (auto& p : tp) {
      auto gp = torch::randn(p.sizes());
      p.mutable_grad() = gp;
      g.narrow(0, off, p.numel()).copy_(gp.flatten());
      off += p.numel();
    }
    for (auto& grp : ref.param_groups()) static_cast<torch::optim::AdamWOptions&>(grp.options()).lr(lr);
    ref.step();
    for (int64_t r = 0; r < W; ++r) {
      auto own = flat.narrow(0, r * 22, 22);
      shards[r].step(own, g.narrow(0, r * 22, 22), lr);
    }
  }
  int64_t off = 0;
  for (auto& p : tp) {
    auto got = flat.narrow(0, off, p.numel()).view(p.sizes());
    const double err = (got - p.detach()).abs().max().item<double>();
    EXPECT_LT(err, 1e-6) << "parameter at " << off << ": " << got.flatten().slice(0, 0, 3) << " vs "
                         << p.detach().flatten().slice(0, 0, 3);
    off += p.numel();
  }
  EXPECT_EQ(flat.narrow(0, numel, 1).item<float>(), 0.0f) << "padding must stay zero";
  EXPECT_EQ(shards[2].steps, 3);
}

TEST(Zero, GlooReduceScatterAndAllGatherAtThreeRanks) {
  // W = 3, S = 5: rank r's input is r + 1 times the ramp 0..14; the reduce-scatter gives rank r
  // 6 x its slice of the ramp; the all-gather puts every rank's shard (r * 100 + 0..4) in place.
  run_ranks(3, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, 3, 1, "gloo", std::chrono::milliseconds(60000));
    auto ramp = torch::arange(15, torch::kFloat32);
    auto full = ramp * static_cast<float>(env.rank + 1);
    auto shard = torch::empty({5});
    comm.reduce_scatter_sum(shard, full);
    EXPECT_TRUE(torch::equal(shard, ramp.narrow(0, env.rank * 5, 5) * 6.0f)) << "rank " << env.rank << ": " << shard;
    auto mine = torch::arange(5, torch::kFloat32) + 100.0f * static_cast<float>(env.rank);
    auto out = torch::full({15}, -1.0f);
    comm.all_gather(out, mine);
    auto want = (torch::arange(5, torch::kFloat32).repeat({3}) +
                 torch::arange(3, torch::kFloat32).repeat_interleave(5) * 100.0f);
    EXPECT_TRUE(torch::equal(out, want)) << "rank " << env.rank << ": " << out;
    // In place: the shard is this rank's slice of the output (the trainer's parameters).
    auto inplace = torch::zeros({15});
    inplace.narrow(0, env.rank * 5, 5).copy_(mine);
    auto own = inplace.narrow(0, env.rank * 5, 5);
    comm.all_gather(inplace, own);
    EXPECT_TRUE(torch::equal(inplace, want)) << "rank " << env.rank << ": " << inplace;
    auto bad = torch::empty({4});
    EXPECT_THROW(comm.reduce_scatter_sum(bad, full), std::invalid_argument);
  });
}

TEST(Zero, ConfigRefusesOffloadWithoutSharding) {
  RunConfig c = tiny(1, 1, 0, true);
  auto issues = validate(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "train.offload_optimizer");
  EXPECT_NE(issues[0].message.find("zero_stage >= 1"), std::string::npos) << issues[0].message;
  c = tiny(1, 1, 2, false);
  c.train.offload_params = true;
  issues = validate(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "train.offload_params");
  c = tiny(1, 1, 4, false);
  issues = validate(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "train.zero_stage");
  EXPECT_TRUE(validate(tiny(2, 2, 2, true)).empty());
}

// train.gather_dtype (auto: ZeRO-3 gathers bf16 weights in bf16 training) against the fp32
// gathers of before (gather_dtype=float32), with fp32 unit gradients on both sides, at sp 1, 2, 4
// and sp 2 x ring 2: the bf16 piece cast before the gather is the value the model's cast of the
// gathered fp32 weight gave, and the gradient reaches the fp32 parameter cast as before, so
// losses and gradients agree to 1e-5 relative (they are equal here); the gathered bytes' peak
// falls (the weights' half of it); with tied embeddings and layer checkpointing too.
TEST(Zero, Bf16GathersMatchFloat32GathersAtSp124AndRing2) {
  struct Case {
    int64_t sp, ring;
    bool tied;
  };
  for (const Case k : {Case{1, 1, false}, Case{2, 1, false}, Case{4, 1, false}, Case{2, 2, false}, Case{2, 1, true}}) {
    const std::string at =
        "sp " + std::to_string(k.sp) + " x ring " + std::to_string(k.ring) + (k.tied ? ", tied, checkpointing" : "");
    SCOPED_TRACE(at);
    RunConfig c = tiny(k.sp, 1, 3, false);
    c.parallel.ring_size = k.ring;
    c.model.tie_word_embeddings = k.tied;
    if (k.tied) c.train.activation_checkpointing = "layer";
    c.train.dtype = "bfloat16";
    c.train.grad_accum_dtype = "float32";
    c.train.gather_dtype = "float32";
    const GradRun off = grad_run(c, 3);
    c.train.gather_dtype = "auto";
    const GradRun on = grad_run(c, 3);
    const double d = rel_norm(off, on);
    EXPECT_LE(d, 1e-5);
    for (size_t s = 0; s < off.losses.size(); ++s)
      EXPECT_NEAR(on.losses[s], off.losses[s], 1e-5 * std::abs(off.losses[s])) << "step " << s;
    EXPECT_LT(on.peak_gathered, off.peak_gathered) << "the gathered weights did not shrink";
    std::printf(
        "%s: |g - g_fp32 gathers| / |g| = %.2e, losses %.6f %.6f %.6f, peak gathered %lld B (fp32 gathers: "
        "%lld B)\n",
        at.c_str(), d, on.losses[0], on.losses[1], on.losses[2], static_cast<long long>(on.peak_gathered),
        static_cast<long long>(off.peak_gathered));
  }
}

// train.grad_accum_dtype / grad_reduce_dtype: unknown values, and bf16 where the run has no bf16
// unit gradients (a float32 run, stage < 3), are refused naming the field.
TEST(Zero, ConfigRefusesGradientDtypesThatCannotRun) {
  auto first_field = [](const RunConfig& c) {
    const auto issues = validate(c);
    return issues.empty() ? std::string() : issues[0].field + ": " + issues[0].message;
  };
  RunConfig c = tiny(2, 1, 3, false);
  c.train.dtype = "bfloat16";
  EXPECT_EQ(first_field(c), "");
  c.train.grad_reduce_dtype = "bfloat16";
  EXPECT_EQ(first_field(c), "");
  c.train.grad_reduce_dtype = "float16";
  EXPECT_EQ(first_field(c).rfind("train.grad_reduce_dtype: train.grad_reduce_dtype must be", 0), 0u) << first_field(c);
  c.train.grad_reduce_dtype = "bfloat16";
  c.train.grad_accum_dtype = "float32";  // fp32 unit gradients: nothing to send in bf16
  EXPECT_EQ(first_field(c).rfind("train.grad_reduce_dtype: ", 0), 0u) << first_field(c);
  c.train.grad_reduce_dtype = "float32";
  c.train.grad_accum_dtype = "fp16";
  EXPECT_EQ(first_field(c).rfind("train.grad_accum_dtype: ", 0), 0u) << first_field(c);
  c.train.grad_accum_dtype = "bfloat16";
  c.train.zero_stage = 2;
  EXPECT_NE(first_field(c).find("needs train.zero_stage 3"), std::string::npos) << first_field(c);
  c.train.zero_stage = 3;
  c.train.dtype = "float32";
  EXPECT_NE(first_field(c).find("needs train.dtype=bfloat16"), std::string::npos) << first_field(c);
}

namespace {
// Every rank trains steps [from, to) of cfg (resuming from cfg.train.resume_from when set),
// saving when a checkpoint is due; rank 0's losses and every rank's final weights and AdamW shard.
struct Span {
  std::vector<double> losses;
  std::vector<std::map<std::string, at::Tensor>> weights, state;
};
Span train_span(const RunConfig& cfg, int64_t from, int64_t to) {
  Span res;
  std::mutex mu;
  const int W = static_cast<int>(cfg.parallel.world_size());
  res.weights.resize(W);
  res.state.resize(W);
  run_ranks(W, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
              std::chrono::milliseconds(60000));
    if (env.rank != 0) torch::manual_seed(99 + env.rank);  // unlike the saved generator states
    Trainer tr(cfg, comm, nullptr);
    if (!cfg.train.resume_from.empty()) {
      EXPECT_EQ(restore_train_state(tr, comm, cfg).next_step, from);
    }
    std::vector<double> losses;
    for (int64_t s = from; s < to; ++s) {
      losses.push_back(tr.step(s).loss);
      if (checkpoint_due(cfg.train, s + 1)) save_train_state(tr, comm, cfg, s + 1);
    }
    std::map<std::string, at::Tensor> w, st;
    for (auto& [n, p] : tr.gathered_parameters()) w[n] = p;
    st["exp_avg"] = tr.zero_optimizer().exp_avg.clone();
    st["exp_avg_sq"] = tr.zero_optimizer().exp_avg_sq.clone();
    st["step"] = torch::tensor({tr.zero_optimizer().steps});
    st["master"] = tr.zero_master().clone();
    std::lock_guard<std::mutex> lk(mu);
    res.weights[env.rank] = w;
    res.state[env.rank] = st;
    if (env.rank == 0) res.losses = losses;
  });
  return res;
}

void resume_is_bit_identical(int64_t stage, bool offload) {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("ulysses_zero_resume_" + std::to_string(::getpid()) + "_" +
                                                std::to_string(stage) + (offload ? "o" : ""));
  fs::remove_all(dir);
  RunConfig cfg = tiny(2, 2, stage, offload);
  cfg.train.steps = 5;
  cfg.train.save_to = dir.string();
  cfg.train.save_every = 2;
  const Span full = train_span(cfg, 0, 5);  // saves step-2 and step-4
  ASSERT_TRUE(fs::exists(dir / "step-00000002" / ckpt::zero_optimizer_file_name(3)));
  EXPECT_FALSE(fs::exists(dir / "step-00000002" / ckpt::kOptimizerFile)) << "the sharded state has no replicated file";

  RunConfig rc = cfg;
  rc.train.resume_from = (dir / "step-00000002").string();
  rc.train.save_every = 0;
  EXPECT_TRUE(ckpt::resume_issues(rc).empty());
  const Span resumed = train_span(rc, 2, 5);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[2 + i]) << "step " << 2 + i;
  for (int r = 0; r < 4; ++r) {
    for (const auto& [n, w] : full.weights[r]) EXPECT_TRUE(torch::equal(resumed.weights[r].at(n), w)) << r << " " << n;
    for (const auto& [n, t] : full.state[r]) EXPECT_TRUE(torch::equal(resumed.state[r].at(n), t)) << r << " " << n;
  }

  // Another world size (sp 2 x dp 1: other shards) is refused, naming the setting; so is another stage.
  RunConfig other = rc;
  other.parallel.dp_size = 1;
  auto issues = ckpt::resume_issues(other);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "parallel.dp_size") << issues[0].message;
  other = rc;
  other.train.zero_stage = stage == 1 ? 2 : 1;
  issues = ckpt::resume_issues(other);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "train.zero_stage") << issues[0].message;
  // A shard file cut short is named before any worker starts.
  fs::resize_file(dir / "step-00000002" / ckpt::zero_optimizer_file_name(1), 16);
  issues = ckpt::resume_issues(rc);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues[0].message.find(ckpt::zero_optimizer_file_name(1)), std::string::npos) << issues[0].message;
  fs::remove_all(dir);
}
}  // namespace

TEST(Zero, Stage2ResumeIsBitIdenticalAndOtherWorldSizesAreRefused) { resume_is_bit_identical(2, false); }
TEST(Zero, Stage3ResumeIsBitIdenticalAndOtherWorldSizesAreRefused) { resume_is_bit_identical(3, false); }
TEST(Zero, Stage3OffloadResumeIsBitIdentical) { resume_is_bit_identical(3, true); }
TEST(Zero, Stage1OffloadResumeIsBitIdentical) { resume_is_bit_identical(1, true); }

// The stage-2 collectives in the trace: per step and rank, the reduce-scatter (grad_allreduce,
// bwd) and the parameter all-gather (grad_allreduce, none), each with the bytes of its ring form,
// (W-1) x S x 4, and the world group's (pg, seq): the same identities on both ranks.
TEST(Zero, Stage2CollectivesAreTracedWithBytesAndIdentity) {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("ulysses_zero_trace_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  RunConfig cfg = tiny(2, 1, 2, false);
  run_ranks(2, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, 2, 1, "gloo", std::chrono::milliseconds(60000));
    prof::TracerOptions o;
    o.path = (dir / ("rank" + std::to_string(env.rank) + ".sqlite")).string();
    o.rank = env.rank;
    o.world_size = 2;
    o.sp_rank = env.rank;
    o.sp_size = 2;
    o.memory = false;
    auto tracer = prof::Tracer::open(o);
    Trainer tr(cfg, comm, tracer.get());
    for (int64_t s = 0; s < 2; ++s) {
      tracer->begin_step(s);
      const auto m = tr.step(s);
      prof::StepRecord rec;
      rec.step = s;
      rec.loss = m.loss;
      tracer->end_step(rec);
    }
    tracer->close();
  });
  const int64_t numel = tiny(2, 1, 2, false).model.num_parameters(), S = (numel + 1) / 2;
  std::vector<std::vector<std::tuple<int64_t, int, int32_t, int32_t>>> ids(2);  // step, dir, pg, seq
  for (int r = 0; r < 2; ++r) {
    const auto m = prof::load_trace((dir / ("rank" + std::to_string(r) + ".sqlite")).string());
    for (const auto& x : m.ranges) {
      if (x.phase != prof::Phase::GradAllReduce || x.is_kernel) continue;
      const auto e = m.extra(x);
      EXPECT_EQ(e.bytes_sent, S * 4) << "rank " << r << " step " << x.step;
      EXPECT_EQ(e.bytes_recv, S * 4);
      EXPECT_EQ(e.pg, 0);
      ids[r].emplace_back(x.step, static_cast<int>(x.dir), e.pg, e.seq);
    }
    std::sort(ids[r].begin(), ids[r].end());
    ASSERT_EQ(ids[r].size(), 4u) << "rank " << r << ": a reduce-scatter and an all-gather per step";
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(std::get<1>(ids[r][i]),
                static_cast<int>(i % 2 == 0 ? prof::Direction::None : prof::Direction::Backward));
  }
  EXPECT_EQ(ids[0], ids[1]) << "the ranks disagree on the collectives' (pg, seq)";
  fs::remove_all(dir);
}

namespace {
// One rank file's ranges as the SQL gives them.
struct RawRange {
  int64_t start, end, tid;
  int phase, dir, chunk, layer;
  int64_t bytes;
};
std::vector<prof::Interval> merged(std::vector<prof::Interval> v) {
  std::sort(v.begin(), v.end(), [](const prof::Interval& a, const prof::Interval& b) { return a.start < b.start; });
  std::vector<prof::Interval> out;
  for (const auto& x : v) {
    if (x.end <= x.start) continue;
    if (!out.empty() && x.start <= out.back().end)
      out.back().end = std::max(out.back().end, x.end);
    else
      out.push_back(x);
  }
  return out;
}
int64_t length(const std::vector<prof::Interval>& v) {
  int64_t n = 0;
  for (const auto& x : v) n += x.end - x.start;
  return n;
}
std::vector<prof::Interval> clip(const std::vector<prof::Interval>& v, int64_t lo, int64_t hi) {
  std::vector<prof::Interval> out;
  for (const auto& x : v)
    if (std::min(x.end, hi) > std::max(x.start, lo)) out.push_back({std::max(x.start, lo), std::min(x.end, hi)});
  return out;
}
int64_t common(const std::vector<prof::Interval>& a, const std::vector<prof::Interval>& b) {
  int64_t n = 0;
  for (const auto& x : a)
    for (const auto& y : b) n += std::max<int64_t>(0, std::min(x.end, y.end) - std::max(x.start, y.start));
  return n;
}
}  // namespace

// A stage-3 run's trace: from its ranges (its own SQL, its own nesting and interval arithmetic),
// how much of the parameter all-gathers' time is hidden behind compute, against `ulysses-trace
// summary --json`. Compute = leaf ranges of a lane (no child on it) that are neither
// communication (a2a / grad_allreduce, or inside one) nor a step; all-gathers = grad_allreduce
// ranges with direction none; per rank and step window, summed (profiler/README.md).
TEST(Zero, Stage3AllGatherHiddenTimeFromTheRangesEqualsTheSummary) {
#ifndef ULYSSES_TRACE_BIN
  GTEST_SKIP() << "built without ulysses-trace";
#else
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("ulysses_zero3_trace_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "trace");
  RunConfig cfg = tiny(2, 1, 3, false);
  cfg.model.hidden_size = 128;
  cfg.model.intermediate_size = 384;
  cfg.model.num_hidden_layers = 4;
  cfg.model.vocab_size = 256;
  cfg.train.seq_length = 256;
  const int64_t L = cfg.model.num_hidden_layers, steps = 3;
  run_ranks(2, [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, 2, 1, "gloo", std::chrono::milliseconds(60000));
    prof::TracerOptions o;
    o.path = (dir / "trace" / ("rank" + std::to_string(env.rank) + ".sqlite")).string();
    o.rank = env.rank;
    o.world_size = 2;
    o.sp_rank = env.rank;
    o.sp_size = 2;
    o.memory = false;
    o.run_config_json = cfg.to_json().dump();
    auto tracer = prof::Tracer::open(o);
    Trainer tr(cfg, comm, tracer.get());
    for (int64_t s = 0; s < steps; ++s) {
      tracer->begin_step(s);
      const auto m = tr.step(s);
      prof::StepRecord rec;
      rec.step = s;
      rec.loss = m.loss;
      tracer->end_step(rec);
    }
    tracer->close();
  });

  // By hand, rank by rank.
  const auto comm_phase = [](int p) {
    return p == static_cast<int>(prof::Phase::A2ASeqToHead) || p == static_cast<int>(prof::Phase::A2AHeadToSeq) ||
           p == static_cast<int>(prof::Phase::GradAllReduce);
  };
  int64_t total = 0, hidden = 0, prefetched = 0, on_demand = 0, reduce_scatters = 0;
  const Zero3Layout layout(
      [&] {
        std::vector<int64_t> n;
        for (const auto& p : cfg.model.parameters()) {
          int64_t k = 1;
          for (int64_t d : p.shape) k *= d;
          n.push_back(k);
        }
        return n;
      }(),
      [&] {
        std::vector<int> u;
        for (const auto& p : cfg.model.parameters()) u.push_back(zero3_unit_of(p.name, L));
        return u;
      }(),
      2, 0);
  for (int r = 0; r < 2; ++r) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir / "trace" / ("rank" + std::to_string(r) + ".sqlite")).c_str(), &db), SQLITE_OK);
    std::vector<RawRange> rs;
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(
        sqlite3_prepare_v2(db,
                           "SELECT start, end, globalTid, category, ulyssesDirection, ulyssesChunk, ulyssesLayer, "
                           "ulyssesBytesSent FROM NVTX_EVENTS WHERE ulyssesStep IS NOT NULL",
                           -1, &st, nullptr),
        SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      rs.push_back({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                    sqlite3_column_int(st, 3), sqlite3_column_int(st, 4), sqlite3_column_int(st, 5),
                    sqlite3_column_int(st, 6), sqlite3_column_int64(st, 7)});
    sqlite3_finalize(st);
    std::vector<std::pair<int64_t, int64_t>> windows;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT start, end FROM ULYSSES_STEPS ORDER BY step", -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      windows.emplace_back(sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
    sqlite3_finalize(st);
    sqlite3_close(db);
    ASSERT_EQ(windows.size(), static_cast<size_t>(steps));

    // Nesting per lane (thread): sorted by start, longer first; a range's parent is the
    // innermost open range that contains it.
    std::map<int64_t, std::vector<size_t>> lanes;
    for (size_t i = 0; i < rs.size(); ++i) lanes[rs[i].tid].push_back(i);
    std::vector<bool> has_child(rs.size(), false), in_comm(rs.size(), false);
    for (auto& [tid, idx] : lanes) {
      std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
        return rs[a].start != rs[b].start ? rs[a].start < rs[b].start : rs[a].end > rs[b].end;
      });
      std::vector<size_t> open;
      for (size_t i : idx) {
        while (!open.empty() && rs[open.back()].end <= rs[i].start) open.pop_back();
        const bool inside = !open.empty() && rs[open.back()].end >= rs[i].end;
        if (!open.empty() && !inside) {
          // Only the comm lane's async ranges overlap without nesting (the loader spreads them
          // over sub-lanes); all of them are communication, none compute.
          ASSERT_TRUE(comm_phase(rs[i].phase)) << "rank " << r << ": a compute range overlaps another";
          in_comm[i] = true;
          continue;
        }
        if (inside) has_child[open.back()] = true;
        in_comm[i] = comm_phase(rs[i].phase) || (inside && in_comm[open.back()]);
        open.push_back(i);
      }
    }
    std::vector<prof::Interval> compute, gathers;
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& x = rs[i];
      if (!in_comm[i] && !has_child[i] && x.phase != static_cast<int>(prof::Phase::Step))
        compute.push_back({x.start, x.end});
      if (x.phase != static_cast<int>(prof::Phase::GradAllReduce)) continue;
      if (x.dir == static_cast<int>(prof::Direction::None)) {
        // On the "zero gather" row of their own (docs/ZERO.md), not the all-to-alls' comm row.
        EXPECT_EQ(x.tid & 0xFFFFFF, 0xFFFFFB) << "an all-gather off the zero gather row";
        gathers.push_back({x.start, x.end});
        (x.chunk == 1 ? prefetched : on_demand) += 1;
        // Its bytes: the ring volume of its unit (a layer's, or the embedding's / head's).
        if (x.layer >= 0) {
          EXPECT_EQ(x.bytes, layout.units[static_cast<size_t>(x.layer) + 1].shard * 4) << "layer " << x.layer;
        }
      } else if (x.dir == static_cast<int>(prof::Direction::Backward) && x.chunk == -1) {
        EXPECT_EQ(x.tid & 0xFFFFFF, 0xFFFFFA) << "a reduce-scatter off the zero reduce-scatter row";
        ++reduce_scatters;
      }
    }
    const auto c = merged(compute), g = merged(gathers);
    for (const auto& [lo, hi] : windows) {
      const auto gw = clip(g, lo, hi);
      total += length(gw);
      hidden += common(clip(c, lo, hi), gw);
    }
  }
  // Per step and rank: forward gathers L + 2 units (the embedding on demand, the rest
  // prefetched), backward the L layers again (prefetched); L + 2 reduce-scatters.
  EXPECT_EQ(on_demand, 2 * steps);
  EXPECT_EQ(prefetched, 2 * steps * (2 * L + 1));
  EXPECT_EQ(reduce_scatters, 2 * steps * (L + 2));
  EXPECT_GT(hidden, 0) << "no all-gather time hidden behind compute: the prefetch overlaps nothing";

  std::FILE* p = ::popen(
      ("'" + std::string(ULYSSES_TRACE_BIN) + "' summary --json --no-cache '" + dir.string() + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["allgather"]["allgather_ns"].get<int64_t>(), total);
  EXPECT_EQ(j["allgather"]["hidden_ns"].get<int64_t>(), hidden);
  EXPECT_EQ(j["allgather"]["exposed_ns"].get<int64_t>(), total - hidden);
  EXPECT_NEAR(j["allgather"]["hidden_ratio"].get<double>(), double(hidden) / double(total), 1e-12);
  std::cout << "all-gathers: " << total / 1e6 << " ms over 2 ranks x " << steps << " steps, " << hidden / 1e6
            << " ms hidden behind compute (" << 100.0 * double(hidden) / double(total) << "%)\n";
  fs::remove_all(dir);
#endif
}
