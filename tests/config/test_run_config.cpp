// Run config: parsing, unknown keys, --set overrides, HF config.json mapping, validation
// messages that name the numbers.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>

#include "json_checked.hpp"
#include "run_config.hpp"
#include "safetensors_header.hpp"

using namespace ulysses;
namespace fs = std::filesystem;

namespace {
RunConfig base() {
  RunConfig c;
  c.model.num_attention_heads = 8;
  c.model.num_key_value_heads = 4;
  c.model.hidden_size = 64;
  c.parallel.sp_size = 4;
  c.train.seq_length = 64;
  return c;
}
bool has(const std::vector<ConfigIssue>& v, const std::string& field, const std::string& text) {
  for (const auto& i : v)
    if (i.field == field && i.message.find(text) != std::string::npos) return true;
  return false;
}
std::string tmpdir() {
  auto d = fs::temp_directory_path() / ("ulysses_cfg_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}
}  // namespace

TEST(Config, RoundTripThroughJson) {
  RunConfig c = base();
  c.train.lr = 0.01;
  c.data.kind = "tokens";
  c.profile.step_end = 7;
  RunConfig d = RunConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_EQ(d.profile.step_end, 7);
}

TEST(Config, UnknownKeyNamesKeyAndValidKeys) {
  json j = {{"train", {{"stepz", 3}}}};
  try {
    RunConfig::from_json(j);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.stepz"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos);
  }
  EXPECT_THROW(RunConfig::from_json(json{{"modle", json::object()}}), ConfigError);
  EXPECT_THROW(RunConfig::from_json(json{{"train", {{"steps", "ten"}}}}), ConfigError);
}

TEST(Config, OverridesByDottedPath) {
  json j = base().to_json();
  apply_override(j, "parallel.sp_size=2");
  apply_override(j, "train.dtype=bfloat16");
  apply_override(j, "model.tie_word_embeddings=true");
  RunConfig c = RunConfig::from_json(j);
  EXPECT_EQ(c.parallel.sp_size, 2);
  EXPECT_EQ(c.train.dtype, "bfloat16");
  EXPECT_TRUE(c.model.tie_word_embeddings);
  EXPECT_THROW(apply_override(j, "parallel.spsize=2"), ConfigError);
  EXPECT_THROW(apply_override(j, "sp_size=2"), ConfigError);
  EXPECT_THROW(apply_override(j, "parallel.sp_size"), ConfigError);
  EXPECT_THROW(apply_override(j, "parallel.sp_size=two"), ConfigError);
}

TEST(Config, ValidBaseHasNoIssues) { EXPECT_TRUE(validate(base()).empty()); }

TEST(Config, HeadsNotDivisibleBySp) {
  RunConfig c = base();
  c.model.num_attention_heads = 12;
  c.model.num_key_value_heads = 12;
  c.model.hidden_size = 96;
  c.parallel.sp_size = 8;
  c.train.seq_length = 64;
  auto v = validate(c);
  EXPECT_TRUE(has(v, "parallel.sp_size", "num_attention_heads (12) must be divisible by parallel.sp_size (8)"));
}

TEST(Config, SeqNotDivisibleBySp) {
  RunConfig c = base();
  c.train.seq_length = 66;
  EXPECT_TRUE(has(validate(c), "train.seq_length", "seq_length (66) must be divisible by parallel.sp_size (4)"));
}

TEST(Config, KvHeadsRules) {
  RunConfig c = base();
  c.model.num_key_value_heads = 2;  // 2 < 4 and divides it: replicated, fine
  EXPECT_TRUE(validate(c).empty());
  c.model.num_attention_heads = 12;
  c.model.hidden_size = 96;
  c.model.num_key_value_heads = 6;  // neither divisible by 4 nor divides it
  c.parallel.sp_size = 4;
  EXPECT_TRUE(has(validate(c), "model.num_key_value_heads",
                  "num_key_value_heads (6) must be divisible by parallel.sp_size (4)"));
}

TEST(Config, HeadChunksMustDivideLocalHeads) {
  RunConfig c = base();  // 8 heads / sp 4 = 2 local
  c.parallel.head_chunks = 2;
  EXPECT_TRUE(validate(c).empty());
  c.parallel.head_chunks = 4;
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks", "local heads per rank"));
  c.parallel.head_chunks = 3;
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks",
                  "parallel.head_chunks (3) must divide the local heads per rank, num_attention_heads/sp_size = 2"));
}

