// Run configuration: the JSON a user writes (model / parallel / train / data / profile),
// its parsing with unknown-key errors, dotted --set overrides, Hugging Face config.json
// import/export and the validation rules shared by the launcher, the worker and the studio.
// Torch-free and Qt-free.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses {

using json = nlohmann::json;

// Bad input from the user. Programs turn it into a message and exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Hugging Face LlamaConfig keys, same names and meaning.
struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 176;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 4;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  // Family, as Hugging Face's model_type: llama | mistral | qwen2 | qwen3 (docs/CONTRACTS.md).
  //   llama:   LlamaForCausalLM, q/k/v/o biases when attention_bias
  //   mistral: MistralForCausalLM, no biases, no sliding window
  //   qwen2:   Qwen2ForCausalLM, q/k/v biases always, no o bias
  //   qwen3:   Qwen3ForCausalLM, per-head RMSNorm on q and k before RoPE, q/k/v/o biases when attention_bias
  std::string model_type = "llama";
  int64_t explicit_head_dim = 0;  // config key "head_dim"; 0 = hidden_size / num_attention_heads
  bool attention_bias = false;
  // RoPE scaling (HF rope_scaling (v4) / rope_parameters (v5)); formulas in docs/CONTRACTS.md.
  std::string rope_type = "default";                  // default | linear | llama3 | yarn
  double rope_factor = 1.0;                           // linear, llama3, yarn
  double rope_low_freq_factor = 1.0;                  // llama3
  double rope_high_freq_factor = 4.0;                 // llama3
  int64_t rope_original_max_position_embeddings = 0;  // llama3 (required), yarn (0 = absent)
  double rope_beta_fast = 32.0;                       // yarn
  double rope_beta_slow = 1.0;                        // yarn
  double rope_attention_factor = 0.0;                 // yarn; 0 = absent (HF default 0.1 ln(factor) + 1)
  bool rope_truncate = true;                          // yarn: floor/ceil the correction range
  // RoPE angle precision (docs/NUMERICS.md): hf = fp32 position x inverse frequency,
  // bit-compatible with Transformers; fp64 = inverse frequencies and angles in fp64, then cos/sin cast.
  std::string rope_precision = "hf";

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads; }
  bool qkv_bias() const { return model_type == "qwen2" || attention_bias; }
  bool o_bias() const { return model_type != "qwen2" && attention_bias; }
  bool qk_norm() const { return model_type == "qwen3"; }
  // Number of trainable parameters (embedding, layers, final norm, head if untied), by formula.
  int64_t num_parameters() const;
  // Every trainable parameter with its shape, Hugging Face's names in Hugging Face's order:
  // what LlamaModel allocates and what a checkpoint for this model must hold (checked before
  // launch by validation_issues, loaded by load_checkpoint).
  struct Parameter {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Parameter> parameters() const;
};

struct ParallelConfig {
  int64_t sp_size = 1;
  int64_t dp_size = 1;
  std::string backend = "auto";  // auto | gloo | nccl
  int64_t head_chunks = 1;       // pipeline the all-to-alls over this many head chunks
  bool fused_qkv = true;         // one all-to-all for q, k and v instead of three (faster, bit-identical)
  double timeout_s = 120.0;      // every collective's timeout
  // Ring attention (docs/RING.md): ring groups of ring_size ranks pass K/V blocks
  // round the ring; the sequence is split over sp_size x ring_size ranks. 1 = Ulysses only.
  int64_t ring_size = 1;
  bool ring_zigzag = true;  // causal load balancing: ring rank r holds chunks r and 2R-1-r
  // How a ring step's exchange travels (ring_transport_for, ring_geometry.hpp): "auto" (p2p
  // on Gloo, alltoall on NCCL), "p2p" (send + recv; not on NCCL) or "alltoall" (one
  // all-to-all with split sizes on the ring group).
  std::string ring_transport = "auto";
  int64_t seq_ranks() const { return sp_size * ring_size; }
  int64_t world_size() const { return sp_size * ring_size * dp_size; }
};

