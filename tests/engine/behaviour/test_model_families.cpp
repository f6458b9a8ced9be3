// Model families and checkpoints (docs/CONTRACTS.md): Hugging Face config.json in Transformers v4
// (rope_theta + rope_scaling) and v5 (rope_parameters) layouts for Llama, Mistral, Qwen2
// and Qwen3, with their refusals; checkpoints in HF names saved and reloaded bit-identical,
// single file and sharded (model.safetensors.index.json), fp32/bf16/fp16; Ulysses sp 2
// against one process on a Qwen3-style model (explicit head_dim, q/k norm, GQA, yarn).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <set>

#include "checkpoint.hpp"
#include "data.hpp"
#include "engine/rank_threads.hpp"
#include "safetensors_header.hpp"
#include "trainer.hpp"

using namespace ulysses;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& tag) {
  return (fs::temp_directory_path() / ("ulysses_fam_" + tag + "_" + std::to_string(::getpid()))).string();
}

std::string error_of(const json& hf) {
  try {
    model_from_hf_config(hf);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Qwen3-0.6B's config.json keys (sizes shrunk), as transformers 4.51 writes it.
json qwen3_v4() {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"head_dim", 16},
          {"hidden_act", "silu"},
          {"hidden_size", 24},
          {"initializer_range", 0.02},
          {"intermediate_size", 40},
          {"max_position_embeddings", 40960},
          {"max_window_layers", 28},
          {"num_attention_heads", 4},
          {"num_hidden_layers", 2},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-6},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.51.0"},
          {"use_cache", true},
          {"use_sliding_window", false},
          {"vocab_size", 64}};
}

bool same_model(const ModelConfig& a, const ModelConfig& b) {
  RunConfig x, y;
  x.model = a;
  y.model = b;
  return x.to_json()["model"] == y.to_json()["model"];
}

}  // namespace

TEST(HfConfig, FamiliesV4AndV5Layouts) {
  // Qwen3, v4 layout: explicit head_dim, q/k norm, Qwen's unused sliding_window keys.
  ModelConfig q3 = model_from_hf_config(qwen3_v4());
  EXPECT_EQ(q3.model_type, "qwen3");
  EXPECT_EQ(q3.head_dim(), 16);
  EXPECT_TRUE(q3.qk_norm());
  EXPECT_EQ(q3.rope_type, "default");
  EXPECT_DOUBLE_EQ(q3.rope_theta, 1e6);
  // The same model in the v5 layout: rope_theta inside rope_parameters.
  json v5 = qwen3_v4();
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5.erase("torch_dtype");
  v5["dtype"] = "bfloat16";
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  EXPECT_TRUE(same_model(model_from_hf_config(v5), q3));

  // Llama 3.1, v4: llama3 rope_scaling; v5: the same inside rope_parameters.
  json l31 = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", 64},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"rope_theta", 500000.0},
              {"max_position_embeddings", 131072},
              {"mlp_bias", false},
              {"rope_scaling",
               {{"factor", 8.0},
                {"low_freq_factor", 1.0},
                {"high_freq_factor", 4.0},
                {"original_max_position_embeddings", 8192},
                {"rope_type", "llama3"}}}};
  ModelConfig l = model_from_hf_config(l31);
  EXPECT_EQ(l.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(l.rope_factor, 8.0);
  EXPECT_EQ(l.rope_original_max_position_embeddings, 8192);
  json l31v5 = l31;
  l31v5.erase("rope_theta");
  l31v5["rope_parameters"] = l31["rope_scaling"];
  l31v5["rope_parameters"]["rope_theta"] = 500000.0;
  l31v5.erase("rope_scaling");
  EXPECT_TRUE(same_model(model_from_hf_config(l31v5), l));
  // v4's legacy "type" key, linear scaling.
  json lin = l31;
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(model_from_hf_config(lin).rope_type, "linear");

  // Qwen2: q/k/v biases without attention_bias; yarn as Qwen's docs set it.
  json q2 = {{"architectures", {"Qwen2ForCausalLM"}},
             {"model_type", "qwen2"},
             {"hidden_size", 64},
             {"num_attention_heads", 4},
             {"num_key_value_heads", 2},
             {"sliding_window", 32768},
             {"use_sliding_window", false},
             {"max_window_layers", 21},
             {"max_position_embeddings", 131072},
             {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}};
  ModelConfig q = model_from_hf_config(q2);
  EXPECT_TRUE(q.qkv_bias());
  EXPECT_FALSE(q.o_bias());
  EXPECT_EQ(q.rope_type, "yarn");
  RunConfig rc;
  rc.model = q;
  EXPECT_TRUE(validate(rc).empty());
  rc.model.max_position_embeddings = 40960;  // factor 4 x 32768 != 40960: versions disagree, refused
  bool refused = false;
  for (const auto& i : validate(rc)) refused |= i.message.find("factor x original") != std::string::npos;
  EXPECT_TRUE(refused);

  // Mistral without a window.
  json mi = {{"architectures", {"MistralForCausalLM"}},
             {"model_type", "mistral"},
             {"hidden_size", 64},
             {"num_attention_heads", 4},
             {"num_key_value_heads", 2},
             {"sliding_window", nullptr}};
  EXPECT_EQ(model_from_hf_config(mi).model_type, "mistral");

  // Export and import give the same model for every family and rope type.
  for (const ModelConfig& m : {q3, l, q, model_from_hf_config(mi), model_from_hf_config(lin)})
    EXPECT_TRUE(same_model(model_from_hf_config(model_to_hf_config(m)), m)) << model_to_hf_config(m).dump();
}

