// Hugging Face training conventions (docs/CONTRACTS.md): the learning-rate schedules against
// transformers' get_scheduler lambdas (transcribed here from optimization.py, not from the
// engine) at steps 0, the end of warmup and the last steps; gradient accumulation 4 x
// micro-batch 1 against micro-batch 4 at sp 2 over 5 steps (fp32, 1e-5 relative);
// HF TrainingArguments names read as aliases; AdamW with HF's default betas/epsilon.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/rank_threads.hpp"
#include "trainer.hpp"

using namespace ulysses;

namespace {

// transformers.optimization: lr_lambda(current_step) for each scheduler type.
double hf_lambda(const std::string& type, int64_t step, int64_t warmup, int64_t total, double min_lr_rate) {
  const double cur = static_cast<double>(step);
  if (step < warmup) return cur / static_cast<double>(std::max<int64_t>(1, warmup));
  if (type == "constant_with_warmup") return 1.0;
  if (type == "linear")
    return std::max(0.0, static_cast<double>(total - step) / static_cast<double>(std::max<int64_t>(1, total - warmup)));
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double num_cycles = 0.5;
  double factor = 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress));
  if (type == "cosine") return std::max(0.0, factor);
  factor = factor * (1 - min_lr_rate) + min_lr_rate;  // cosine_with_min_lr
  return std::max(0.0, factor);
}

RunConfig small(int64_t sp) {
  RunConfig c;
  c.model.vocab_size = 64;
  c.model.hidden_size = 32;
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 2;
  c.parallel.sp_size = sp;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;
  c.train.steps = 5;
  c.train.lr = 1e-2;
  c.train.warmup_steps = 2;
  c.train.min_lr = 1e-3;
  c.profile.enabled = false;
  return c;
}

}  // namespace

TEST(Schedule, EveryTypeMatchesTransformersAtTheBoundarySteps) {
  for (const char* type : {"cosine", "cosine_with_min_lr", "linear", "constant_with_warmup"}) {
    for (const auto& [W, T] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {3, 10}, {10, 10}, {1, 1000}}) {
      TrainConfig t;
      t.lr_scheduler_type = type;
      t.lr = 3e-4;
      t.min_lr = 3e-5;
      t.warmup_steps = W;
      t.steps = T;
      for (int64_t s : {int64_t{0}, W - 1, W, W + 1, T / 2, T - 2, T - 1, T}) {
        if (s < 0) continue;
        const double want = t.lr * hf_lambda(type, s, W, T, t.min_lr / t.lr);
        EXPECT_NEAR(learning_rate(t, s), want, 1e-15) << type << " W=" << W << " T=" << T << " step " << s;
      }
    }
  }
  // hand values: warmup starts at 0; W=4, T=12: step 2 = lr/2, step 4 = lr, step 8 halfway
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.2;
  t.warmup_steps = 4;
  t.steps = 12;
  t.lr_scheduler_type = "cosine_with_min_lr";
  EXPECT_EQ(learning_rate(t, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(t, 2), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 4), 1.0);
  EXPECT_NEAR(learning_rate(t, 8), 0.2 + 0.8 * 0.5, 1e-15);
  EXPECT_NEAR(learning_rate(t, 12), 0.2, 1e-15);
  t.lr_scheduler_type = "cosine";
  EXPECT_NEAR(learning_rate(t, 12), 0.0, 1e-15);
  t.lr_scheduler_type = "linear";
  EXPECT_DOUBLE_EQ(learning_rate(t, 8), 0.5);
  t.lr_scheduler_type = "constant_with_warmup";
  EXPECT_DOUBLE_EQ(learning_rate(t, 11), 1.0);
}

TEST(GradAccumulation, FourMicroStepsOfOneEqualMicroBatchFourAtSp2) {
  auto big = small(2);
  big.train.micro_batch_size = 4;
  auto acc = small(2);
  acc.train.micro_batch_size = 1;
  acc.train.gradient_accumulation_steps = 4;
  ASSERT_TRUE(validate(acc).empty());
  auto ref = ulysses::testing::train_on_ranks(big, 5);
  auto got = ulysses::testing::train_on_ranks(acc, 5);
  EXPECT_NEAR(got.loss0, ref.loss0, 1e-5 * std::abs(ref.loss0));
  for (const auto& [n, g] : ref.grads0) {
    const double rel =
        (got.grads0.at(n) - g).abs().max().item<double>() / std::max(1e-12, g.abs().max().item<double>());
    EXPECT_LT(rel, 1e-5) << n;
  }
  ASSERT_EQ(got.losses.size(), 5u);
  for (size_t s = 0; s < 5; ++s)
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << "step " << s;
  // and it is not just micro-batch 1: one sequence per step gives other losses
  auto one = small(2);
  auto single = ulysses::testing::train_on_ranks(one, 2);
  EXPECT_GT(std::abs(single.loss0 - ref.loss0), 1e-4);
}