struct TrainConfig {
  int64_t seq_length = 256;
  int64_t micro_batch_size = 1;
  int64_t steps = 10;
  double lr = 3e-3;
  int64_t warmup_steps = 2;
  double min_lr = 3e-4;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  // Hugging Face TrainingArguments conventions (docs/CONTRACTS.md); the names above are also read
  // under HF's names (learning_rate, max_steps, per_device_train_batch_size, max_grad_norm).
  int64_t gradient_accumulation_steps = 1;  // micro-batches per optimizer step, token-weighted
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  std::string lr_scheduler_type = "cosine_with_min_lr";  // cosine | cosine_with_min_lr | linear | constant_with_warmup
  int64_t seed = 1234;
  std::string dtype = "float32";  // float32 | bfloat16
  std::string init_from;          // HF checkpoint directory, empty = random init
  std::string save_to;            // HF checkpoint directory written at the end, empty = none
  int64_t save_every = 0;         // full training state into save_to/step-N every this many steps, 0 = off
  int64_t save_keep = 2;          // keep the last this many complete step-N checkpoints
  std::string resume_from;       // a save_to folder (its latest complete checkpoint) or one step-N folder, empty = none
  int64_t save_shard_bytes = 0;  // > 0: save_to is sharded into files of at most this many bytes (HF layout)
  std::string device = "auto";   // auto | cpu | cuda
  int64_t threads_per_rank = 0;  // 0 = cores / local ranks
  // Long-sequence memory techniques (Arctic Long Sequence Training style).
  std::string activation_checkpointing = "none";  // none | layer: keep only each layer's input, recompute in backward
  bool offload_activations = false;  // kept layer inputs live in CPU memory (with activation_checkpointing=layer)
  int64_t loss_chunk_tokens = 0;     // tiled lm_head + loss over chunks of this many tokens; 0 = off
  int64_t mlp_chunk_tokens = 0;      // TiledMLP over chunks of this many tokens; 0 = off
  // Norms, q/k/v/o projections, RoPE, residual adds and the MLP of each layer over chunks of this
  // many tokens, recomputed per chunk in backward (around attention, as TiledMLP); 0 = off
  int64_t proj_chunk_tokens = 0;
  std::string attention = "auto";  // auto | sdpa | blocked (block-causal online softmax; auto = blocked on CPU)
  int64_t attention_block = 256;   // key/query block of the blocked attention, tokens
  // ZeRO over all sp_size x dp_size ranks (DeepSpeed's stages, docs/ZERO.md): 0 = everything
  // replicated; 1 = AdamW state (and fp32 masters) sharded; 2 = + gradients; 3 = + parameters.
  int64_t zero_stage = 0;
  bool offload_optimizer = false;  // sharded fp32 masters + AdamW state in (pinned) CPU memory, stepped there
  bool offload_params = false;     // stage 3: parameter shards in CPU memory between uses
  // Stage 3 with offload_optimizer: the fp32 gradient shard in CPU memory too (DeepSpeed's place for it)
  bool offload_gradients = true;
  std::string allocator = "caching";  // GPU ranks' CUDA allocator: caching | expandable (expandable_segments)
  // Stage 3: the dtype each gather unit's gradient buffer accumulates in during backward, before
  // it is reduce-scattered into the fp32 gradient shard: auto = the compute dtype (bfloat16 in
  // bf16 training, half the bytes of fp32) | float32 | bfloat16 (needs train.dtype=bfloat16).
  std::string grad_accum_dtype = "auto";
  // The wire dtype of those reduce-scatters: float32 (default: the sums over ranks are made in
  // fp32, as the shard keeps them) | bfloat16 (half the bytes; needs bf16 unit gradients).
  std::string grad_reduce_dtype = "float32";
  // Stage 3: the dtype of the weights gathered for forward and backward: auto = the compute
  // dtype (bf16 in bf16 training: half the bytes in memory and on the wire, the same values as
  // the fp32 weights cast) | float32 (the fp32 masters, cast after the gather; before the cut).
  std::string gather_dtype = "auto";
  bool bf16_gathers() const { return zero_stage >= 3 && dtype == "bfloat16" && gather_dtype == "auto"; }
  // Stage 3: whether unit gradients accumulate in bfloat16 (grad_accum_dtype, resolved).
  bool bf16_unit_grads() const {
    return zero_stage >= 3 && (grad_accum_dtype == "bfloat16" || (grad_accum_dtype == "auto" && dtype == "bfloat16"));
  }
};

struct DataConfig {
  std::string kind = "synthetic";  // synthetic | text | tokens
  std::string path;
  std::string token_dtype = "uint16";  // for kind=tokens: uint16 | uint32
  // Bytes per token in the file: 1 for text (byte-level), 2 or 4 for tokens.
  int64_t token_bytes() const { return kind == "text" ? 1 : token_dtype == "uint32" ? 4 : 2; }
};

struct ProfileConfig {
  bool enabled = true;
  bool memory = true;
  int64_t step_begin = 0;  // first traced step (0-based)
  int64_t step_end = -1;   // last traced step, -1 = all
};

// Fault injection for demos and tests: the rank `slow_rank` sleeps `delay_ms` before each
// collective it issues, making a straggler on demand. slow_rank -1 = off.
struct FaultsConfig {
  int64_t slow_rank = -1;
  double delay_ms = 0;
};
inline constexpr double kMaxFaultDelayMs = 60000.0;

// The sections of a run config (besides the free-text name and description); a Hugging Face
// config.json has none of them at its top level.
inline constexpr std::array<const char*, 6> kRunConfigSections = {"model", "parallel", "train",
                                                                  "data",  "profile",  "faults"};

struct RunConfig {
  std::string name;  // free text for humans (kept in RUN/config.json)
  std::string description;
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  DataConfig data;
  ProfileConfig profile;
  FaultsConfig faults;