// Keys a config.json leaves out mean the family's Transformers default (checked against a
// pure-Python reference of each family's math): max_position_embeddings Llama 2048, Mistral
// 131072, Qwen2/Qwen3 32768 (not 4096 for all: yarn without original_max_position_embeddings
// scales by it); Qwen3's head_dim 128 and Mistral's 8 kv heads (otherwise the shape check
// refuses both checkpoints); Mistral without sliding_window has a 4096-token window, refused
// (this engine runs full attention).
TEST(HfConfig, AbsentKeysTakeTheFamilysTransformersDefault) {
  auto base = [](const std::string& type, const std::string& arch) {
    return json{{"architectures", {arch}},  {"model_type", type},     {"vocab_size", 256},       {"hidden_size", 64},
                {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  };
  const ModelConfig llama = model_from_hf_config(base("llama", "LlamaForCausalLM"));
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_EQ(llama.num_key_value_heads, 4);
  json mis = base("mistral", "MistralForCausalLM");
  mis["num_attention_heads"] = 16;
  try {
    model_from_hf_config(mis);
    ADD_FAILURE() << "a Mistral config without sliding_window loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("4096-token sliding window"), std::string::npos) << e.what();
  }
  mis["sliding_window"] = nullptr;
  const ModelConfig m = model_from_hf_config(mis);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_EQ(m.num_key_value_heads, 8);
  mis["num_key_value_heads"] = nullptr;  // null: as many as the query heads, in every family
  EXPECT_EQ(model_from_hf_config(mis).num_key_value_heads, 16);
  const ModelConfig q3 = model_from_hf_config(base("qwen3", "Qwen3ForCausalLM"));
  EXPECT_EQ(q3.head_dim(), 128);
  EXPECT_EQ(q3.max_position_embeddings, 32768);
  EXPECT_EQ(q3.num_key_value_heads, 8);
  json q2 = base("qwen2", "Qwen2ForCausalLM");
  q2["num_attention_heads"] = 32;
  q2["hidden_size"] = 128;
  EXPECT_EQ(model_from_hf_config(q2).num_key_value_heads, 32);
  EXPECT_EQ(model_from_hf_config(q2).max_position_embeddings, 32768);
  // Our own export spells every one of them out: it reads back as the same model.
  for (const ModelConfig& x : {llama, m, q3}) EXPECT_TRUE(same_model(model_from_hf_config(model_to_hf_config(x)), x));
}

TEST(HfConfig, RefusalsNameTheSetting) {
  json mi = {{"architectures", {"MistralForCausalLM"}},
             {"model_type", "mistral"},
             {"hidden_size", 64},
             {"num_attention_heads", 4},
             {"sliding_window", 4096}};
  EXPECT_NE(error_of(mi).find("sliding_window=4096 is not supported"), std::string::npos) << error_of(mi);
  json q = qwen3_v4();
  q["use_sliding_window"] = true;
  EXPECT_NE(error_of(q).find("use_sliding_window"), std::string::npos);
  q = qwen3_v4();
  q["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(error_of(q).find("rope_type 'dynamic' is not supported"), std::string::npos) << error_of(q);
  q["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  EXPECT_NE(error_of(q).find("longrope"), std::string::npos);
  q["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_NE(error_of(q).find("needs low_freq_factor"), std::string::npos) << error_of(q);
  q["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 0.7}};
  EXPECT_NE(error_of(q).find("mscale"), std::string::npos);
  q["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"low_freq_factor", 1.0}};
  EXPECT_NE(error_of(q).find("low_freq_factor is not supported with rope_type linear"), std::string::npos)
      << error_of(q);
  q = qwen3_v4();
  q["architectures"] = {"GemmaForCausalLM"};
  EXPECT_NE(error_of(q).find("architecture GemmaForCausalLM is not supported"), std::string::npos) << error_of(q);
  q = qwen3_v4();
  q["model_type"] = "qwen2";
  EXPECT_NE(error_of(q).find("names Qwen3ForCausalLM but model_type is 'qwen2'"), std::string::npos) << error_of(q);
  json q2 = {{"architectures", {"Qwen2ForCausalLM"}},
             {"hidden_size", 64},
             {"num_attention_heads", 4},
             {"attention_bias", true}};
  EXPECT_NE(error_of(q2).find("always has q/k/v biases"), std::string::npos) << error_of(q2);
  json l = {{"architectures", {"LlamaForCausalLM"}},
            {"hidden_size", 64},
            {"num_attention_heads", 4},
            {"partial_rotary_factor", 0.5}};
  EXPECT_NE(error_of(l).find("partial_rotary_factor"), std::string::npos);
  l = {{"hidden_size", 64},
       {"num_attention_heads", 4},
       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
       {"rope_parameters", {{"rope_type", "linear"}, {"factor", 4.0}}}};
  EXPECT_NE(error_of(l).find("disagree"), std::string::npos) << error_of(l);
  // Transformers v4 reads rope_theta and rope_scaling (null: none), v5 rope_parameters: where
  // both layouts are given they must build one model (not read as v5 says, unsaid).
  l = {{"hidden_size", 64},
       {"num_attention_heads", 4},
       {"rope_theta", 10000.0},
       {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}};
  EXPECT_NE(error_of(l).find("rope_theta 10000.0 (Transformers v4's key) and rope_parameters' rope_theta 500000.0"),
            std::string::npos)
      << error_of(l);
  l = {{"hidden_size", 64},
       {"num_attention_heads", 4},
       {"rope_scaling", nullptr},
       {"rope_parameters",
        {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}, {"rope_theta", 10000.0}}}};
  EXPECT_NE(error_of(l).find("disagree"), std::string::npos) << error_of(l);
  l["rope_scaling"] = l["rope_parameters"];  // the same in both layouts: read
  EXPECT_EQ(error_of(l), "");
  l.erase("rope_scaling");  // v5 alone: read
  EXPECT_EQ(error_of(l), "");
  // torch_dtype / dtype: only what Transformers writes (5 or "int8" must not load).
  for (const json& dt : {json(5), json("int8"), json("torch.float16"), json("auto")}) {
    json d = {{"hidden_size", 64}, {"num_attention_heads", 4}, {"torch_dtype", dt}};
    EXPECT_NE(error_of(d).find("is not a dtype Transformers writes"), std::string::npos) << dt.dump();
  }
  EXPECT_EQ(error_of(json{{"hidden_size", 64}, {"num_attention_heads", 4}, {"dtype", "bfloat16"}}), "");
  // rms_norm_eps absent: Transformers' 1e-6 for these families, not the demo's 1e-5.
  EXPECT_DOUBLE_EQ(model_from_hf_config(json{{"hidden_size", 64}, {"num_attention_heads", 4}}).rms_norm_eps, 1e-6);
  // Run-config rules: an odd explicit head_dim, factor < 1.
  RunConfig rc;
  rc.model.explicit_head_dim = 9;
  rc.model.rope_type = "linear";
  rc.model.rope_factor = 0.5;
  std::string all;
  for (const auto& i : validate(rc)) all += i.message + "\n";
  EXPECT_NE(all.find("model.head_dim (9) must be even"), std::string::npos) << all;
  EXPECT_NE(all.find("model.rope_factor must be between 1"), std::string::npos) << all;
}

namespace {

void expect_bit_identical(LlamaModel& a, LlamaModel& b, torch::Dtype saved) {
  for (auto& [n, t] : a.named_parameters()) {
    auto want = t.detach().to(saved).to(torch::kFloat32);
    EXPECT_TRUE(torch::equal(b.param(n), want)) << n;
  }
}

}  // namespace

TEST(Checkpoint, FamiliesSingleAndShardedReloadBitIdentical) {
  for (const char* fam : {"llama", "mistral", "qwen2", "qwen3"}) {
    SCOPED_TRACE(fam);
    ModelConfig c;
    c.model_type = fam;
    c.vocab_size = 40;
    c.hidden_size = 24;
    c.intermediate_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.attention_bias = std::string(fam) == "llama";
    if (std::string(fam) == "qwen3") c.explicit_head_dim = 8;  // != 24 / 4
    c.rope_type = "llama3";
    c.rope_factor = 8;
    c.rope_original_max_position_embeddings = 512;
    LlamaModel src(c, ParallelConfig{}, torch::kFloat32, nullptr);
    src.init_parameters(5);
    {
      torch::NoGradGuard ng;
      for (auto& [n, t] : src.named_parameters())
        t.add_(torch::randn_like(t) * 0.1);  // biases and norms away from 0 / 1
    }
    auto ids = torch::randint(c.vocab_size, {1, 12}, torch::kInt64);
    torch::NoGradGuard ng;
    const auto logits = src.forward_logits(ids, 0);
    for (const auto& [dtype, shard] : std::vector<std::pair<torch::Dtype, int64_t>>{
             {torch::kFloat32, 0}, {torch::kFloat32, 4096}, {torch::kBFloat16, 3000}, {torch::kFloat16, 0}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " shard " + std::to_string(shard));
      const auto dir = temp_dir(fam);
      save_checkpoint(src, dir, dtype, shard);
      const bool sharded = shard > 0;
      EXPECT_EQ(fs::exists(dir + "/model.safetensors"), !sharded);
      EXPECT_EQ(fs::exists(dir + "/model.safetensors.index.json"), sharded);
      if (sharded) {
        auto index = load_json_file(dir + "/model.safetensors.index.json");
        std::set<std::string> files;
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it)
          files.insert(it.value().get<std::string>());
        EXPECT_GE(files.size(), 2u);
        EXPECT_TRUE(files.count("model-00001-of-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                                std::to_string(files.size()) + ".safetensors"));
        for (const auto& f : files) {
          // no shard beyond the limit unless it holds a single larger tensor
          auto part = read_safetensors(dir + "/" + f);
          int64_t bytes = 0;
          for (auto& [n, t] : part) bytes += t.numel() * t.element_size();
          EXPECT_TRUE(bytes <= shard || part.size() == 1) << f << " " << bytes;
        }
        EXPECT_EQ(index["weight_map"].size(), src.named_parameters().size());
      }
      // config.json in HF's layout gives back the model section
      auto hf = load_json_file(dir + "/config.json");
      EXPECT_EQ(hf["torch_dtype"], dtype == torch::kFloat32    ? "float32"
                                   : dtype == torch::kBFloat16 ? "bfloat16"
                                                               : "float16");
      ModelConfig back = model_from_hf_config(hf);
      EXPECT_TRUE(same_model(back, c)) << hf.dump();
      LlamaModel dst(back, ParallelConfig{}, torch::kFloat32, nullptr);
      load_checkpoint(dst, dir);
      expect_bit_identical(src, dst, dtype);
      if (dtype == torch::kFloat32) {
        EXPECT_TRUE(torch::equal(dst.forward_logits(ids, 0), logits));
      }
      // saving again into the same directory (the other layout) leaves no stale files behind
      save_checkpoint(dst, dir, dtype, sharded ? 0 : 4096);
      LlamaModel again(back, ParallelConfig{}, torch::kFloat32, nullptr);
      load_checkpoint(again, dir);
      expect_bit_identical(dst, again, dtype);
      EXPECT_EQ(fs::exists(dir + "/model.safetensors.index.json"), !sharded);
      fs::remove_all(dir);
    }
  }
}

TEST(Checkpoint, ShardedIndexRefusals) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  LlamaModel m(c, ParallelConfig{}, torch::kFloat32, nullptr);
  m.init_parameters(1);
  const auto dir = temp_dir("bad");
  save_checkpoint(m, dir, torch::kFloat32, 20000);
  auto index = load_json_file(dir + "/model.safetensors.index.json");
  auto expect_refused = [&](const json& idx, const std::string& what) {
    std::ofstream(dir + "/model.safetensors.index.json") << idx.dump();
    LlamaModel d(c, ParallelConfig{}, torch::kFloat32, nullptr);
    try {
      load_checkpoint(d, dir);
      ADD_FAILURE() << "expected a refusal mentioning " << what;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  json escape = index;
  escape["weight_map"]["model.norm.weight"] = "../../etc/passwd";
  expect_refused(escape, "must be a plain file name");
  // A NUL inside a shard's name cut it short at open(): the shard without the rest was read.
  json nul = index;
  nul["weight_map"]["model.norm.weight"] =
      nul["weight_map"]["model.norm.weight"].get<std::string>() + std::string(1, '\0') + "junk";
  expect_refused(nul, "must be a plain file name");
  json missing = index;
  missing["weight_map"].erase("model.norm.weight");
  expect_refused(missing,
                 "lacks tensors: model.norm.weight (model.safetensors.index.json's weight_map does not list them)");
  json wrong = index;
  const std::string other = index["weight_map"]["model.embed_tokens.weight"] == index["weight_map"]["lm_head.weight"]
                                ? "model-00009-of-00009.safetensors"
                                : index["weight_map"]["model.embed_tokens.weight"].get<std::string>();
  wrong["weight_map"]["lm_head.weight"] = other;
  expect_refused(wrong, "lm_head.weight");
  fs::remove_all(dir);
}

namespace {
// DIR/tokens.bin: 4096 uint16 ids i % 200, the last one `last` instead when given; the data
// config that reads it.
DataConfig write_u16_tokens(const std::string& dir, int last = -1) {
  fs::create_directories(dir);
  DataConfig d;
  d.kind = "tokens";
  d.path = dir + "/tokens.bin";
  d.token_dtype = "uint16";
  std::ofstream f(d.path, std::ios::binary);
  for (uint16_t i = 0; i < 4096; ++i) {
    const uint16_t v = i == 4095 && last >= 0 ? static_cast<uint16_t>(last) : i % 200;
    f.write(reinterpret_cast<const char*>(&v), 2);
  }
  return d;
}
}  // namespace

// A tokens file ulysses-run checked (kTokensCheckedEnv holds its identity then): a worker opening
// that same file skips its own read of it; any other identity (another vocab, the file touched
// since) and the worker checks the ids itself. The file holds id 300 past vocab_size 256, so a
// worker that checks refuses it, and one that skipped still refuses the batch that reads it.
TEST(Data, ATokensFileTheLauncherCheckedIsNotReadWholeAgain) {
  const auto dir = temp_dir("data-checked");
  const DataConfig d = write_u16_tokens(dir, 300);
  const std::string& path = d.path;
  ModelConfig m;
  m.vocab_size = 256;
  auto open_with = [&](const std::string& env) {
    ::setenv(kTokensCheckedEnv, env.c_str(), 1);
    auto src = TokenSource::open(d, m, 64, 1);
    ::unsetenv(kTokensCheckedEnv);
    return src;
  };
  const std::string id = tokens_file_identity(path, d, m.vocab_size);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(id, tokens_file_identity(path, d, m.vocab_size));
  EXPECT_NE(id, tokens_file_identity(path, d, 512));  // another vocab: another check
  const auto src = open_with(id);                     // skipped: id 300 not seen at open
  ASSERT_EQ(src->size(), 4096);
  int64_t v[2] = {0, 0};
  EXPECT_THROW(src->read(4094, 2, v), std::runtime_error);  // the batch that reads it still refuses it
  for (const std::string& other : {std::string(), std::string("x"), tokens_file_identity(path, d, 512)}) {
    try {
      open_with(other);
      ADD_FAILURE() << "opened without checking the ids, identity '" << other << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("whose largest token id is 300"), std::string::npos) << e.what();
    }
  }
  // Touched since the launcher's look (its change time moves): checked again.
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(1));
  EXPECT_THROW(open_with(id), ConfigError);
  fs::remove_all(dir);
}

// A data file shortened while a run reads it would kill the rank with SIGBUS if mapped, and
// one rewritten in place with ids past vocab_size would reach the embedding ("index out of range
// in self"). Each batch is read with pread and checked: a message naming the file.
TEST(Data, AFileChangedDuringTheRunIsNamed) {
  const auto dir = temp_dir("data");
  const DataConfig d = write_u16_tokens(dir);
  const std::string& path = d.path;
  ModelConfig m;
  m.vocab_size = 256;
  const auto src = TokenSource::open(d, m, 64, 1);
  ASSERT_EQ(src->size(), 4096);
  const Batch b = make_batch(*src, 64, 0, 0, 2, 1);
  EXPECT_EQ(b.ids.size(0), 2);
  EXPECT_TRUE(torch::equal(b.ids.index({0, torch::indexing::Slice(1, 64)}),
                           b.labels.index({0, torch::indexing::Slice(0, 63)})));
  {  // ids rewritten in place: 300 is not below vocab_size 256
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    for (int i = 0; i < 4096; ++i) {
      const uint16_t v = 300;
      f.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  auto expect_named = [&](int64_t step, const std::string& what) {
    try {
      make_batch(*src, 64, step, 0, 1, 1);
      ADD_FAILURE() << "read without a word: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_named(1, "changed during the run: token");
  fs::resize_file(path, 10);  // shortened: SIGBUS if it were mapped
  expect_named(2, "changed during the run: it now ends before token");
  fs::remove_all(dir);
}

// A checkpoint of more layers than the run's model loads its first layers (as Hugging Face's
// from_pretrained does) and checkpoint_unused names what was left unread, for the worker's note;
// the model's own checkpoint leaves nothing, nor does a tied model's extra lm_head.
TEST(Checkpoint, TensorsTheModelLacksAreNamed) {
  ModelConfig two;
  two.num_hidden_layers = 2;
  LlamaModel m(two, ParallelConfig{}, torch::kFloat32, nullptr);
  m.init_parameters(1);
  const auto dir = temp_dir("unused");
  save_checkpoint(m, dir, torch::kFloat32);
  EXPECT_TRUE(checkpoint_unused(checkpoint_tensors(dir), two).empty());
  ModelConfig one = two;
  one.num_hidden_layers = 1;
  const auto unused = checkpoint_unused(checkpoint_tensors(dir), one);
  ASSERT_EQ(unused.size(), 9u);  // layer 1: 4 attention + 3 MLP projections, 2 norms
  for (const auto& n : unused) EXPECT_EQ(n.rfind("model.layers.1.", 0), 0u) << n;
  LlamaModel small(one, ParallelConfig{}, torch::kFloat32, nullptr);
  EXPECT_EQ(load_checkpoint(small, dir), unused);  // what the worker's note names
  for (const char* n : {"model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_TRUE(torch::equal(small.param(n), m.param(n))) << n;
  ModelConfig tied = two;
  tied.tie_word_embeddings = true;  // the checkpoint's lm_head.weight is no stray tensor
  EXPECT_TRUE(checkpoint_unused(checkpoint_tensors(dir), tied).empty());
  fs::remove_all(dir);
}

// A save that fails part-way (here the file size limit, as a full disk would) leaves the
// earlier model in the folder whole and loadable, and no temp files: the earlier weights are not
// deleted before the new ones are written. A later save in the other layout leaves only it.
TEST(Checkpoint, AFailedSaveLeavesTheEarlierModel) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  LlamaModel old_model(c, ParallelConfig{}, torch::kFloat32, nullptr),
      new_model(c, ParallelConfig{}, torch::kFloat32, nullptr);
  old_model.init_parameters(1);
  new_model.init_parameters(2);
  const auto dir = temp_dir("failsave");
  fs::remove_all(dir);
  save_checkpoint(old_model, dir, torch::kFloat32, 0);
  const auto bytes = fs::file_size(dir + "/model.safetensors");
  {
    struct rlimit was {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &was), 0);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG
    struct rlimit small = was;
    small.rlim_cur = bytes / 2;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    EXPECT_THROW(save_checkpoint(new_model, dir, torch::kFloat32, 0), std::runtime_error);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &was), 0);
    std::signal(SIGXFSZ, old_handler);
  }
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"config.json", "model.safetensors"}));
  LlamaModel back(c, ParallelConfig{}, torch::kFloat32, nullptr);
  load_checkpoint(back, dir);
  expect_bit_identical(old_model, back, torch::kFloat32);
  save_checkpoint(new_model, dir, torch::kFloat32, 20000);  // sharded now: the single file goes
  left.clear();
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left.count("model.safetensors"), 0u);
  EXPECT_EQ(left.count("model.safetensors.index.json"), 1u);
  load_checkpoint(back, dir);
  expect_bit_identical(new_model, back, torch::kFloat32);
  fs::remove_all(dir);
}

// A save removes only the earlier weights of a Hugging Face layout: the single file, an index,
// shards named model-DDDDD-of-DDDDD.safetensors, not every model-*-of-*.safetensors (the
// user's model-best-of-run3.safetensors). A removal that fails is an error naming the file: an
// earlier model.safetensors left beside a new index would make the folder load the old weights
// (read first) under the new config.json, with exit 0.
TEST(Checkpoint, ASaveRemovesOnlyHuggingFaceWeightFilesAndSaysWhatItCannotRemove) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  LlamaModel old_model(c, ParallelConfig{}, torch::kFloat32, nullptr),
      new_model(c, ParallelConfig{}, torch::kFloat32, nullptr), back(c, ParallelConfig{}, torch::kFloat32, nullptr);
  old_model.init_parameters(1);
  new_model.init_parameters(2);
  const auto dir = temp_dir("stale");
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto names = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
  };
  for (const char* mine : {"model-best-of-run3.safetensors", "model-1-of-2.safetensors", "notes.txt"})
    std::ofstream(dir + "/" + mine) << "mine";
  std::ofstream(dir + "/model-00001-of-00007.safetensors") << "an earlier shard";
  // The staging folder of a save killed midway (its pid is gone) is removed; one of a live
  // process (ours, standing in for a save under way) is not.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  fs::create_directories(dir + "/.tmp-save-" + std::to_string(child) + "/x");
  const std::string live_stage = dir + "/.tmp-save-1";  // pid 1 lives
  fs::create_directories(live_stage);
  save_checkpoint(new_model, dir, torch::kFloat32, 0);
  EXPECT_FALSE(fs::exists(dir + "/.tmp-save-" + std::to_string(child)));
  EXPECT_TRUE(fs::exists(live_stage));
  fs::remove_all(live_stage);
  EXPECT_EQ(names(), (std::set<std::string>{"config.json", "model.safetensors", "model-best-of-run3.safetensors",
                                            "model-1-of-2.safetensors", "notes.txt"}));
  load_checkpoint(back, dir);
  expect_bit_identical(new_model, back, torch::kFloat32);

  // The earlier single file cannot be removed (a folder of that name stands in for any failing
  // unlink): the sharded save stops before its index comes in, keeping it in the staging folder.
  fs::remove(dir + "/model.safetensors");
  fs::create_directories(dir + "/model.safetensors/x");
  try {
    save_checkpoint(old_model, dir, torch::kFloat32, 20000);
    ADD_FAILURE() << "the save did not throw";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot remove the earlier " + dir + "/model.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find("kept in " + dir + "/.tmp-save-"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  bool staged_index = false;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".tmp-save-", 0) == 0) {
      staged_index |= fs::exists(e.path() / "model.safetensors.index.json");
      fs::remove_all(e.path());
    }
  EXPECT_TRUE(staged_index);
  fs::remove_all(dir + "/model.safetensors");

  // An earlier shard that cannot be removed after a single-file save: the model is saved (and
  // loads, model.safetensors first), and the error names the shard left.
  fs::create_directories(dir + "/model-00002-of-00003.safetensors/x");
  try {
    save_checkpoint(old_model, dir, torch::kFloat32, 0);
    ADD_FAILURE() << "the save did not throw";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(
        what.find("saved the model to " + dir + ", but cannot remove the earlier model-00002-of-00003.safetensors"),
        std::string::npos)
        << what;
  }
  load_checkpoint(back, dir);
  expect_bit_identical(old_model, back, torch::kFloat32);
  EXPECT_EQ(names().count("model-best-of-run3.safetensors"), 1u);
  fs::remove_all(dir);
}

// Weights that are no numbers are refused at load, naming the tensor and the file: a NaN in an
// embedding row the data never uses would train with exit 0 and be saved back; elsewhere it
// would be a NaN loss after launch.
TEST(Checkpoint, NanOrInfiniteWeightsAreRefusedAtLoad) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  LlamaModel m(c, ParallelConfig{}, torch::kFloat32, nullptr), back(c, ParallelConfig{}, torch::kFloat32, nullptr);
  m.init_parameters(1);
  const auto dir = temp_dir("nan");
  fs::remove_all(dir);
  for (const double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    save_checkpoint(m, dir, torch::kBFloat16, 0);
    auto ts = read_safetensors(dir + "/model.safetensors");
    ts.at("model.embed_tokens.weight")[c.vocab_size - 1][3] = bad;
    std::vector<std::pair<std::string, at::Tensor>> out(ts.begin(), ts.end());
    write_safetensors(dir + "/model.safetensors", out);
    try {
      load_checkpoint(back, dir);
      ADD_FAILURE() << "loaded a checkpoint holding " << bad;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tensor model.embed_tokens.weight (in " + dir +
                          "/model.safetensors) holds 1 value(s) that "
                          "are NaN or infinite"),
                std::string::npos)
          << what;
    }
    fs::remove_all(dir);
  }
}

