// Ulysses SP against one process: same seed and data, loss within 1e-5 relative and every
// parameter gradient within 1e-4 after one step (fp32), the same 5-step loss curve; GQA
// with kv heads < sp_size and kv heads divisible by sp_size; dp 2 x sp 2; head chunks at
// every divisor of the local q heads (MHA and GQA) and fused q/k/v exchange against
// head_chunks = 1; the all-to-all layout functions alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "checkpoint.hpp"
#include "rank_threads.hpp"
#include "trainer.hpp"

using namespace ulysses;
using ulysses::testing::run_ranks;
using ulysses::testing::train_on_ranks;

namespace {

RunConfig tiny(int64_t heads, int64_t kv_heads, int64_t sp, int64_t dp) {
  RunConfig c;
  c.model.vocab_size = 64;
  c.model.hidden_size = 8 * heads;
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = heads;
  c.model.num_key_value_heads = kv_heads;
  c.parallel.sp_size = sp;
  c.parallel.dp_size = dp;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;
  c.train.micro_batch_size = 1;
  c.train.steps = 5;
  c.train.lr = 1e-2;
  c.train.warmup_steps = 1;
  c.train.min_lr = 1e-3;
  c.data.kind = "synthetic";
  c.profile.enabled = false;
  return c;
}

using Result = ulysses::testing::TrainResult;

void expect_same(const Result& ref, const Result& got, double grad_tol, const std::string& what) {
  EXPECT_NEAR(got.loss0, ref.loss0, 1e-5 * std::abs(ref.loss0)) << what;
  for (const auto& [n, g] : ref.grads0) {
    ASSERT_TRUE(got.grads0.count(n)) << n;
    const double err = (got.grads0.at(n) - g).abs().max().item<double>();
    EXPECT_LT(err, grad_tol) << what << ": gradient of " << n << " differs by " << err << "; first values "
                             << got.grads0.at(n).flatten().slice(0, 0, 3) << " vs " << g.flatten().slice(0, 0, 3);
  }
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << what << " step " << s;
}

}  // namespace

TEST(Ulysses, Sp2AndSp4MatchOneProcess) {
  auto ref = train_on_ranks(tiny(4, 4, 1, 1), 5);
  ASSERT_GT(ref.losses.front(), ref.losses.back())
      << "the reference must learn for the curve comparison to mean something";
  expect_same(ref, train_on_ranks(tiny(4, 4, 2, 1), 5), 1e-4, "sp2");
  expect_same(ref, train_on_ranks(tiny(4, 4, 4, 1), 5), 1e-4, "sp4");
}

TEST(Ulysses, Dp2Sp2MatchesOneProcessWithTheSameGlobalBatch) {
  auto one = tiny(4, 4, 1, 1);
  one.train.micro_batch_size = 2;  // one process sees both sequences of the global batch
  auto ref = train_on_ranks(one, 5);
  expect_same(ref, train_on_ranks(tiny(4, 4, 2, 2), 5), 1e-4, "dp2 x sp2");
}

TEST(Ulysses, GqaKvHeadsFewerThanSpAreReplicated) {
  auto ref = train_on_ranks(tiny(4, 2, 1, 1), 3);
  expect_same(ref, train_on_ranks(tiny(4, 2, 4, 1), 3), 1e-4, "H=4 Hkv=2 sp4");
  auto ref1 = train_on_ranks(tiny(4, 1, 1, 1), 2);
  expect_same(ref1, train_on_ranks(tiny(4, 1, 2, 1), 2), 1e-4, "H=4 Hkv=1 sp2");
}

TEST(Ulysses, GqaKvHeadsDivisibleBySp) {
  auto ref = train_on_ranks(tiny(8, 4, 1, 1), 3);
  expect_same(ref, train_on_ranks(tiny(8, 4, 2, 1), 3), 1e-4, "H=8 Hkv=4 sp2");
  expect_same(ref, train_on_ranks(tiny(8, 4, 4, 1), 3), 1e-4, "H=8 Hkv=4 sp4");
}