TEST(GradAccumulation, WithDp2EqualsOneRankWithTheWholeBatch) {
  // dp 2 x accumulation 2 x micro 1 = one rank with micro-batch 4 (sequence order kept)
  auto one = small(1);
  one.train.micro_batch_size = 4;
  auto dp = small(1);
  dp.parallel.dp_size = 2;
  dp.train.gradient_accumulation_steps = 2;
  auto ref = ulysses::testing::train_on_ranks(one, 3);
  auto got = ulysses::testing::train_on_ranks(dp, 3);
  for (size_t s = 0; s < 3; ++s)
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << "step " << s;
}

TEST(HfTrainingArguments, NamesAreReadAsAliasesAndDefaultsAreHfs) {
  TrainConfig d;
  EXPECT_EQ(d.adam_beta1, 0.9);
  EXPECT_EQ(d.adam_beta2, 0.999);
  EXPECT_EQ(d.adam_epsilon, 1e-8);
  json j = {{"train",
             {{"learning_rate", 2e-4},
              {"max_steps", 30},
              {"per_device_train_batch_size", 2},
              {"max_grad_norm", 0.5},
              {"gradient_accumulation_steps", 8},
              {"lr_scheduler_type", "linear"},
              {"adam_beta2", 0.95}}}};
  RunConfig c = RunConfig::from_json(j);
  EXPECT_EQ(c.train.lr, 2e-4);
  EXPECT_EQ(c.train.steps, 30);
  EXPECT_EQ(c.train.micro_batch_size, 2);
  EXPECT_EQ(c.train.grad_clip, 0.5);
  EXPECT_EQ(c.train.gradient_accumulation_steps, 8);
  EXPECT_EQ(c.train.adam_beta2, 0.95);
  json both = {{"train", {{"learning_rate", 2e-4}, {"lr", 1e-3}}}};
  EXPECT_THROW(RunConfig::from_json(both), ConfigError);
  json cfg = {{"train", {{"lr", 1e-3}}}};
  apply_override(cfg, "train.learning_rate=5e-4");  // replaces lr, no clash
  EXPECT_EQ(RunConfig::from_json(cfg).train.lr, 5e-4);
  RunConfig bad;
  bad.train.lr_scheduler_type = "polynomial";
  bad.train.adam_beta2 = 1.0;
  bad.train.gradient_accumulation_steps = 0;
  std::string all;
  for (const auto& i : validate(bad)) all += i.message + "\n";
  EXPECT_NE(all.find("lr_scheduler_type must be cosine"), std::string::npos) << all;
  EXPECT_NE(all.find("adam_beta2 must be in [0, 1)"), std::string::npos) << all;
  EXPECT_NE(all.find("gradient_accumulation_steps must be positive"), std::string::npos) << all;
}

TEST(HfTrainingArguments, AdamWUsesTheConfiguredBetas) {
  // One step with beta2 0.95 and one with 0.999 from the same state: the second step's
  // update differs (the first AdamW step is sign-like and does not see beta2).
  auto a = small(1);
  a.train.warmup_steps = 0;
  auto b = a;
  b.train.adam_beta2 = 0.95;
  auto ra = ulysses::testing::train_on_ranks(a, 3);
  auto rb = ulysses::testing::train_on_ranks(b, 3);
  EXPECT_EQ(ra.losses[0], rb.losses[0]);
  EXPECT_NE(ra.losses[2], rb.losses[2]);
}

TEST(HfTrainingArguments, Qwen3ExampleConfigIsValid) {
  RunConfig c = load_run_config(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/qwen3-tiny.json");
  EXPECT_TRUE(validate(c).empty());
  EXPECT_EQ(c.model.model_type, "qwen3");
  EXPECT_EQ(c.model.head_dim(), 32);
  EXPECT_EQ(c.train.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.train.steps, 20);
}
