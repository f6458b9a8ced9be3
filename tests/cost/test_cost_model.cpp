// Cost model against values computed by hand (arithmetic in the comments) for the
// bench-1b config: d=2048, f=5632, L=16, H=16, Hkv=8, V=32000, dh=128, untied, bf16.
#include <gtest/gtest.h>

#include "cost_model.hpp"
#include "gpu_reserve.hpp"

#include <cmath>
#include <cstdlib>

namespace {
using ulysses::RunConfig;
using ulysses::cost::CostOptions;
using ulysses::cost::estimate;

RunConfig load(const std::string& name) {
  return ulysses::load_run_config(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/" + name);
}
// bench-1b without its long-sequence techniques (checkpointing with offload, tiled loss,
// TiledMLP): every activation is kept, the forward runs once.
RunConfig plain(RunConfig c) {
  c.train.activation_checkpointing = "none";
  c.train.offload_activations = false;
  c.train.loss_chunk_tokens = 0;
  c.train.mlp_chunk_tokens = 0;
  return c;
}

TEST(CostModel, Bench1bParameters) {
  const auto c = estimate(load("bench-1b.json"));
  // attention per layer: q,o 2048*2048*2 = 8,388,608; k,v 2048*1024*2 = 4,194,304
  // mlp per layer: 3*2048*5632 = 34,603,008; two norms 2*2048 = 4,096
  // layer = 47,190,016; 16 layers = 755,040,256
  // embed + lm_head 2*32000*2048 = 131,072,000; final norm 2,048
  EXPECT_EQ(c.params, 886114304);
  // matmul params exclude the input embedding table: 886,114,304 - 65,536,000
  EXPECT_EQ(c.matmul_params, 820578304);
  EXPECT_EQ(c.tokens_per_step, 16384);
}

TEST(CostModel, Bench1bStateMemoryBf16) {
  const auto c = estimate(load("bench-1b.json"));
  EXPECT_EQ(c.param_bytes, 1772228608);      // 2 B * 886,114,304
  EXPECT_EQ(c.grad_bytes, 1772228608);       // 2 B
  EXPECT_EQ(c.master_bytes, 3544457216);     // 4 B fp32 master
  EXPECT_EQ(c.optimizer_bytes, 7088914432);  // AdamW m + v, 8 B
}

TEST(CostModel, Float32HasNoMasterCopy) {
  auto cfg = load("bench-1b.json");
  cfg.train.dtype = "float32";
  const auto c = estimate(cfg);
  EXPECT_EQ(c.param_bytes, 3544457216);  // 4 B
  EXPECT_EQ(c.grad_bytes, 3544457216);
  EXPECT_EQ(c.master_bytes, 0);
  EXPECT_EQ(c.optimizer_bytes, 7088914432);
}

TEST(CostModel, Bench1bActivations) {
  const auto c = estimate(plain(load("bench-1b.json")));  // device cuda: flash, no N x N scores
  // per token per layer: 4*2048 + 4*(qd = 16*128 = 2048) + 4*1024 + 3*5632
  //   = 8,192 + 8,192 + 4,096 + 16,896 = 37,376
  // (16 * 37,376 + 2048) * 16,384 tokens * 2 B = 600,064 * 32,768 = 19,662,897,152
  // logits 16,384 * 32,000 * (2 + 4) = 3,145,728,000
  // flash log-sum-exp: b(1) * (H/P = 16) * 16,384 * 4 B * 16 layers = 16,777,216
  EXPECT_EQ(c.attention_score_bytes, 0);
  EXPECT_EQ(c.attention_lse_bytes, 16777216);
  EXPECT_EQ(c.activation_bytes, 19662897152 + 3145728000 + 16777216);
  EXPECT_EQ(c.total_bytes(), 14177828864 + 22825402368);  // 16 B/param + activations
}

// bench-1b as shipped: layer checkpointing with the kept inputs offloaded, TiledMLP of 65,536
// tokens and a tiled loss of 16,384 tokens, at n = 16,384 local tokens.
TEST(CostModel, Bench1bActivationsWithItsLongSequenceTechniques) {
  const auto c = estimate(load("bench-1b.json"));
  // one layer recomputed, without its MLP intermediates: 16,384 * (8,192 + 8,192 + 4,096)
  //   = 16,384 * 20,480 = 335,544,320; kept inputs: none (offloaded)
  // one MLP tile of min(16,384, 65,536) tokens: 16,384 * 3 * 5,632 = 276,824,064
  // embedding output 16,384 * 2,048 = 33,554,432
  // (335,544,320 + 276,824,064 + 33,554,432) * 2 B = 645,922,816 * 2 = 1,291,845,632
  // logits of min(16,384, 16,384) tokens: 16,384 * 32,000 * 6 = 3,145,728,000
  // log-sum-exp of one layer: 16 * 16,384 * 4 = 1,048,576
  EXPECT_EQ(c.attention_lse_bytes, 1048576);
  EXPECT_EQ(c.activation_bytes, 1291845632 + 3145728000 + 1048576);
  // Kept on the device without offload: + 16 layers * 16,384 * 2,048 * 2 B = 1,073,741,824
  auto cfg = load("bench-1b.json");
  cfg.train.offload_activations = false;
  EXPECT_EQ(estimate(cfg).activation_bytes, int64_t{1291845632} + 3145728000 + 1048576 + 1073741824);
  // A tiled loss of 4,096 tokens holds a quarter of the logits: 4,096 * 32,000 * 6 = 786,432,000
  cfg.train.loss_chunk_tokens = 4096;
  EXPECT_EQ(estimate(cfg).activation_bytes, int64_t{1291845632} + 786432000 + 1048576 + 1073741824);
}

// Checkpointing runs the forward twice: its all-to-alls (3x the forward per layer instead of
// 2x) and its FLOPs (8 instead of 6 per parameter and token, 16 instead of 12 for attention).
TEST(CostModel, CheckpointingRecomputesTheForward) {
  auto cfg = load("long-seq.json");
  const auto off = estimate(cfg);
  cfg.train.activation_checkpointing = "layer";
  const auto on = estimate(cfg);
  EXPECT_EQ(on.a2a_bytes_per_step, int64_t{3} * 16 * 176160768);  // 8,455,716,864
  EXPECT_EQ(off.a2a_bytes_per_step * 3, on.a2a_bytes_per_step * 2);
  EXPECT_DOUBLE_EQ(on.dense_flops_per_step, off.dense_flops_per_step / 6 * 8);
  EXPECT_DOUBLE_EQ(on.attention_flops_per_step, off.attention_flops_per_step / 12 * 16);
}

// Gradient accumulation: every micro-batch of a step exchanges and computes; tokens per step
// count them all (the estimate read half the traffic and half the tokens at G = 2).
TEST(CostModel, GradientAccumulationMultipliesTheStep) {
  auto cfg = load("long-seq.json");
  const auto one = estimate(cfg);
  cfg.train.gradient_accumulation_steps = 3;
  const auto three = estimate(cfg);
  EXPECT_EQ(three.tokens_per_step, 3 * one.tokens_per_step);
  EXPECT_EQ(three.a2a_bytes_per_step, 3 * one.a2a_bytes_per_step);
  EXPECT_EQ(three.allreduce_bytes_per_step, one.allreduce_bytes_per_step);  // once per step
  EXPECT_DOUBLE_EQ(three.flops_per_step(), 3 * one.flops_per_step());
  EXPECT_EQ(three.activation_bytes, one.activation_bytes);  // one micro-batch at a time
}

// An explicit head_dim (Qwen3: 16 heads x 256 = 4,096, twice hidden_size): q and the attention
// output are 4,096 wide, k and v 8 x 256 = 2,048.
TEST(CostModel, ExplicitHeadDimSetsTheWidthOfQAndTheAttentionOutput) {
  auto cfg = load("long-seq.json");
  cfg.model.explicit_head_dim = 256;
  const auto c = estimate(cfg);
  // 131,072 * (2*4,096 + 2*2,048) * 7 / 64 = 131,072 * 12,288 * 7 / 64 = 176,160,768
  EXPECT_EQ(c.a2a_elements_per_layer_fwd, 176160768);
  // attention 12 * 16 * 131,072^2 * 4,096 / 2
  EXPECT_DOUBLE_EQ(c.attention_flops_per_step, 12.0 * 16 * 131072.0 * 131072.0 * 4096 / 2);
}

TEST(CostModel, MathAttentionKeepsScoresOnlyForSdpaOnCpu) {
  auto cfg = load("bench-1b.json");
  cfg.train.device = "cpu";
  cfg.train.attention = "sdpa";  // libtorch 1.13's math kernel
  cfg = plain(cfg);
  const auto math = estimate(cfg);
  // 2 * b(1) * (H/P = 16) * 16,384^2 * 2 B * 16 layers = 32 * 268,435,456 * 32 = 274,877,906,944
  EXPECT_EQ(math.attention_score_bytes, 274877906944);
  EXPECT_EQ(math.attention_lse_bytes, 0);
  EXPECT_EQ(math.activation_bytes, 19662897152 + 3145728000 + 274877906944);
  // auto and blocked on CPU run the block-causal kernel: no N x N, only the fp32 lse
  for (const char* kind : {"auto", "blocked"}) {
    cfg.train.attention = kind;
    const auto blocked = estimate(cfg);
    EXPECT_EQ(blocked.attention_score_bytes, 0) << kind;
    EXPECT_EQ(blocked.attention_lse_bytes, 16777216) << kind;  // 16 * 16,384 * 4 B * 16 layers
    EXPECT_EQ(blocked.activation_bytes, 19662897152 + 3145728000 + 16777216) << kind;
  }
  // on CUDA sdpa is flash: no N x N either
  cfg.train.device = "cuda";
  cfg.train.attention = "sdpa";
  EXPECT_EQ(estimate(cfg).attention_score_bytes, 0);
  // the option overrides the config
  CostOptions o;
  o.math_attention = 1;
  EXPECT_EQ(estimate(cfg, o).attention_score_bytes, 274877906944);
}

TEST(CostModel, Bench1bFlopsAndStepTime) {
  CostOptions o;
  o.tflops_per_rank = 400;
  const auto c = estimate(plain(load("bench-1b.json")), o);
  // dense 6 * 820,578,304 * 16,384 = 80,666,129,596,416
  EXPECT_DOUBLE_EQ(c.dense_flops_per_step, 80666129596416.0);
  // attention 12 * 16 * 16,384^2 * 2048 / 2 (causal) = 52,776,558,133,248
  EXPECT_DOUBLE_EQ(c.attention_flops_per_step, 52776558133248.0);
  // 133,442,687,729,664 FLOP / 400e12 FLOP/s = 0.33360671932416 s
  EXPECT_NEAR(c.step_s, 0.33360671932416, 1e-12);
  EXPECT_NEAR(c.tokens_per_s, 16384 / 0.33360671932416, 1e-6);
  o.causal = false;
  EXPECT_DOUBLE_EQ(estimate(plain(load("bench-1b.json")), o).attention_flops_per_step, 2 * 52776558133248.0);
}

TEST(CostModel, SingleRankHasNoCommunication) {
  const auto c = estimate(load("bench-1b.json"));
  EXPECT_EQ(c.a2a_bytes_per_step, 0);
  EXPECT_EQ(c.allreduce_bytes_per_step, 0);
}

TEST(CostModel, LongSeqAllToAllGqa) {
  const auto c = estimate(load("long-seq.json"));  // N = 131,072, P = 8, Hkv = 8
  // b*N*(2d + 2dkv)*(P-1)/P^2 = 131,072 * (4,096 + 2,048) * 7 / 64 = 88,080,384 elements
  EXPECT_EQ(c.local_tokens, 16384);
  EXPECT_EQ(c.a2a_elements_per_layer_fwd, 88080384);
  EXPECT_EQ(c.a2a_bytes_per_layer_fwd, 176160768);  // * 2 B
  // forward + mirrored backward, 16 layers: 2 * 16 * 176,160,768
  EXPECT_EQ(c.a2a_bytes_per_step, 5637144576);
  // ring all-reduce of the fp32 gradient buffer over 8 ranks (the loss sum and token count
  // travel apart, 16 bytes), bf16 training or not: 2 * 7/8 * 886,114,304 * 4 = 1.75 * 3,544,457,216
  EXPECT_EQ(c.allreduce_bytes_per_step, 6202800128);
  // FLOPs split over 8 ranks: (6*820,578,304*131,072 + 12*16*131,072^2*2048/2) / 8
  EXPECT_DOUBLE_EQ(c.flops_per_rank, (645329036771328.0 + 3377699720527872.0) / 8);
}

TEST(CostModel, MhaMatchesArchitectureFormula) {
  auto cfg = load("long-seq.json");
  cfg.model.num_key_value_heads = 16;  // MHA
  const auto c = estimate(cfg);
  // 4*N*d*(P-1)/P^2 = 4 * 131,072 * 2048 * 7 / 64 = 117,440,512
  EXPECT_EQ(c.a2a_elements_per_layer_fwd, 117440512);
}

TEST(CostModel, ReplicatedKvHeadsSendOneHeadPerRank) {
  auto cfg = load("long-seq.json");
  cfg.model.num_key_value_heads = 2;  // Hkv < P: replicated to 8 kv heads
  const auto c = estimate(cfg);
  // dkv = 8 * 128 = 1024, as with Hkv = 8
  EXPECT_EQ(c.a2a_elements_per_layer_fwd, 88080384);
}

TEST(CostModel, CommunicationTimeFromBandwidth) {
  CostOptions o;
  o.tflops_per_rank = 400;
  o.link_gbytes_per_s = 100;
  const auto c = estimate(load("long-seq.json"), o);
  EXPECT_NEAR(c.comm_s, (5637144576.0 + 6202800128.0) / 100e9, 1e-12);
  EXPECT_NEAR(c.step_s, c.compute_s + c.comm_s, 1e-12);
}

TEST(CostModel, RefusesNonsense) {
  auto cfg = load("bench-1b.json");
  cfg.parallel.sp_size = 3;  // 16 heads do not divide by 3
  EXPECT_THROW(estimate(cfg), ulysses::ConfigError);
  cfg.parallel.sp_size = 0;
  EXPECT_THROW(estimate(cfg), ulysses::ConfigError);
}

TEST(CostModel, Formatting) {
  EXPECT_EQ(ulysses::cost::format_bytes(1536.0 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(ulysses::cost::format_bytes(12), "12 B");
  EXPECT_EQ(ulysses::cost::format_flops(1.5e12), "1.5 TFLOP");
  EXPECT_EQ(ulysses::cost::format_seconds(0.25), "250 ms");
  EXPECT_EQ(ulysses::cost::format_seconds(200), "3 min 20 s");
  EXPECT_EQ(ulysses::cost::format_seconds(7260), "2 h 01 min");
  EXPECT_EQ(ulysses::cost::format_seconds(1e20), "2.78e+16 h");  // int(1e20) would give "-596523 h"
}

}  // namespace

// train.device=auto: flash vs math attention follows the device decision for the host
// facts (auto is not always math: a GPU host trains on CUDA).
TEST(CostModel, AutoDeviceFollowsTheDeviceDecision) {
  auto cfg = plain(load("bench-1b.json"));
  cfg.train.device = "auto";
  cfg.train.attention = "sdpa";  // flash on CUDA, the math kernel (N x N scores) on a CPU rank
  ulysses::DeviceFacts gpu_host;
  gpu_host.build_has_cuda = true;
  gpu_host.visible_gpus = 1;
  CostOptions o;
  o.facts = &gpu_host;
  auto c = estimate(cfg, o);
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_TRUE(c.flash_attention);
  EXPECT_EQ(c.attention_score_bytes, 0);
  ulysses::DeviceFacts cpu_build = gpu_host;
  cpu_build.build_has_cuda = false;  // same GPU, CPU-only build: math attention on the CPU
  o.facts = &cpu_build;
  c = estimate(cfg, o);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_FALSE(c.flash_attention);
  EXPECT_EQ(c.attention_score_bytes, 274877906944);  // as MathAttentionKeepsScores
  cfg.parallel.sp_size = 2;                          // 2 local ranks, 1 GPU: auto falls back to the CPU
  cfg.train.seq_length = 16384;
  o.facts = &gpu_host;
  c = estimate(cfg, o);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_GT(c.attention_score_bytes, 0);
}

// The GPU plan's additions (gpu_reserve.hpp), hand-computed: 2 GiB planned peak of which 8
// layers x 64 MiB are offloaded inputs; world 4 with sp 2 (two NCCL communicators), tracing on.
TEST(GpuReserve, ColumnsAddUpToTheDeviceTotal) {
  using ulysses::cost::GpuPlanInput;
  using ulysses::cost::GpuReserveSettings;
  const int64_t MiB = int64_t{1} << 20;
  GpuPlanInput in;
  in.peak_bytes = 2048 * MiB;
  in.activation_per_layer_bytes = 64 * MiB;
  in.layers = 8;
  in.offload_activations = true;
  in.world_size = 4;
  in.sp_size = 2;
  in.tracing = true;
  GpuReserveSettings s;  // the documented defaults, not the environment's
  const auto r = ulysses::cost::gpu_reserve(in, s);
  EXPECT_EQ(r.offloaded_host_bytes, 512 * MiB);
  EXPECT_EQ(r.prefetch_bytes, 128 * MiB);
  EXPECT_EQ(r.allocator_peak_bytes, (2048 - 512 + 128) * MiB);
  EXPECT_EQ(r.rounding_bytes, static_cast<int64_t>(std::ceil(0.10 * 1664.0 * MiB)));
  EXPECT_EQ(r.context_bytes, 1024 * MiB);
  EXPECT_EQ(r.cublas_bytes, 64 * MiB);
  EXPECT_EQ(r.nccl_bytes, 512 * MiB);
  EXPECT_EQ(r.cupti_bytes, 32 * MiB);
  EXPECT_EQ(r.reserve_bytes(), r.rounding_bytes + (1024 + 64 + 512 + 32) * MiB);
  EXPECT_EQ(r.device_bytes(), r.allocator_peak_bytes + r.reserve_bytes());
  // Ring attention's group is a third communicator: world 8 = sp 2 x ring 2 x dp 2.
  GpuPlanInput ring = in;
  ring.world_size = 8;
  ring.ring_size = 2;
  EXPECT_EQ(ulysses::cost::gpu_reserve(ring, s).nccl_bytes, 768 * MiB);
  // No offload, one rank, no tracing: only context, cuBLAS and rounding on top of the peak.
  GpuPlanInput one;
  one.peak_bytes = 1000 * MiB;
  one.activation_per_layer_bytes = 64 * MiB;
  one.layers = 8;
  const auto q = ulysses::cost::gpu_reserve(one, s);
  EXPECT_EQ(q.offloaded_host_bytes, 0);
  EXPECT_EQ(q.prefetch_bytes, 0);
  EXPECT_EQ(q.nccl_bytes + q.cupti_bytes, 0);
  EXPECT_EQ(q.device_bytes(), 1000 * MiB + 100 * MiB + 1024 * MiB + 64 * MiB);
}

TEST(GpuReserve, EnvironmentSetsTheContextAndFragmentation) {
  setenv("ULYSSES_GPU_CONTEXT_MIB", "1536", 1);
  setenv("ULYSSES_GPU_FRAGMENTATION", "0.2", 1);
  auto s = ulysses::cost::GpuReserveSettings::from_environment();
  EXPECT_EQ(s.context_bytes, int64_t{1536} << 20);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.2);
  setenv("ULYSSES_GPU_CONTEXT_MIB", "lots", 1);  // not a number: the default, not 0
  setenv("ULYSSES_GPU_FRAGMENTATION", "3", 1);   // not a fraction: the default
  s = ulysses::cost::GpuReserveSettings::from_environment();
  EXPECT_EQ(s.context_bytes, int64_t{1} << 30);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.10);
  unsetenv("ULYSSES_GPU_CONTEXT_MIB");
  unsetenv("ULYSSES_GPU_FRAGMENTATION");
}