// head_chunks at every divisor of the local q heads, fused and unfused, against
// head_chunks 1 of the same config (loss and every gradient within 1e-5). GQA cases: kv
// heads fewer than the local q heads (a kv head serves several chunks, or a chunk several
// kv heads), kv heads fewer than sp_size (replicated), kv heads divisible by sp_size, and
// 12 q / 4 kv heads at sp 2 where chunks of 2 q heads straddle groups of 3.
static void head_chunks_at_every_divisor(int64_t H, int64_t Hkv, std::initializer_list<int64_t> sps) {
  for (int64_t sp : sps) {
    auto base = tiny(H, Hkv, sp, 1);
    base.train.attention_block = 8;  // 4 key blocks over seq 32: the blocked kernel's masking and skipping
    ASSERT_TRUE(validate(base).empty()) << validate(base)[0].message;
    auto ref = train_on_ranks(base, 1);
    const int64_t local = H / sp;
    for (int64_t chunks = 2; chunks <= local; ++chunks) {
      if (local % chunks != 0) continue;
      for (bool fused : {false, true}) {
        auto c = base;
        c.parallel.head_chunks = chunks;
        c.parallel.fused_qkv = fused;
        ASSERT_TRUE(validate(c).empty()) << validate(c)[0].message;
        const std::string what = "H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " sp" + std::to_string(sp) +
                                 " chunks " + std::to_string(chunks) + (fused ? " fused" : "");
        expect_same(ref, train_on_ranks(c, 1), 1e-5, what);
      }
    }
  }
}

TEST(Ulysses, HeadChunksMhaAtEveryDivisor) { head_chunks_at_every_divisor(8, 8, {1, 2, 4}); }

TEST(Ulysses, HeadChunksGqaKvFewerThanLocalQHeads) {
  head_chunks_at_every_divisor(8, 2, {1, 2});  // sp1: 8 q / 2 kv heads per rank; sp2: 4 q / 1 kv
}

TEST(Ulysses, HeadChunksGqaKvFewerThanSpReplicated) {
  head_chunks_at_every_divisor(8, 2, {4});   // 2 q heads, 1 replicated kv head per rank
  head_chunks_at_every_divisor(12, 1, {2});  // 6 q heads, 1 replicated kv head per rank
}

TEST(Ulysses, HeadChunksGqaKvDivisibleBySp) {
  head_chunks_at_every_divisor(8, 4, {2});   // 4 q / 2 kv heads per rank: chunks of 1 q head share a kv head
  head_chunks_at_every_divisor(12, 4, {2});  // 6 q / 2 kv heads per rank: chunks of 2 straddle groups of 3
}

// Chunks whose q heads and the GQA groups divide neither way (an engine sweep): 12 q / 4 kv
// heads at sp 1, chunks of 4 q heads over groups of 3, where pairing per chunk would give heads
// 2 and 3 kv head 1 instead of 0 and train to other losses without a word (2.5% off at H 24,
// kv 8, sp 2); 12 q / 6 kv at sp 2, chunks of 3 over groups of 2, where it would throw "q heads
// (3) must be a multiple of kv heads (2)" in step 0. Each q head gets its kv head by index
// (chunk_kv_index).
TEST(Ulysses, HeadChunksGqaChunksAndGroupsDividingNeitherWay) {
  head_chunks_at_every_divisor(12, 4, {1});
  head_chunks_at_every_divisor(12, 6, {2});
  head_chunks_at_every_divisor(12, 3, {1});  // groups of 4, chunks of 6 and 3
}

// parallel.fused_qkv (the default: one seq->head all-to-all per layer instead
// of three) only moves the same bytes in one message: the losses of 3 steps and every step-0
// gradient are bit for bit those of separate q/k/v messages (MHA, GQA with kv heads
// divisible by sp, and kv heads fewer than sp, replicated).
TEST(Ulysses, FusedQkvIsBitIdenticalToSeparateMessages) {
  EXPECT_TRUE(RunConfig{}.parallel.fused_qkv) << "fused q/k/v is the default (fewer collectives per layer)";
  struct Case {
    int64_t H, Hkv, sp;
  };
  const std::vector<Case> cases{{4, 4, 2}, {8, 4, 2}, {4, 2, 4}};
  for (const Case& k : cases) {
    const int64_t H = k.H, Hkv = k.Hkv, sp = k.sp;
    auto sep = tiny(H, Hkv, sp, 1);
    sep.parallel.fused_qkv = false;
    auto fused = sep;
    fused.parallel.fused_qkv = true;
    const auto a = train_on_ranks(sep, 3), b = train_on_ranks(fused, 3);
    const std::string what = "H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " sp" + std::to_string(sp);
    ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
    for (size_t s = 0; s < a.losses.size(); ++s) EXPECT_EQ(a.losses[s], b.losses[s]) << what << " step " << s;
    for (const auto& [n, g] : a.grads0) {
      ASSERT_TRUE(b.grads0.count(n)) << what << ": " << n;
      EXPECT_TRUE(torch::equal(b.grads0.at(n), g))
          << what << ": gradient of " << n << " differs by " << (b.grads0.at(n) - g).abs().max().item<double>();
    }
  }
}