TEST(Config, HeadChunksWithGqaNeedOnlyDivideLocalQHeads) {
  // 8 q heads, 4 kv heads, sp 2: 4 local q heads, 2 local kv heads. 4 chunks of 1 q head
  // (two chunks per kv head; it travels with the first) are accepted, as are 1 and 2.
  RunConfig c = base();
  c.parallel.sp_size = 2;
  for (int64_t chunks : {1, 2, 4}) {
    c.parallel.head_chunks = chunks;
    EXPECT_TRUE(validate(c).empty()) << "head_chunks " << chunks;
  }
  // 8 q heads, 4 kv heads, sp 1: 8 local q heads over 4 kv heads; 8 chunks of 1 q head.
  c.model.num_key_value_heads = 4;
  c.parallel.sp_size = 1;
  c.parallel.head_chunks = 8;
  EXPECT_TRUE(validate(c).empty());
  c.parallel.head_chunks = 3;  // not a divisor of the 8 local q heads
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks",
                  "must divide the local heads per rank, num_attention_heads/sp_size = 8"));
}

TEST(Config, EnumsAndRanges) {
  RunConfig c = base();
  c.train.dtype = "fp8";
  c.parallel.backend = "mpi";
  c.data.kind = "parquet";
  c.train.steps = 0;
  auto v = validate(c);
  EXPECT_TRUE(has(v, "train.dtype", "fp8"));
  EXPECT_TRUE(has(v, "parallel.backend", "mpi"));
  EXPECT_TRUE(has(v, "data.kind", "parquet"));
  EXPECT_TRUE(has(v, "train.steps", "positive"));
}

TEST(Config, VocabTooSmallForText) {
  RunConfig c = base();
  c.data.kind = "text";
  c.data.path = "x.txt";
  c.model.vocab_size = 100;
  EXPECT_TRUE(has(validate(c), "model.vocab_size", "at least 256"));
}

