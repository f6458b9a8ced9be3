// Numerics (docs/NUMERICS.md): the long reductions (reductions.hpp) against fp64 references at awkward sizes,
// on inputs that round the same way in every chunk, on shards and across ranks; RoPE tables:
// rope_precision hf bit-equal to Hugging Face's fp32 formula, fp64 within fp32 rounding of
// exact angles at positions near 1M (where hf's angles are off by ~0.03 rad).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rank_threads.hpp"
#include "reductions.hpp"

using namespace ulysses;

namespace {

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

double ref_sum_sq(const at::Tensor& x) { return x.to(torch::kFloat64).pow(2).sum().item<double>(); }

}  // namespace

TEST(Reductions, SumOfSquaresWithinBoundAtAwkwardSizes) {
  auto gen = at::detail::createCPUGenerator(7);
  const int64_t C = kReductionChunk;
  for (int64_t n : {int64_t{1}, C - 1, C, C + 1, int64_t{1000003}, kReductionPiece + 17}) {
    auto x = at::normal(0.0, 1e-3, {n}, gen);  // (n) fp32
    const double want = ref_sum_sq(x);
    auto got = sum_of_squares_fp64(x);
    EXPECT_EQ(got.scalar_type(), torch::kFloat64);
    EXPECT_EQ(got.dim(), 0);
    EXPECT_LT(rel(got.item<double>(), want), 1e-6) << "n = " << n;
    EXPECT_LT(rel(l2_norm(x), std::sqrt(want)), 1e-6) << "n = " << n;
  }
  EXPECT_EQ(sum_of_squares_fp64(torch::zeros({0})).item<double>(), 0.0);
}

TEST(Reductions, ConstantInputsRoundingAlikeInEveryChunkStayWithinBound) {
  // Every chunk holds the same values, so its rounding error repeats instead of averaging
  // out: the hardest case for per-chunk partials (a single fp32 x.norm() is off by 1e-3 here).
  for (double v : {0.1, 1.0 / 3.0, 0.7, 1.1, 3e-5}) {
    auto x = torch::full({int64_t{3} << 20}, v);  // (3M) fp32
    EXPECT_LT(rel(sum_of_squares_fp64(x).item<double>(), ref_sum_sq(x)), 1e-6) << v;
    EXPECT_LT(rel(sum_fp64(x).item<double>(), x.to(torch::kFloat64).sum().item<double>()), 1e-6) << v;
  }
}

TEST(Reductions, ShardsAddUpToTheWholeBuffer) {
  // ZeRO: each rank reduces its shard; the sum of the fp64 partials is the whole buffer's.
  auto x = torch::randn({5000001});
  const double whole = sum_of_squares_fp64(x).item<double>();
  double aligned = 0, other = 0;  // shards of whole chunks: the same fp32 partials as the whole
  for (auto& s : x.split(kReductionChunk * 26563)) aligned += sum_of_squares_fp64(s).item<double>();
  for (auto& s : x.split(1700001)) other += sum_of_squares_fp64(s).item<double>();
  EXPECT_LT(rel(aligned, whole), 1e-14);
  EXPECT_LT(rel(other, ref_sum_sq(x)), 1e-6);
  EXPECT_LT(rel(whole, ref_sum_sq(x)), 1e-6);
}

TEST(Reductions, OtherDtypesAndLayouts) {
  auto x = torch::randn({300, 517});
  const double want = ref_sum_sq(x.t());
  EXPECT_LT(rel(sum_of_squares_fp64(x.t()).item<double>(), want), 1e-6);  // non-contiguous
  auto b = x.to(torch::kBFloat16);                                        // widened to fp32, not summed in bf16
  EXPECT_LT(rel(sum_of_squares_fp64(b).item<double>(), ref_sum_sq(b)), 1e-6);
  auto d = x.to(torch::kFloat64);
  EXPECT_LT(rel(sum_of_squares_fp64(d).item<double>(), want), 1e-12);
  auto pos = torch::rand({2000003}) * 10;  // per-token losses
  EXPECT_LT(rel(sum_fp64(pos).item<double>(), pos.to(torch::kFloat64).sum().item<double>()), 1e-6);
}

TEST(Reductions, TokenMeanOverRanksIsExactInFp64) {
  // Three ranks (threads, Gloo): loss sums that an fp32 all-reduce would round, counts past 2^24.
  const std::vector<double> sums = {1.0e7 + 0.123456789, 2.5e7 + 0.987654321, 3.0e-3};
  const std::vector<int64_t> counts = {(int64_t{1} << 24) + 1, (int64_t{1} << 24) + 3, 7};
  std::vector<double> means(3), totals(3);
  ulysses::testing::run_ranks(3, [&](const DistEnv& env) {
    Comm comm(env, 3, 1, "gloo", std::chrono::milliseconds(60000));
    auto s = torch::tensor(sums[env.rank], torch::kFloat64);
    auto c = torch::tensor(counts[env.rank], torch::kInt64);
    means[env.rank] = global_token_mean(s, c, comm, &totals[env.rank]);
  });
  const double want_count = static_cast<double>(counts[0] + counts[1] + counts[2]);
  const double want = (sums[0] + sums[1] + sums[2]) / want_count;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(totals[r], want_count) << "rank " << r;  // an fp32 count would be 33554440
    EXPECT_LT(rel(means[r], want), 1e-15) << "rank " << r;
  }
}