TEST(Ulysses, LayoutFunctionsRoundTripAndMirrorInBackward) {
  // x (B, n, P*h, dh) -> seq_to_head -> (B, N, h, dh) -> head_to_seq -> x; gradients mirror.
  const int P = 2;
  std::vector<at::Tensor> full(P);
  run_ranks(P, [&](const DistEnv& env) {
    Comm comm(env, P, 1, "gloo", std::chrono::milliseconds(30000));
    // (B, N, H, dh), identical on both ranks (no shared random generator between rank threads)
    auto whole = torch::arange(1 * 8 * 4 * 3, torch::kFloat32).view({1, 8, 4, 3});
    auto x = whole.narrow(1, env.rank * 4, 4).clone().set_requires_grad(true);  // this rank's shard
    auto y = seq_to_head(x, &comm);  // (1, 8, 2, 3): heads [2r, 2r+2) over all tokens
    EXPECT_TRUE(torch::equal(y.detach(), whole.narrow(2, env.rank * 2, 2)));
    auto back = head_to_seq(y, &comm);
    EXPECT_TRUE(torch::equal(back.detach(), x.detach()));
    (back * 3.0).sum().backward();
    EXPECT_TRUE(torch::allclose(x.grad(), torch::full_like(x, 3.0)));
  });
}

TEST(Checkpoint, SaveReloadGivesTheSameLoss) {
  namespace fs = std::filesystem;
  const auto dir = (fs::temp_directory_path() / ("ulysses_ckpt_" + std::to_string(::getpid()))).string();
  auto cfg = tiny(4, 2, 1, 1);
  DistEnv env;
  Comm comm(env, 1, 1, "gloo", std::chrono::milliseconds(1000));
  double trained_loss = 0;
  {
    Trainer tr(cfg, comm, nullptr);
    for (int s = 0; s < 3; ++s) tr.step(s);
    trained_loss = tr.loss_and_grads(7);
    save_checkpoint(tr.model(), dir, torch::kFloat32);
  }
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors"));
  auto hf = load_json_file(dir + "/config.json");
  EXPECT_EQ(hf["num_key_value_heads"], 2);
  EXPECT_EQ(hf["architectures"][0], "LlamaForCausalLM");
  auto c2 = cfg;
  c2.train.init_from = dir;
  Trainer again(c2, comm, nullptr);
  EXPECT_NEAR(again.loss_and_grads(7), trained_loss, 1e-6 * trained_loss);
  Trainer fresh(cfg, comm, nullptr);  // same seed, no checkpoint: the untrained loss differs
  EXPECT_GT(std::abs(fresh.loss_and_grads(7) - trained_loss), 1e-3);
  // A checkpoint of the wrong shape is refused with the tensor's name.
  auto c3 = cfg;
  c3.model.hidden_size = 64;
  c3.train.init_from = dir;
  try {
    Trainer bad(c3, comm, nullptr);
    FAIL() << "expected a shape error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, SafetensorsBf16RoundTripAndCorruptFiles) {
  namespace fs = std::filesystem;
  const auto path =
      (fs::temp_directory_path() / ("ulysses_st_" + std::to_string(::getpid()) + ".safetensors")).string();
  auto a = torch::randn({3, 5}).to(torch::kBFloat16);
  auto b = torch::arange(7, torch::kFloat32);
  write_safetensors(path, {{"a", a}, {"b", b}});
  auto m = read_safetensors(path);
  EXPECT_TRUE(torch::equal(m.at("a"), a));
  EXPECT_TRUE(torch::equal(m.at("b"), b));
  fs::resize_file(path, fs::file_size(path) - 4);  // truncate the data
  EXPECT_THROW(read_safetensors(path), ConfigError);
  fs::remove(path);
}

TEST(Schedule, WarmupThenCosine) {
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 2;
  t.steps = 6;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 0.0);  // HF warmup starts at 0
  EXPECT_DOUBLE_EQ(learning_rate(t, 1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 2), 1.0);                // cosine starts at lr
  EXPECT_NEAR(learning_rate(t, 4), 0.1 + 0.9 * 0.5, 1e-12);  // halfway
  EXPECT_NEAR(learning_rate(t, 6), 0.1, 1e-12);
}

