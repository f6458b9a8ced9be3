// Tests of `ulysses-run CONFIG --export accelerate|deepspeed DIR` (docs/CONTRACTS.md): the
// exported JSON files hold the expected values key by key (written out by hand here), the
// model config.json reads back to the same model, TrainingArguments keys are real field
// names, every config key is accounted for in README.txt, and bad input exits 2.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "export_python.hpp"
#include "run_config.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using ulysses::test::slurp;  // tests/common/e2e_util.hpp

class ExportDir {
 public:
  ExportDir() {
    std::string tmpl = (fs::temp_directory_path() / "ulysses_export_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~ExportDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    if (!::testing::Test::HasFailure()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct CliResult {
  int code = -1;
  std::string err;
};

// Runs ulysses-run with args in cwd (stderr captured); killed after 30 s.
CliResult run_cli(const std::vector<std::string>& args, const fs::path& cwd) {
  const fs::path err_path = cwd / ".cli.stderr";
  std::vector<std::string> argv_s{ULYSSES_RUN_EXE};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  CliResult r;
  if (rc != 0) return r;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      ADD_FAILURE() << "ulysses-run --export did not finish within 30 s";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = slurp(err_path);
  fs::remove(err_path);
  return r;
}

// A Hugging Face config.json written by hand: Llama with yarn RoPE, attention biases and
// an explicit head_dim that differs from hidden_size / heads.
json hf_llama_yarn() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 300, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "attention_bias": true,
    "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "max_position_embeddings": 4096,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                     "beta_fast": 16.0, "beta_slow": 2.0},
    "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
}

// Every train key set to a value other than its default (init_from: a folder with the
// hand-written config.json above), plus parallel keys that have no equivalent.
json full_config() {
  return json::parse(R"({
    "name": "export-full",
    "parallel": {"sp_size": 2, "dp_size": 2, "backend": "auto", "head_chunks": 2, "fused_qkv": true, "timeout_s": 90.5},
    "train": {"seq_length": 128, "micro_batch_size": 2, "steps": 7, "lr": 0.002, "warmup_steps": 3, "min_lr": 0.0001,
              "weight_decay": 0.05, "grad_clip": 0.5, "gradient_accumulation_steps": 4, "adam_beta1": 0.85,
              "adam_beta2": 0.98, "adam_epsilon": 1e-7, "lr_scheduler_type": "cosine_with_min_lr", "seed": 99,
              "dtype": "bfloat16", "init_from": "ckpt", "save_to": "trained", "save_every": 2, "save_keep": 3,
              "resume_from": "prev", "save_shard_bytes": 1000000, "device": "cuda", "threads_per_rank": 2,
              "activation_checkpointing": "layer", "offload_activations": true, "loss_chunk_tokens": 32,
              "mlp_chunk_tokens": 32, "attention": "blocked", "attention_block": 64},
    "data": {"kind": "tokens", "path": "train.bin", "token_dtype": "uint32"}})");
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream out(p);
  out << s;
}

json read_export_json(const fs::path& p) { return json::parse(slurp(p)); }

// Field names of transformers' TrainingArguments (src/transformers/training_args.py, v5),
// copied by hand: the export may only use names from this list.
const std::set<std::string>& training_arguments_fields() {
  static const std::set<std::string> s = {"output_dir",
                                          "per_device_train_batch_size",
                                          "num_train_epochs",
                                          "max_steps",
                                          "learning_rate",
                                          "lr_scheduler_type",
                                          "lr_scheduler_kwargs",
                                          "warmup_steps",
                                          "optim",
                                          "optim_args",
                                          "weight_decay",
                                          "adam_beta1",
                                          "adam_beta2",
                                          "adam_epsilon",
                                          "gradient_accumulation_steps",
                                          "average_tokens_across_devices",
                                          "max_grad_norm",
                                          "label_smoothing_factor",
                                          "bf16",
                                          "fp16",
                                          "tf32",
                                          "gradient_checkpointing",
                                          "gradient_checkpointing_kwargs",
                                          "torch_compile",
                                          "use_liger_kernel",
                                          "logging_strategy",
                                          "logging_steps",
                                          "logging_first_step",
                                          "report_to",
                                          "run_name",
                                          "save_strategy",
                                          "save_steps",
                                          "save_total_limit",
                                          "save_only_model",
                                          "seed",
                                          "data_seed",
                                          "use_cpu",
                                          "parallelism_config",
                                          "dataloader_drop_last",
                                          "ddp_backend",
                                          "ddp_timeout",
                                          "deepspeed",
                                          "resume_from_checkpoint"};
  return s;
}