namespace {

ModelConfig rope_model(const std::string& precision) {
  ModelConfig c;
  c.hidden_size = 1024;
  c.num_attention_heads = 8;  // dh 128, as Llama
  c.rope_theta = 500000.0;
  c.rope_precision = precision;
  return c;
}

}  // namespace

TEST(RopePrecision, HfTablesAreTransformersFp32Formula) {
  // modeling_llama: inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim); freqs =
  // inv_freq[:, None].float() @ position_ids[None, :].float() (one fp32 product each); emb =
  // cat(freqs, freqs); cos, sin.
  const auto c = rope_model("hf");
  const int64_t dh = c.head_dim(), pos0 = 1048576 - 64, n = 64;
  auto inv = 1.0 / torch::pow(c.rope_theta, torch::arange(0, dh, 2, torch::kInt64).to(torch::kFloat32) / double(dh));
  auto freqs = torch::arange(pos0, pos0 + n, torch::kInt64).to(torch::kFloat32).unsqueeze(1) * inv.unsqueeze(0);
  auto emb = torch::cat({freqs, freqs}, -1);  // (n, dh)
  auto [cos, sin] = rope_tables(pos0, n, rope_inv_freq(c).first, 1.0, torch::TensorOptions().dtype(torch::kFloat32));
  EXPECT_TRUE(cos.equal(emb.cos()));
  EXPECT_TRUE(sin.equal(emb.sin()));
  EXPECT_EQ(rope_inv_freq(c).first.scalar_type(), torch::kFloat32);
}

TEST(RopePrecision, Fp64TablesHaveFp32RoundingAtAMillionPositions) {
  const int64_t pos0 = 1048576 - 256, n = 256;
  const auto c = rope_model("fp64");
  const int64_t dh = c.head_dim();
  // exact angles: scalar double loop, std::pow, no torch
  auto want_cos = torch::empty({n, dh}, torch::kFloat64), want_sin = torch::empty({n, dh}, torch::kFloat64);
  auto wc = want_cos.accessor<double, 2>(), ws = want_sin.accessor<double, 2>();
  for (int64_t i = 0; i < dh / 2; ++i) {
    const double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dh));
    for (int64_t p = 0; p < n; ++p) {
      const double a = static_cast<double>(pos0 + p) * f;
      wc[p][i] = wc[p][i + dh / 2] = std::cos(a);
      ws[p][i] = ws[p][i + dh / 2] = std::sin(a);
    }
  }
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto [inv64, s64] = rope_inv_freq(c, torch::kFloat64);
  EXPECT_EQ(inv64.scalar_type(), torch::kFloat64);
  auto [cos64, sin64] = rope_tables(pos0, n, inv64, s64, f32);
  auto err = [&](const at::Tensor& got, const at::Tensor& want) {
    return (got.to(torch::kFloat64) - want).abs().max().item<double>();
  };
  // fp64 angles, then one rounding to fp32 (half an ulp of values <= 1: 2^-25, plus a hair)
  EXPECT_LT(err(cos64, want_cos), 6.1e-8);
  EXPECT_LT(err(sin64, want_sin), 6.1e-8);
  // Hugging Face's fp32 angles at ~1M: off by up to ~0.03 rad, so cos/sin by ~1e-2
  auto [cos32, sin32] = rope_tables(pos0, n, rope_inv_freq(c).first, 1.0, f32);
  EXPECT_GT(err(cos32, want_cos), 1e-3);
  EXPECT_GT(err(sin32, want_sin), 1e-3);
}

TEST(RopePrecision, ConfigFieldDefaultsToHfAndRefusesOtherValues) {
  RunConfig c;
  EXPECT_EQ(c.model.rope_precision, "hf");
  c.model.rope_precision = "fp16";
  bool named = false;
  for (const auto& i : validate(c))
    if (i.field == "model.rope_precision" && i.message.find("hf or fp64") != std::string::npos) named = true;
  EXPECT_TRUE(named);
  c.model.rope_precision = "fp64";
  EXPECT_EQ(RunConfig::from_json(c.to_json()).model.rope_precision, "fp64");
  for (const auto& i : validate(c)) EXPECT_NE(i.field, "model.rope_precision") << i.message;
  EXPECT_FALSE(model_to_hf_config(c.model).contains("rope_precision"));  // not a Transformers key
}

TEST(RopePrecision, KeptWhenTheModelComesFromACheckpoint) {
  // train.init_from replaces the model section with the checkpoint's config.json, whose keys
  // the config's own must equal; rope_precision is no checkpoint key: it is kept, not compared.
  const auto dir = std::filesystem::temp_directory_path() / ("ulysses_rope_precision_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ModelConfig m;
  m.hidden_size = 128;
  std::ofstream(dir / "config.json") << model_to_hf_config(m).dump();
  json j = {{"model", {{"rope_precision", "fp64"}}}, {"train", {{"init_from", dir.string()}}}};
  const RunConfig c = run_config_from_json(j);
  EXPECT_EQ(c.model.rope_precision, "fp64");
  EXPECT_EQ(c.model.hidden_size, 128);
  j["model"] = json::object();
  EXPECT_EQ(run_config_from_json(j).model.rope_precision, "hf");
  std::filesystem::remove_all(dir);
}