// A tied model's checkpoint holding an lm_head.weight of another shape than the embedding it is
// tied to: damaged or mislabelled, refused naming both shapes (not dropped unsaid). One of
// the same shape is a copy some tied checkpoints store, and loads.
TEST(Checkpoint, ATiedHeadOfAnotherShapeIsRefused) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  c.tie_word_embeddings = true;
  LlamaModel m(c, ParallelConfig{}, torch::kFloat32, nullptr), back(c, ParallelConfig{}, torch::kFloat32, nullptr);
  m.init_parameters(1);
  const auto dir = temp_dir("tiedhead");
  fs::remove_all(dir);
  save_checkpoint(m, dir, torch::kFloat32, 0);
  auto ts = read_safetensors(dir + "/model.safetensors");
  ASSERT_EQ(ts.count("lm_head.weight"), 0u);
  const at::Tensor emb = ts.at("model.embed_tokens.weight");
  ts["lm_head.weight"] = emb.clone();
  write_safetensors(dir + "/model.safetensors", {ts.begin(), ts.end()});
  load_checkpoint(back, dir);
  expect_bit_identical(m, back, torch::kFloat32);
  ts["lm_head.weight"] = torch::zeros({1, 8});
  write_safetensors(dir + "/model.safetensors", {ts.begin(), ts.end()});
  try {
    load_checkpoint(back, dir);
    ADD_FAILURE() << "a tied head of shape [1, 8] loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight has shape [1, 8] but config.json ties it to "
                                         "model.embed_tokens.weight"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Ulysses, Qwen3StyleSp2MatchesOneProcess) {
  // explicit head_dim (16 != 32/4), per-head q/k RMSNorm applied on the sequence shard
  // before the all-to-all, GQA, q/k/v/o biases, yarn: sp 2 equals one process.
  RunConfig c;
  c.model.model_type = "qwen3";
  c.model.vocab_size = 64;
  c.model.hidden_size = 32;
  c.model.explicit_head_dim = 16;
  c.model.attention_bias = true;
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 2;
  c.model.rope_type = "yarn";
  c.model.rope_factor = 4;
  c.model.max_position_embeddings = 1024;
  c.model.rope_original_max_position_embeddings = 256;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;
  c.train.steps = 4;
  c.train.lr = 1e-2;
  c.train.warmup_steps = 1;
  c.train.min_lr = 1e-3;
  c.profile.enabled = false;
  ASSERT_TRUE(validate(c).empty());
  auto ref = ulysses::testing::train_on_ranks(c, 4);
  auto sp2 = c;
  sp2.parallel.sp_size = 2;
  auto got = ulysses::testing::train_on_ranks(sp2, 4);
  EXPECT_NEAR(got.loss0, ref.loss0, 1e-5 * std::abs(ref.loss0));
  for (const auto& [n, g] : ref.grads0) {
    ASSERT_TRUE(got.grads0.count(n)) << n;
    EXPECT_LT((got.grads0.at(n) - g).abs().max().item<double>(), 1e-4) << n;
  }
  EXPECT_TRUE(ref.grads0.count("model.layers.1.self_attn.k_norm.weight"));
  EXPECT_GT(ref.grads0.at("model.layers.1.self_attn.k_norm.weight").abs().max().item<double>(), 0);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << s;
}