std::string model_json(const ulysses::ModelConfig& m) {
  ulysses::RunConfig c;
  c.model = m;
  return c.to_json()["model"].dump();
}

// The "Differences" part of README.txt.
std::string differences_of(const std::string& readme) {
  const auto at = readme.find("\nDifferences");
  return at == std::string::npos ? std::string() : readme.substr(at);
}

TEST(Export, AccelerateFilesHoldEveryTrainKey) {
  ExportDir tmp;
  fs::create_directories(tmp.path() / "ckpt");
  write(tmp.path() / "ckpt" / "config.json", hf_llama_yarn().dump());
  write(tmp.path() / "full.json", full_config().dump());
  const CliResult r = run_cli({"full.json", "--export", "accelerate", "out"}, tmp.path());
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path out = tmp.path() / "out";

  const json a = read_export_json(out / "training_args.json");
  const json want = json::parse(R"({
    "output_dir": "trained", "run_name": "export-full", "max_steps": 7, "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 4, "learning_rate": 0.002, "lr_scheduler_type": "cosine_with_min_lr",
    "lr_scheduler_kwargs": {"min_lr": 0.0001}, "warmup_steps": 3, "optim": "adamw_torch",
    "adam_beta1": 0.85, "adam_beta2": 0.98, "adam_epsilon": 1e-7, "weight_decay": 0.05, "max_grad_norm": 0.5,
    "average_tokens_across_devices": true, "bf16": true, "fp16": false, "gradient_checkpointing": true,
    "seed": 99, "save_strategy": "steps", "save_steps": 2, "save_total_limit": 3, "logging_steps": 1,
    "logging_first_step": true, "report_to": "none", "dataloader_drop_last": true, "ddp_timeout": 91,
    "deepspeed": "ds_config.json"})");
  for (auto it = want.begin(); it != want.end(); ++it) {
    ASSERT_TRUE(a.contains(it.key())) << "training_args.json lacks " << it.key();
    EXPECT_EQ(a[it.key()], it.value()) << it.key();
  }
  EXPECT_EQ(a.size(), want.size()) << a.dump(2);
  // Numbers stay numbers of the right kind (TrainingArguments reads an int warmup as steps).
  EXPECT_TRUE(a["warmup_steps"].is_number_integer());
  EXPECT_TRUE(a["max_steps"].is_number_integer());

  const json pc = read_export_json(out / "parallelism_config.json");
  EXPECT_EQ(pc["sp_backend"], "deepspeed");
  EXPECT_EQ(pc["sp_size"], 2);
  EXPECT_EQ(pc["dp_replicate_size"], 2);
  EXPECT_EQ(pc["dp_shard_size"], 1);
  EXPECT_EQ(pc["sp_handler"]["sp_seq_length"], 128);
  EXPECT_EQ(pc["sp_handler"]["sp_seq_length_is_variable"], true);
  EXPECT_EQ(pc["sp_handler"]["sp_attn_implementation"], "sdpa");

  const json ds = read_export_json(out / "ds_config.json");
  EXPECT_EQ(ds, json::parse(R"({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"}})"));

  // Model: our HF loader reads the exported config.json back to the model of the
  // hand-written checkpoint config.
  const ulysses::ModelConfig back =
      ulysses::model_from_hf_config(ulysses::load_json_file((out / "config.json").string()));
  const ulysses::ModelConfig orig = ulysses::model_from_hf_config(hf_llama_yarn());
  EXPECT_EQ(model_json(back), model_json(orig));
  EXPECT_EQ(back.explicit_head_dim, 32);
  EXPECT_EQ(back.rope_type, "yarn");
  EXPECT_EQ(read_export_json(out / "config.json")["torch_dtype"], "bfloat16");

  const std::string launch = slurp(out / "launch.sh");
  EXPECT_NE(launch.find("accelerate launch --num_processes 4 "), std::string::npos) << launch;
  EXPECT_TRUE((fs::status(out / "launch.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  EXPECT_EQ(std::system(("sh -n " + (out / "launch.sh").string()).c_str()), 0) << "launch.sh is not valid sh";

  // Nothing without an equivalent is silently dropped.
  const std::string readme = slurp(out / "README.txt");
  const std::string diffs = differences_of(readme);
  ASSERT_FALSE(diffs.empty()) << readme;
  for (const char* k :
       {"parallel.head_chunks", "parallel.fused_qkv", "train.offload_activations", "train.loss_chunk_tokens",
        "train.mlp_chunk_tokens", "train.attention ", "train.save_shard_bytes", "train.threads_per_rank",
        "train.save_every", "train.dtype", "train.seq_length", "train.resume_from", "cosine_with_min_lr", "data.kind"})
    EXPECT_NE(diffs.find(k), std::string::npos) << k << " is not listed among the differences:\n" << diffs;
  EXPECT_NE(readme.find("accelerate launch --num_processes 4"), std::string::npos);
  EXPECT_NE(readme.find("\"ckpt\""), std::string::npos) << "init_from must appear in the snippet";
}

TEST(Export, TrainingArgumentsKeysAreRealFieldNames) {
  ExportDir tmp;
  fs::create_directories(tmp.path() / "ckpt");
  write(tmp.path() / "ckpt" / "config.json", hf_llama_yarn().dump());
  write(tmp.path() / "full.json", full_config().dump());
  ASSERT_EQ(run_cli({"full.json", "--export", "accelerate", "a"}, tmp.path()).code, 0);
  ASSERT_EQ(run_cli({"full.json", "--set", "train.save_every=0", "--set", "train.lr_scheduler_type=linear", "--export",
                     "accelerate", "b"},
                    tmp.path())
                .code,
            0);
  for (const char* d : {"a", "b"}) {
    const json a = read_export_json(tmp.path() / d / "training_args.json");
    for (auto it = a.begin(); it != a.end(); ++it)
      EXPECT_TRUE(training_arguments_fields().count(it.key())) << it.key() << " is not a TrainingArguments field";
    const json pc = read_export_json(tmp.path() / d / "parallelism_config.json");
    const std::set<std::string> pc_fields = {"dp_replicate_size", "dp_shard_size", "tp_size",    "cp_size",
                                             "cp_backend",        "sp_size",       "sp_backend", "sp_handler",
                                             "tp_handler",        "cp_handler"};
    for (auto it = pc.begin(); it != pc.end(); ++it) EXPECT_TRUE(pc_fields.count(it.key())) << it.key();
    for (auto it = pc["sp_handler"].begin(); it != pc["sp_handler"].end(); ++it)
      EXPECT_TRUE((std::set<std::string>{"sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation"}.count(
          it.key())))
          << it.key();
  }
  // linear takes no scheduler kwargs; save off is save_strategy "no" and no save_steps.
  const json b = read_export_json(tmp.path() / "b" / "training_args.json");
  EXPECT_EQ(b["lr_scheduler_type"], "linear");
  EXPECT_FALSE(b.contains("lr_scheduler_kwargs"));
  EXPECT_EQ(b["save_strategy"], "no");
  EXPECT_FALSE(b.contains("save_steps"));
}

TEST(Export, DeepSpeedConfigHoldsEveryValue) {
  ExportDir tmp;
  // Qwen3 (q/k norm, explicit head_dim) in the run config's own model section.
  const json cfg = json::parse(R"({
    "model": {"model_type": "qwen3", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "rope_theta": 1000000.0,
              "tie_word_embeddings": true, "rms_norm_eps": 1e-6},
    "parallel": {"sp_size": 2, "dp_size": 2},
    "train": {"seq_length": 64, "micro_batch_size": 3, "steps": 11, "learning_rate": 0.0005, "warmup_steps": 0,
              "weight_decay": 0.01, "max_grad_norm": 2.0, "gradient_accumulation_steps": 2, "adam_beta1": 0.8,
              "adam_beta2": 0.95, "adam_epsilon": 1e-6, "lr_scheduler_type": "linear", "seed": 5, "dtype": "float32"},
    "data": {"kind": "synthetic"}})");
  write(tmp.path() / "ds.json", cfg.dump());
  const CliResult r = run_cli({"ds.json", "--export", "deepspeed", "out"}, tmp.path());
  ASSERT_EQ(r.code, 0) << r.err;
  const json ds = read_export_json(tmp.path() / "out" / "ds_config.json");
  const json want = json::parse(R"({
    "zero_optimization": {"stage": 2},
    "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2, "train_batch_size": 12,
    "sequence_parallel_size": 2, "gradient_clipping": 2.0, "steps_per_print": 1,
    "bf16": {"enabled": false}, "fp16": {"enabled": false},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0005, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 11, "warmup_min_lr": 0.0, "warmup_max_lr": 0.0005,
                  "warmup_num_steps": 1, "warmup_type": "linear"}}})");
  for (auto it = want.begin(); it != want.end(); ++it) {
    ASSERT_TRUE(ds.contains(it.key())) << "ds_config.json lacks " << it.key();
    EXPECT_EQ(ds[it.key()], it.value()) << it.key();
  }
  EXPECT_EQ(ds.size(), want.size()) << ds.dump(2);
  const json reg = read_export_json(tmp.path() / "out" / "ulysses_sp.json");
  EXPECT_EQ(reg, json::parse(R"({"core_attn_implementation": "sdpa", "sequence_parallel_size": 2, "micro_batch_size": 3,
                                  "seq_length": 64, "seq_length_is_variable": true})"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "training_args.json"));

  ulysses::ModelConfig expect;  // the model section above, field by field
  expect.model_type = "qwen3";
  expect.vocab_size = 320;
  expect.hidden_size = 64;
  expect.intermediate_size = 128;
  expect.num_hidden_layers = 3;
  expect.num_attention_heads = 4;
  expect.num_key_value_heads = 2;
  expect.explicit_head_dim = 24;
  expect.rope_theta = 1e6;
  expect.tie_word_embeddings = true;
  expect.rms_norm_eps = 1e-6;
  const json hf = read_export_json(tmp.path() / "out" / "config.json");
  EXPECT_EQ(hf["architectures"], json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(model_json(ulysses::model_from_hf_config(hf)), model_json(expect));

  const std::string launch = slurp(tmp.path() / "out" / "launch.sh");
  EXPECT_NE(launch.find("deepspeed --num_gpus 4 "), std::string::npos) << launch;
  EXPECT_NE(launch.find("--deepspeed_config"), std::string::npos) << launch;
  EXPECT_EQ(std::system(("sh -n " + (tmp.path() / "out" / "launch.sh").string()).c_str()), 0)
      << "launch.sh is not valid sh";
  // Warmup under 2 steps and the scheduler's one-step lag are named.
  const std::string diffs = differences_of(slurp(tmp.path() / "out" / "README.txt"));
  EXPECT_NE(diffs.find("train.warmup_steps"), std::string::npos) << diffs;
  EXPECT_NE(diffs.find("WarmupDecayLR"), std::string::npos) << diffs;
  EXPECT_NE(diffs.find("train.weight_decay"), std::string::npos) << diffs;

  // The other two schedule families.
  ASSERT_EQ(run_cli({"ds.json", "--set", "train.lr_scheduler_type=cosine_with_min_lr", "--set", "train.min_lr=0.0001",
                     "--set", "train.warmup_steps=4", "--export", "deepspeed", "cos"},
                    tmp.path())
                .code,
            0);
  EXPECT_EQ(read_export_json(tmp.path() / "cos" / "ds_config.json")["scheduler"],
            json::parse(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 11, "warmup_min_ratio": 0.0,
                            "warmup_num_steps": 4, "cos_min_ratio": 0.2, "warmup_type": "linear"}})"));
  ASSERT_EQ(run_cli({"ds.json", "--set", "train.lr_scheduler_type=constant_with_warmup", "--set",
                     "train.warmup_steps=5", "--set", "train.dtype=bfloat16", "--export", "deepspeed", "const"},
                    tmp.path())
                .code,
            0);
  const json c = read_export_json(tmp.path() / "const" / "ds_config.json");
  EXPECT_EQ(c["scheduler"],
            json::parse(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.0005,
                                            "warmup_num_steps": 5, "warmup_type": "linear"}})"));
  EXPECT_EQ(c["bf16"]["enabled"], true);
}