  json to_json() const;
  // Throws ConfigError naming the key for unknown keys or wrong types.
  static RunConfig from_json(const json& j);
};

// One problem found by validate(): the dotted field and a message a user can act on.
struct ConfigIssue {
  std::string field;
  std::string message;
};

// Largest JSON file load_json_file reads (configs, config.json, run.json are a few KiB).
inline constexpr int64_t kMaxJsonFileBytes = 16 << 20;

// Empty when `path` is a regular file of at most max_bytes (-1: any size); else why not
// ("no such file", "it is not a regular file (a FIFO)..."). FIFOs, devices and
// directories are refused before anything opens them (a FIFO blocks, /dev/zero never ends).
std::string regular_file_problem(const std::string& path, int64_t max_bytes = -1);

// A JSON integer as int64 (a float only when whole and within range: converting one beyond
// int64 is undefined); ConfigError naming `path` otherwise. The one reader of integer fields:
// the config's and run.json's.
int64_t json_int64(const json& v, const std::string& path);

// Reads a JSON file (a regular file of at most kMaxJsonFileBytes); ConfigError with the
// path and parse position on failure, including numbers beyond a double (1e999).
json load_json_file(const std::string& path);

// Applies "a.b.c=value" to a config JSON. The value is parsed as JSON when it parses
// (numbers, true/false, quoted strings), else taken as a plain string. The key must
// name an existing field (ConfigError otherwise, listing the valid keys of that section).
void apply_override(json& config, const std::string& assignment);

// Upper bounds validate() enforces (lower bounds: 1, or 0 where 0 means "off").
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;   // 16.7M
inline constexpr int64_t kMaxHidden = int64_t{1} << 18;  // 262144
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = 1024;
// Heads (and head chunks): what a trace's 16-bit head fields hold (prof::kMaxTraceHeads;
// checked where the worker includes both).
inline constexpr int64_t kMaxHeads = 32767;
inline constexpr int64_t kMaxWorld = 1024;               // sp_size, dp_size and their product
inline constexpr int64_t kMaxTokens = int64_t{1} << 30;  // seq_length, chunk sizes, positions
inline constexpr int64_t kMaxMicroBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;
inline constexpr int64_t kMaxThreads = 4096;
inline constexpr double kMinTimeoutS = 1.0;
inline constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;
inline constexpr double kMaxLr = 10.0;  // train.lr (and lr x weight_decay < 1)

// Every rule the engine enforces that can be checked without torch and without data:
// heads vs sp_size, kv heads, seq_length vs sp_size, head_chunks, dtype, backend, ranges.
std::vector<ConfigIssue> validate(const RunConfig& cfg);

// What this engine can plan (ulysses-run --plan) but not yet train; "" when it trains it.
// ulysses-run says it before launch (exit 2), the Trainer again for other launchers.
std::string not_yet_trained(const RunConfig& cfg);

// validate() plus checks that touch the file system: data file present and large
// enough, token ids below vocab_size, init_from directory present with a config.json
// and model weights, resume_from a usable checkpoint. FileChecks::Quick skips what reads
// whole files (the token id scan), for a form that revalidates as the user types; the
// messages are the same.
enum class FileChecks { Full, Quick };
std::vector<ConfigIssue> validate_with_files(const RunConfig& cfg, FileChecks depth = FileChecks::Full);

// The tokens file as its ids were checked (data.kind tokens): device, inode, size, modification
// and change times, with the vocab size and token width the check was against; "" when it
// cannot be read. ulysses-run takes it before its id check and hands it to the workers
// (kTokensCheckedEnv); a worker whose opened file still has it skips its own read of the whole
// file (every batch it reads is still checked). By path, or of an open file descriptor.
inline constexpr const char* kTokensCheckedEnv = "ULYSSES_TOKENS_CHECKED";
std::string tokens_file_identity(const std::string& path, const DataConfig& d, int64_t vocab_size);
std::string tokens_file_identity(int fd, const DataConfig& d, int64_t vocab_size);

// Throws ConfigError with all issues, one per line, when there are any.
void throw_if_invalid(const std::vector<ConfigIssue>& issues);

// Loads a run config file, applies overrides in order, resolves init_from's config.json
// into the model section, and returns it (not yet validated).
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
// What load_run_config makes of a config already read: RunConfig::from_json, then with
// train.init_from the model from the checkpoint's config.json, whose values the config's own
// model keys must equal (else ConfigError naming the key). The studio's form fills its model
// fields from it and checks the same agreement.
RunConfig run_config_from_json(const json& j);

// Hugging Face config.json <-> ModelConfig. from_hf ignores HF's informational keys
// (architectures, torch_dtype, ...) and refuses settings we do not implement
// (hidden_act other than silu, attention_bias, rope_scaling, ...).
ModelConfig model_from_hf_config(const json& hf);
json model_to_hf_config(const ModelConfig& m, const std::string& torch_dtype = "float32");

// Heads per rank, kv-head replication and head chunks: ulysses_geometry.hpp.

}  // namespace ulysses