TEST(Ulysses, Bfloat16TrainsAndTracksFp32) {
  // bf16 compute with fp32 master weights: the sp 2 run (bf16 all-to-alls through Gloo)
  // must follow the sp 1 bf16 run closely and stay near the fp32 loss.
  auto c = tiny(4, 2, 1, 1);
  auto f32 = train_on_ranks(c, 3);
  c.train.dtype = "bfloat16";
  auto one = train_on_ranks(c, 3);
  auto sp2 = c;
  sp2.parallel.sp_size = 2;
  auto two = train_on_ranks(sp2, 3);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(two.losses[s], one.losses[s], 2e-2 * one.losses[s]) << "step " << s;
    EXPECT_NEAR(one.losses[s], f32.losses[s], 3e-2 * f32.losses[s]) << "step " << s;
  }
  EXPECT_LT(two.losses.back(), two.losses.front());
}

TEST(Checkpoint, LoadsAHuggingFaceStyleDirectory) {
  // What transformers' save_pretrained writes for a tiny fp16 Llama: config.json with its
  // informational keys, tied embeddings (no lm_head tensor), a stale rotary buffer.
  namespace fs = std::filesystem;
  const auto dir = (fs::temp_directory_path() / ("ulysses_hf_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  json hf = {{"architectures", {"LlamaForCausalLM"}},
             {"model_type", "llama"},
             {"hidden_act", "silu"},
             {"hidden_size", 32},
             {"intermediate_size", 48},
             {"num_hidden_layers", 1},
             {"num_attention_heads", 4},
             {"num_key_value_heads", 2},
             {"vocab_size", 64},
             {"rms_norm_eps", 1e-6},
             {"rope_theta", 10000.0},
             {"max_position_embeddings", 2048},
             {"tie_word_embeddings", true},
             {"torch_dtype", "float16"},
             {"transformers_version", "4.46.0"},
             {"bos_token_id", 1},
             {"eos_token_id", 2},
             {"rope_scaling", nullptr},
             {"attention_bias", false},
             {"initializer_range", 0.02},
             {"use_cache", true},
             {"pretraining_tp", 1}};
  std::ofstream(dir + "/config.json") << hf.dump(2);
  ModelConfig mc = model_from_hf_config(hf);
  LlamaModel src(mc, ParallelConfig{}, torch::kFloat32, nullptr);
  src.init_parameters(77);
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [n, t] : src.named_parameters()) ts.emplace_back(n, t.detach().to(torch::kFloat16));
  ts.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({4}));
  write_safetensors(dir + "/model.safetensors", ts);

  // A run config that names only the checkpoint takes the model from its config.json.
  json run = {{"train", {{"init_from", dir}, {"seq_length", 16}}}, {"data", {{"kind", "synthetic"}}}};
  std::ofstream(dir + "/run.json") << run.dump();
  RunConfig cfg = load_run_config(dir + "/run.json");
  EXPECT_EQ(cfg.model.num_key_value_heads, 2);
  EXPECT_TRUE(cfg.model.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(cfg.model.rms_norm_eps, 1e-6);
  LlamaModel dst(cfg.model, cfg.parallel, torch::kFloat32, nullptr);
  load_checkpoint(dst, dir);
  for (auto& [n, t] : src.named_parameters())
    EXPECT_TRUE(torch::equal(dst.param(n), t.detach().to(torch::kFloat16).to(torch::kFloat32))) << n;
  // A run config that contradicts the checkpoint is refused, naming the key.
  json clash = run;
  clash["model"] = {{"hidden_size", 64}};
  std::ofstream(dir + "/clash.json") << clash.dump();
  try {
    load_run_config(dir + "/clash.json");
    FAIL() << "expected a mismatch error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.hidden_size"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