TEST(Export, ReadmeAccountsForEveryConfigKey) {
  // A key added to the run config later must appear in README.txt's mapping (or the test fails).
  ExportDir tmp;
  write(tmp.path() / "c.json", R"({"data": {"kind": "synthetic"}})");
  for (const char* target : {"accelerate", "deepspeed"}) {
    ASSERT_EQ(run_cli({"c.json", "--export", target, target}, tmp.path()).code, 0) << target;
    const std::string readme = slurp(tmp.path() / target / "README.txt");
    const json all = ulysses::RunConfig{}.to_json();
    for (auto sec = all.begin(); sec != all.end(); ++sec) {
      if (!sec.value().is_object()) continue;
      if (sec.key() == "model") {
        EXPECT_NE(readme.find("model.* -> config.json"), std::string::npos);
        continue;
      }
      for (auto k = sec.value().begin(); k != sec.value().end(); ++k)
        EXPECT_NE(readme.find("  " + sec.key() + "." + k.key() + " "), std::string::npos)
            << target << ": README.txt does not account for " << sec.key() << "." << k.key();
    }
  }
}

TEST(Export, BadInputExitsTwoAndTrainsNothing) {
  ExportDir tmp;
  write(tmp.path() / "c.json", R"({"data": {"kind": "synthetic"}, "parallel": {"sp_size": 2}})");
  // Unknown target, missing DIR, combined with --plan / --out.
  CliResult r = run_cli({"c.json", "--export", "megatron", "d"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown target 'megatron'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "d"));
  EXPECT_EQ(run_cli({"c.json", "--export", "accelerate"}, tmp.path()).code, 2);
  EXPECT_EQ(run_cli({"c.json", "--plan", "--export", "accelerate", "d"}, tmp.path()).code, 2);
  EXPECT_EQ(run_cli({"c.json", "--out", "o", "--export", "accelerate", "d"}, tmp.path()).code, 2);
  EXPECT_FALSE(fs::exists(tmp.path() / "d"));

  // An invalid config is refused by the validation first: nothing is written.
  write(tmp.path() / "bad.json", R"({"data": {"kind": "synthetic"}, "parallel": {"sp_size": 8}})");
  r = run_cli({"bad.json", "--export", "deepspeed", "d"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("num_attention_heads"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "d"));

  // DIR is a file.
  write(tmp.path() / "afile", "x");
  r = run_cli({"c.json", "--export", "accelerate", "afile"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;

  // DIR exists and is not empty: refused; with --force the export's files are (over)written
  // and the other file is left alone.
  fs::create_directories(tmp.path() / "full");
  write(tmp.path() / "full" / "mine.txt", "keep");
  r = run_cli({"c.json", "--export", "accelerate", "full"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "full" / "training_args.json"));
  EXPECT_EQ(run_cli({"c.json", "--export", "accelerate", "full", "--force"}, tmp.path()).code, 0);
  EXPECT_TRUE(fs::exists(tmp.path() / "full" / "training_args.json"));
  EXPECT_EQ(slurp(tmp.path() / "full" / "mine.txt"), "keep");

  // --force replaces an earlier export, never the config being exported, a run directory's
  // records or a checkpoint's files (the export's config.json would replace each).
  fs::create_directories(tmp.path() / "self");
  write(tmp.path() / "self" / "config.json", R"({"data": {"kind": "synthetic"}, "parallel": {"sp_size": 2}})");
  const std::string self_before = slurp(tmp.path() / "self" / "config.json");
  r = run_cli({"self/config.json", "--export", "accelerate", "self", "--force"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is the config being exported"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(tmp.path() / "self" / "config.json"), self_before);
  for (const char* kept : {"run.json", "complete", "state.json", "model.safetensors",
                           "model-00001-of-00002.safetensors", "pytorch_model.bin"}) {
    const fs::path d = tmp.path() / (std::string("held-") + kept);
    fs::create_directories(d);
    write(d / kept, "theirs");
    write(d / "config.json", "theirs");
    r = run_cli({"c.json", "--export", "deepspeed", d.filename().string(), "--force"}, tmp.path());
    EXPECT_EQ(r.code, 2) << kept;
    EXPECT_NE(r.err.find(std::string("holds ") + kept), std::string::npos) << r.err;
    EXPECT_EQ(slurp(d / "config.json"), "theirs") << kept;
  }

  // A seed Hugging Face's set_seed cannot take (numpy: 0..2^32-1) for the accelerate target;
  // DeepSpeed's takes any.
  for (const char* seed : {"-1", "4294967296"}) {
    r = run_cli({"c.json", "--set", std::string("train.seed=") + seed, "--export", "accelerate", "seeded"}, tmp.path());
    EXPECT_EQ(r.code, 2) << seed;
    EXPECT_NE(r.err.find("outside Hugging Face's seeds"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp.path() / "seeded"));
  }
  EXPECT_EQ(run_cli({"c.json", "--set", "train.seed=4294967295", "--export", "accelerate", "seeded"}, tmp.path()).code,
            0);

  // A newline in the config's path is no command of launch.sh: the path is quoted as a JSON
  // string in its comment (else the line after the newline runs).
  const std::string evil = "evil\ntouch PWNED\n#.json";
  write(tmp.path() / evil, R"({"data": {"kind": "synthetic"}, "parallel": {"sp_size": 2}})");
  ASSERT_EQ(run_cli({evil, "--export", "deepspeed", "nl"}, tmp.path()).code, 0);
  const std::string sh = slurp(tmp.path() / "nl" / "launch.sh");
  EXPECT_EQ(sh.find("\ntouch PWNED"), std::string::npos) << sh;
  EXPECT_NE(sh.find("evil\\ntouch PWNED"), std::string::npos) << sh;
  EXPECT_EQ(slurp(tmp.path() / "nl" / "README.txt").find("\ntouch PWNED"), std::string::npos);

  // DIR cannot be created (not even root makes directories in /proc).
  r = run_cli({"c.json", "--export", "deepspeed", "/proc/self/ulysses-export"}, tmp.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--export"), std::string::npos) << r.err;
  // DIR inside a read-only directory (only meaningful without root's override).
  fs::create_directories(tmp.path() / "ro");
  fs::permissions(tmp.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  if (::access((tmp.path() / "ro").c_str(), W_OK) != 0) {
    r = run_cli({"c.json", "--export", "deepspeed", "ro/x"}, tmp.path());
    EXPECT_EQ(r.code, 2) << r.err;
  }
  fs::permissions(tmp.path() / "ro", fs::perms::owner_all);

  // Nothing is trained: a worker that does not exist is never needed, no run directory appears.
  r = run_cli({"c.json", "--worker", "/nonexistent/ulysses-worker", "--export", "deepspeed", "ok"}, tmp.path());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("nothing was trained"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "runs"));
  for (const char* f : {"config.json", "ds_config.json", "ulysses_sp.json", "README.txt", "launch.sh"})
    EXPECT_TRUE(fs::exists(tmp.path() / "ok" / f)) << f;
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(tmp.path() / "ok"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace

// Under a file-size limit (ulimit -f), SIGXFSZ would kill --export (exit 153, no message) and
// leave its temp file. Instead: exit 1, the file and the limit named, no temp file.
TEST(Export, FileSizeLimitIsNamedAndLeavesNoTempFile) {
  ExportDir tmp;
  write(tmp.path() / "c.json", R"({"data": {"kind": "synthetic"}, "parallel": {"sp_size": 2}})");
  // 4 blocks (2 or 4 KiB): README.txt is larger.
  const auto r =
      ulysses::test::sh(std::string("ulimit -f 4 && exec ") + ULYSSES_RUN_EXE + " c.json --export accelerate d 2>&1",
                        tmp.path().string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("README.txt failed: it reached the file-size limit of this process (ulimit -f: "),
            std::string::npos)
      << r.out;
  for (const auto& e : fs::directory_iterator(tmp.path() / "d"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// train.zero_stage maps one to one onto ds_config.json's zero_optimization.stage (0, our
// replicated default, exports 2), the offloads onto offload_optimizer / offload_param (docs/ZERO.md).
TEST(Export, ZeroStagesAndOffloadsMapOntoDeepSpeed) {
  using ulysses::launch::ExportTarget;
  ulysses::RunConfig c;
  for (int64_t z : {0, 1, 2, 3}) {
    c.train.zero_stage = z;
    const json ds = ulysses::launch::deepspeed_config_json(c, ExportTarget::DeepSpeed);
    EXPECT_EQ(ds["zero_optimization"]["stage"], z == 0 ? 2 : z) << z;
    EXPECT_FALSE(ds["zero_optimization"].contains("offload_optimizer"));
  }
  c.train.offload_optimizer = c.train.offload_params = true;
  for (auto target : {ExportTarget::DeepSpeed, ExportTarget::Accelerate}) {
    const json ds = ulysses::launch::deepspeed_config_json(c, target);
    EXPECT_EQ(ds["zero_optimization"], json::parse(R"({"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}, "offload_param": {"device": "cpu", "pin_memory": true}})"));
  }
  int rows = 0;
  for (const auto& m : ulysses::launch::export_mappings(c, ExportTarget::DeepSpeed))
    if (m.ours == "train.zero_stage" || m.ours == "train.offload_optimizer" || m.ours == "train.offload_params") {
      ++rows;
      EXPECT_NE(m.theirs.find("zero_optimization"), std::string::npos) << m.ours << ": " << m.theirs;
    }
  EXPECT_EQ(rows, 3);
  // bf16 training: train.grad_accum_dtype -> data_types.grad_accum_dtype, train.grad_reduce_dtype
  // -> communication_data_type (stage 3 with bf16 layer gradients; fp32 otherwise); none in fp32.
  EXPECT_FALSE(ulysses::launch::deepspeed_config_json(c, ExportTarget::DeepSpeed).contains("communication_data_type"));
  c.train.dtype = "bfloat16";
  for (auto target : {ExportTarget::DeepSpeed, ExportTarget::Accelerate}) {
    c.train.grad_reduce_dtype = "float32";
    json ds = ulysses::launch::deepspeed_config_json(c, target);
    EXPECT_EQ(ds["data_types"]["grad_accum_dtype"], "bf16");
    EXPECT_EQ(ds["communication_data_type"], "fp32");
    c.train.grad_reduce_dtype = "bfloat16";
    EXPECT_EQ(ulysses::launch::deepspeed_config_json(c, target)["communication_data_type"], "bf16");
    c.train.grad_accum_dtype = "float32";
    c.train.grad_reduce_dtype = "float32";
    ds = ulysses::launch::deepspeed_config_json(c, target);
    EXPECT_EQ(ds["data_types"]["grad_accum_dtype"], "fp32");
    EXPECT_EQ(ds["communication_data_type"], "fp32");
    c.train.grad_accum_dtype = "auto";
  }
  rows = 0;
  for (const auto& m : ulysses::launch::export_mappings(c, ExportTarget::DeepSpeed))
    rows += (m.ours == "train.grad_accum_dtype" && m.theirs.find("data_types.grad_accum_dtype") != std::string::npos) +
            (m.ours == "train.grad_reduce_dtype" && m.theirs.find("communication_data_type") != std::string::npos);
  EXPECT_EQ(rows, 2);
  c.train.zero_stage = 2;  // below stage 3 neither is a setting of ours: DeepSpeed's defaults stay
  EXPECT_FALSE(ulysses::launch::deepspeed_config_json(c, ExportTarget::DeepSpeed).contains("data_types"));
  EXPECT_FALSE(ulysses::launch::deepspeed_config_json(c, ExportTarget::DeepSpeed).contains("communication_data_type"));
}
