// Run config: parsing, unknown keys, --set overrides, HF config.json mapping, validation
// messages that name the numbers.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "run_config.hpp"

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
  EXPECT_TRUE(has(validate(c), "model.num_key_value_heads", "num_key_value_heads (6) must be divisible by parallel.sp_size (4)"));
}

TEST(Config, HeadChunksMustDivideLocalHeads) {
  RunConfig c = base();  // 8 heads / sp 4 = 2 local
  c.parallel.head_chunks = 2;
  EXPECT_TRUE(validate(c).empty());
  c.parallel.head_chunks = 4;
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks", "local heads per rank"));
  c.parallel.head_chunks = 3;
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks", "parallel.head_chunks (3) must divide the local heads per rank, num_attention_heads/sp_size = 2"));
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
  EXPECT_TRUE(has(validate(c), "parallel.head_chunks", "must divide the local heads per rank, num_attention_heads/sp_size = 8"));
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
  scaled["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
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
}

TEST(Config, ExampleConfigsAreValid) {
  for (const char* name : {"tiny.json", "bench-1b.json", "long-seq.json"}) {
    RunConfig c = RunConfig::from_json(load_json_file(std::string(ULYSSES_SOURCE_DIR) + "/resources/configs/" + name));
    EXPECT_TRUE(validate(c).empty()) << name;
  }
}