TEST(Config, FilesMissingDataAndTokenRange) {
  const std::string d = tmpdir();
  RunConfig c = base();
  c.data.kind = "tokens";
  c.data.path = d + "/missing.bin";
  EXPECT_TRUE(has(validate_with_files(c), "data.path", "not found"));
  // 100 uint16 tokens with a largest id of 300 against vocab 256
  {
    std::ofstream out(d + "/tok.bin", std::ios::binary);
    for (int i = 0; i < 100; ++i) {
      uint16_t t = i == 50 ? 300 : static_cast<uint16_t>(i);
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  c.data.path = d + "/tok.bin";
  c.model.vocab_size = 256;
  EXPECT_TRUE(has(validate_with_files(c), "model.vocab_size", "largest token id is 300"));
  c.model.vocab_size = 512;
  EXPECT_TRUE(validate_with_files(c).empty());
  c.train.seq_length = 128;  // needs 129 tokens, file has 100
  EXPECT_TRUE(has(validate_with_files(c), "data.path", "fewer than train.seq_length + 1"));
  fs::remove_all(d);
}

TEST(Config, HfConfigRoundTripAndRefusals) {
  ModelConfig m;
  m.vocab_size = 32000;
  m.hidden_size = 2048;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 8;
  json hf = model_to_hf_config(m);
  EXPECT_EQ(hf["model_type"], "llama");
  ModelConfig back = model_from_hf_config(hf);
  EXPECT_EQ(back.num_key_value_heads, 8);
  EXPECT_EQ(back.vocab_size, 32000);
  json no_kv = hf;
  no_kv.erase("num_key_value_heads");
  EXPECT_EQ(model_from_hf_config(no_kv).num_key_value_heads, 16);  // HF default: MHA
  json gelu = hf;
  gelu["hidden_act"] = "gelu";
  EXPECT_THROW(model_from_hf_config(gelu), ConfigError);
  json scaled = hf;
  scaled["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};  // linear/llama3/yarn are supported, dynamic is not
  EXPECT_THROW(model_from_hf_config(scaled), ConfigError);
}

TEST(Config, ParameterCountOfBench1b) {
  // bench-1b: V=32000, d=2048, L=16, H=16, Hkv=8, ff=5632, untied.
  // embed 65,536,000; per layer attn 2048*2048*2 + 2048*1024*2 = 12,582,912,
  // mlp 3*2048*5632 = 34,603,008, norms 4096 -> 47,190,016; x16 = 755,040,256;
  // final norm 2048; lm_head 65,536,000. Total 886,114,304.
  ModelConfig m;
  m.vocab_size = 32000;
  m.hidden_size = 2048;
  m.intermediate_size = 5632;
  m.num_hidden_layers = 16;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 8;
  EXPECT_EQ(m.num_parameters(), 886114304);
  // The list a checkpoint is checked against adds up to the same hand-computed count, in
  // Hugging Face's order: embedding first, final norm and head last.
  int64_t listed = 0;
  for (const auto& p : m.parameters()) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    listed += n;
  }
  EXPECT_EQ(listed, 886114304);
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), 1u + 16u * 9u + 2u);
  EXPECT_EQ(params.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(params[2].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(params[2].shape, (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(params.back().name, "lm_head.weight");
}

// The families' extra parameters (qwen2's q/k/v biases, qwen3's q/k norms, llama's
// attention_bias, a tied head) in the list, each family's count equal to the formula.
TEST(Config, ParameterListOfEachFamilyMatchesTheFormula) {
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3"})
    for (bool bias : {false, true})
      for (bool tied : {false, true}) {
        ModelConfig m;
        m.model_type = type;
        m.attention_bias = bias && std::string(type) != "mistral" && std::string(type) != "qwen2";
        m.tie_word_embeddings = tied;
        m.explicit_head_dim = std::string(type) == "qwen3" ? 24 : 0;
        int64_t listed = 0;
        std::set<std::string> names;
        for (const auto& p : m.parameters()) {
          int64_t n = 1;
          for (int64_t d : p.shape) n *= d;
          listed += n;
          EXPECT_TRUE(names.insert(p.name).second) << p.name << " twice";
        }
        EXPECT_EQ(listed, m.num_parameters()) << type << " bias " << bias << " tied " << tied;
        EXPECT_EQ(names.count("lm_head.weight"), tied ? 0u : 1u);
        EXPECT_EQ(names.count("model.layers.1.self_attn.q_proj.bias"), m.qkv_bias() ? 1u : 0u) << type;
        EXPECT_EQ(names.count("model.layers.1.self_attn.o_proj.bias"), m.o_bias() ? 1u : 0u) << type;
        EXPECT_EQ(names.count("model.layers.1.self_attn.k_norm.weight"), m.qk_norm() ? 1u : 0u) << type;
      }
}

TEST(Config, ExampleConfigsAreValid) {
  for (const char* name : {"tiny.json", "bench-1b.json", "long-seq.json"}) {
    RunConfig c = RunConfig::from_json(load_json_file(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/" + name));
    EXPECT_TRUE(validate(c).empty()) << name;
  }
}

// ---- reliability (docs/RELIABILITY.md): bounds, overflow, numbers beyond a double, files ---

TEST(ConfigReliability, EveryIntegerHasAnUpperBound) {
  struct Case {
    const char* key;
    std::function<void(RunConfig&)> set;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"model.num_hidden_layers", [](RunConfig& c) { c.model.num_hidden_layers = 1000000000; },
       "at most 1024, got 1000000000"},
      {"model.vocab_size", [](RunConfig& c) { c.model.vocab_size = int64_t{1} << 40; }, "at most 16777216"},
      {"model.hidden_size", [](RunConfig& c) { c.model.hidden_size = int64_t{1} << 40; }, "at most 262144"},
      {"parallel.sp_size", [](RunConfig& c) { c.parallel.sp_size = int64_t{1} << 62; }, "at most 1024"},
      {"parallel.dp_size", [](RunConfig& c) { c.parallel.dp_size = 3037000500; }, "at most 1024"},
      {"train.seq_length", [](RunConfig& c) { c.train.seq_length = INT64_MAX - 3; },
       "at most 1073741824, got 9223372036854775804"},
      {"train.steps", [](RunConfig& c) { c.train.steps = INT64_MAX; }, "at most"},
      {"train.threads_per_rank", [](RunConfig& c) { c.train.threads_per_rank = 1 << 30; }, "at most 4096"},
      {"profile.step_end", [](RunConfig& c) { c.profile.step_end = -5; }, "-1 (all)"},
  };
  for (const auto& k : cases) {
    RunConfig c = base();
    k.set(c);
    EXPECT_TRUE(has(validate(c), k.key, k.expect)) << k.key;
  }
}

TEST(ConfigReliability, DoublesMustBeFiniteAndTimeoutBounded) {
  RunConfig c = base();
  c.parallel.timeout_s = 1e300;
  EXPECT_TRUE(has(validate(c), "parallel.timeout_s", "at most 604800 (7 days), got 1e+300"));
  c.parallel.timeout_s = 0.001;  // would get a healthy rank declared dead after launch
  EXPECT_TRUE(has(validate(c), "parallel.timeout_s", "at least 1 s"));
  c.parallel.timeout_s = 1;
  EXPECT_FALSE(has(validate(c), "parallel.timeout_s", ""));
  c = base();
  c.train.lr = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(has(validate(c), "train.lr", "finite"));
  c = base();
  c.train.min_lr = std::nan("");
  EXPECT_TRUE(has(validate(c), "train.min_lr", "finite"));
}

TEST(ConfigReliability, ProductsThatOverflowInt64AreRefusedWithTheirValues) {
  RunConfig c = base();
  c.model.vocab_size = 1 << 24;
  c.train.seq_length = 1 << 30;
  c.train.micro_batch_size = 1 << 20;
  const auto v = validate(c);
  ASSERT_TRUE(has(v, "train.seq_length", "more than 2^63 bytes"));
  for (const auto& i : v)
    EXPECT_EQ(i.message.find("-"), std::string::npos) << "a wrapped negative number: " << i.message;
}

// --plan at 2^29 tokens on CPU claimed "more than 2^63 bytes": the check counted N x N scores
// for the blocked kernel CPU runs by default, which keeps none (issue 54).
TEST(ConfigReliability, NxNScoresAreCountedOnlyForTheKernelThatKeepsThem) {
  RunConfig c = base();
  c.train.seq_length = int64_t{1} << 29;
  c.train.device = "cpu";
  c.train.attention = "auto";  // blocked on CPU
  EXPECT_FALSE(has(validate(c), "train.seq_length", "more than 2^63 bytes"));
  c.train.attention = "blocked";
  EXPECT_FALSE(has(validate(c), "train.seq_length", "more than 2^63 bytes"));
  c.train.attention = "sdpa";  // the math path keeps the 2^58 x H x L scores
  EXPECT_TRUE(has(validate(c), "train.seq_length", "more than 2^63 bytes"));
}

TEST(ConfigReliability, NumbersBeyondTheirTypeAreConfigErrors) {
  json j = base().to_json();
  EXPECT_THROW(apply_override(j, "train.lr=1e999"), ConfigError);
  EXPECT_THROW(RunConfig::from_json(json{{"train", {{"steps", 1e300}}}}), ConfigError);
  EXPECT_THROW(RunConfig::from_json(json{{"train", {{"steps", json(uint64_t{18446744073709551615ULL})}}}}),
               ConfigError);
  EXPECT_THROW(RunConfig::from_json(json{{"train", {{"steps", 2.5}}}}), ConfigError);
  const std::string d = tmpdir();
  { std::ofstream(d + "/huge.json") << R"({"train": {"lr": 1e999}})"; }
  try {
    load_json_file(d + "/huge.json");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

TEST(ConfigReliability, StringsMustBeUtf8AndMessagesNeverThrow) {
  json j = base().to_json();
  try {
    apply_override(j, std::string("data.path=/tmp/\xff\xfe"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(apply_override(j, std::string("train.steps=\xc3\x28")), ConfigError);  // dump() of it would throw
  EXPECT_NO_THROW(apply_override(j, "data.path=/tmp/caf\xc3\xa9.txt"));               // valid UTF-8 is fine
  // A NUL inside a string (JSON \u0000) is refused: paths would be cut short at it.
  try {
    RunConfig::from_json(json{{"data", {{"path", std::string("/tmp/a.txt\0xyz", 14)}}}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.path holds a NUL character"), std::string::npos) << e.what();
  }
}

// RoPE values that give a NaN loss at step 0, after launch, are refused by validation.
TEST(ConfigReliability, RopeValuesThatOverflowAreRefused) {
  RunConfig c = base();
  c.model.rope_theta = 1e-50;
  EXPECT_TRUE(has(validate(c), "model.rope_theta", "between 1 and 1e15"));
  c.model.rope_theta = 1.0;
  EXPECT_FALSE(has(validate(c), "model.rope_theta", ""));
  c = base();
  c.model.rope_type = "yarn";
  c.model.rope_factor = 2;
  c.model.rope_attention_factor = 1e300;
  EXPECT_TRUE(has(validate(c), "model.rope_attention_factor", "between 0 and 100"));
  c.model.rope_attention_factor = 1.2;
  EXPECT_FALSE(has(validate(c), "model.rope_attention_factor", ""));
}

// A finite but absurd learning rate (1e300) or weight decay turns the weights into inf or
// flips them at the first AdamW update: a NaN loss after launch. Refused by validation.
TEST(ConfigReliability, LearningRateAndWeightDecayAreBounded) {
  RunConfig c = base();
  c.train.lr = 1e300;
  c.train.min_lr = 0;
  EXPECT_TRUE(has(validate(c), "train.lr", "at most 10"));
  c.train.lr = 10;
  EXPECT_FALSE(has(validate(c), "train.lr", ""));
  c.train.lr = 1e-3;
  c.train.weight_decay = 1e300;
  EXPECT_TRUE(has(validate(c), "train.weight_decay", "lr x train.weight_decay must be below 1"));
  c.train.weight_decay = 1000;  // 1e-3 x 1000 = 1: zeroes every weight
  EXPECT_TRUE(has(validate(c), "train.weight_decay", "below 1"));
  c.train.weight_decay = 0.1;
  EXPECT_FALSE(has(validate(c), "train.weight_decay", ""));
  c.train.lr = -1;  // one message for lr, none about the product
  EXPECT_TRUE(has(validate(c), "train.lr", "positive"));
  EXPECT_FALSE(has(validate(c), "train.weight_decay", ""));
}

// A Hugging Face config.json with null for a size, or mlp_bias that is not a boolean, must not
// be read with this reader's own defaults (vocab_size 256) or taken as false.
// A checkpoint's config.json lacking a model size: read with the demo's default, a 4-layer
// checkpoint without num_hidden_layers would train as a 2-layer model, exit 0 (Transformers
// would take 32). train.init_from refuses it, naming the key and the file.
TEST(ConfigReliability, InitFromConfigLackingAModelSizeIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ulysses_init_sizes_" + std::to_string(::getpid()));
  fs::create_directories(dir / "ck");
  ModelConfig m;
  m.num_hidden_layers = 4;
  const json hf = model_to_hf_config(m);
  std::ofstream(dir / "run.json") << R"({"data": {"kind": "synthetic"}, "train": {"init_from": ")" +
                                         (dir / "ck").string() + R"("}})";
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = hf;
    j.erase(k);
    std::ofstream(dir / "ck" / "config.json", std::ios::trunc) << j.dump();
    try {
      load_run_config((dir / "run.json").string(), {});
      ADD_FAILURE() << "a config.json without " << k << " was read";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("lacks ") + k), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.init_from"), std::string::npos) << e.what();
    }
  }
  std::ofstream(dir / "ck" / "config.json", std::ios::trunc) << hf.dump();
  EXPECT_EQ(load_run_config((dir / "run.json").string(), {}).model.num_hidden_layers, 4);
  fs::remove_all(dir);
}

TEST(ConfigReliability, HfConfigNullsAndNonBooleansAreRefused) {
  ModelConfig m;
  m.vocab_size = 32000;
  m.hidden_size = 256;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  const json hf = model_to_hf_config(m);
  for (const char* k : {"vocab_size", "hidden_size", "rms_norm_eps", "tie_word_embeddings", "rope_theta"}) {
    json j = hf;
    j[k] = nullptr;
    try {
      model_from_hf_config(j);
      ADD_FAILURE() << k << " null was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(k) + " is null"), std::string::npos) << e.what();
    }
  }
  json j = hf;
  j["mlp_bias"] = "yes";
  EXPECT_THROW(model_from_hf_config(j), ConfigError);
  j["mlp_bias"] = false;
  EXPECT_EQ(model_from_hf_config(j).vocab_size, 32000);
  j["num_key_value_heads"] = nullptr;  // Hugging Face: as many as the query heads
  EXPECT_EQ(model_from_hf_config(j).num_key_value_heads, 4);
  j["head_dim"] = nullptr;
  j["sliding_window"] = nullptr;
  j["rope_scaling"] = nullptr;
  j["pad_token_id"] = nullptr;
  EXPECT_EQ(model_from_hf_config(j).hidden_size, 256);
}

TEST(ConfigReliability, OnlyRegularFilesAreRead) {
  const std::string d = tmpdir();
  const std::string fifo = d + "/cfg.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(load_json_file(fifo), ConfigError);         // would block forever
  EXPECT_THROW(load_json_file("/dev/zero"), ConfigError);  // would read until memory runs out
  EXPECT_THROW(load_json_file(d), ConfigError);
  EXPECT_NE(regular_file_problem(fifo).find("FIFO"), std::string::npos);
  {
    std::ofstream big(d + "/big.json");
    big << "[" << std::string(kMaxJsonFileBytes, ' ') << "]";
  }
  EXPECT_NE(regular_file_problem(d + "/big.json", kMaxJsonFileBytes).find("limit"), std::string::npos);
  EXPECT_THROW(load_json_file(d + "/big.json"), ConfigError);
  RunConfig c = base();
  c.data.kind = "text";
  c.model.vocab_size = 256;
  c.data.path = fifo;
  EXPECT_TRUE(has(validate_with_files(c), "data.path", "not a regular file"));
  fs::remove_all(d);
}

TEST(Config, FaultsSlowRankAndDelayAreValidated) {
  RunConfig c = base();  // sp 4 x dp 1
  c.faults.slow_rank = 1;
  c.faults.delay_ms = 50;
  EXPECT_TRUE(validate(c).empty());
  const RunConfig d = RunConfig::from_json(c.to_json());
  EXPECT_EQ(d.faults.slow_rank, 1);
  EXPECT_EQ(d.faults.delay_ms, 50);
  RunConfig late = base();  // a profile window past the last step would trace nothing, unsaid
  late.train.steps = 2;
  late.profile.step_begin = 2;
  EXPECT_TRUE(has(validate(late), "profile.step_begin", "is past the last step (1, train.steps 2)"));
  late.profile.step_begin = 1;
  EXPECT_FALSE(has(validate(late), "profile.step_begin", ""));
  late.profile.step_begin = 5;
  late.profile.enabled = false;
  EXPECT_FALSE(has(validate(late), "profile.step_begin", ""));
  RunConfig bad_sp = base();  // slow_rank off: only sp_size is named, not slow_rank "below -2"
  bad_sp.parallel.sp_size = -2;
  EXPECT_TRUE(has(validate(bad_sp), "parallel.sp_size", ""));
  EXPECT_FALSE(has(validate(bad_sp), "faults.slow_rank", ""));
  c.faults.slow_rank = 4;
  EXPECT_TRUE(
      has(validate(c), "faults.slow_rank", "faults.slow_rank (4) must be -1 (off) or a rank below the world size (4"));
  c.faults.slow_rank = -2;
  EXPECT_TRUE(has(validate(c), "faults.slow_rank", "-1 (off)"));
  c = base();
  c.faults.slow_rank = 0;
  c.faults.delay_ms = 60001;
  EXPECT_TRUE(has(validate(c), "faults.delay_ms", "between 0 and 60000 ms"));
  c.faults.delay_ms = -1;
  EXPECT_TRUE(has(validate(c), "faults.delay_ms", "between 0 and 60000 ms"));
  c.faults.delay_ms = 0;
  EXPECT_TRUE(has(validate(c), "faults.delay_ms", "faults.delay_ms is 0"));
  json j = base().to_json();
  EXPECT_NO_THROW(apply_override(j, "faults.delay_ms=20"));
  EXPECT_THROW(apply_override(j, "faults.slowrank=1"), ConfigError);
}

// Nesting past kMaxJsonDepth and a key twice in one object are refused with a message, in a
// config file, a --set value, the launcher form's text and a safetensors header. A value
// nested 80 000 deep would end ulysses-run with SIGSEGV (printed recursively for the error).
TEST(ConfigReliability, DeepNestingAndRepeatedKeysAreConfigErrors) {
  const std::string d = tmpdir();
  const std::string deep = std::string(80000, '[') + std::string(80000, ']');
  auto file_error = [&](const std::string& text) {
    { std::ofstream(d + "/c.json") << text; }
    try {
      RunConfig::from_json(load_json_file(d + "/c.json"));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(file_error(R"({"train": {"steps": )" + deep + "}}").find("more than 64 deep"), std::string::npos);
  EXPECT_NE(file_error(R"({"parallel": {"sp_size": 2, "sp_size": 3}})").find(R"(key "sp_size" twice)"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"train": {}, "train": {}})").find(R"(key "train" twice)"), std::string::npos);
  // The same key in two different objects, and 64 levels, are fine.
  EXPECT_EQ(
      file_error(R"({"model": {"name": "a"}, "data": {"kind": "text"}, "x": [{"k": 1}, {"k": 2}]})").find("twice"),
      std::string::npos);
  EXPECT_NO_THROW(parse_checked_json(std::string(64, '[') + std::string(64, ']')));
  EXPECT_THROW(parse_checked_json(std::string(66, '[') + std::string(66, ']')), JsonShapeError);
  json j = base().to_json();
  try {
    apply_override(j, "train.steps=" + deep);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 64 deep"), std::string::npos) << e.what();
  }
  try {  // a deep value that parses fine at its depth still gives a short message
    RunConfig::from_json(json{{"train", {{"steps", parse_checked_json(std::string(60, '[') + std::string(60, ']'))}}}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
  const std::string hdr = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", )"
                          R"("shape": [1], "data_offsets": [4, 8]}})";
  try {
    parse_safetensors_header(hdr, 8 + hdr.size() + 8, "m.safetensors");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(R"(key "a" twice)"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// Two tensors sharing bytes are refused (a header pointing one tensor at another's bytes
// would load a different model without a word); adjacent and zero-size tensors are fine.
TEST(ConfigReliability, SafetensorsTensorsMayNotShareBytes) {
  auto header = [](const std::string& b_offsets) {
    return R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], )"
           R"("data_offsets": )" +
           b_offsets + R"(}, "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})";
  };
  const std::string ok = header("[8, 16]"), bad = header("[4, 12]");
  EXPECT_EQ(parse_safetensors_header(ok, 8 + ok.size() + 16, "m.safetensors").tensors.size(), 3u);
  try {
    parse_safetensors_header(bad, 8 + bad.size() + 16, "m.safetensors");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tensors a [0, 8) and b [4, 12) share bytes"), std::string::npos) << e.what();
  }
}
