// The run config's field table (see config_fields.hpp).
#include "config_fields.hpp"

#include "config_reflection.hpp"
#include "json_checked.hpp"

#include <algorithm>
#include <cmath>

namespace ulysses {

namespace config_detail {

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len = 0;
    unsigned cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

}  // namespace config_detail

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// A JSON value read into a member of each kind, with the key's path in every refusal.
void read_value(int64_t& out, const json& v, const std::string& path) { out = json_int64(v, path); }
void read_value(double& out, const json& v, const std::string& path) {
  if (!v.is_number()) throw ConfigError(path + " must be a number, got " + json_for_message(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw ConfigError(path + " must be a finite number, got " + json_for_message(v));
  out = x;
}
void read_value(bool& out, const json& v, const std::string& path) {
  if (!v.is_boolean()) throw ConfigError(path + " must be true or false, got " + json_for_message(v));
  out = v.get<bool>();
}
void read_value(std::string& out, const json& v, const std::string& path) {
  if (v.is_null()) {
    out.clear();
    return;
  }
  if (!v.is_string()) throw ConfigError(path + " must be a string, got " + json_for_message(v));
  const std::string& x = v.get_ref<const std::string&>();
  if (!config_detail::valid_utf8(x))
    throw ConfigError(path + " is not valid UTF-8 (" + json_for_message(v) +
                      "); rename the file or directory to a UTF-8 name");
  if (x.size() > 4096) throw ConfigError(path + " is longer than 4096 bytes");
  // The system reads a path only up to a NUL, so a file or folder of the prefix would be used.
  if (x.find('\0') != std::string::npos)
    throw ConfigError(path + " holds a NUL character (\\u0000), which no file name can; remove it");
  out = x;
}

// The table's shorthands (a namespace of their own: the library is a unity build). A row names
// its section, its key, the member it binds and, through the maker, its kind: I binds an
// int64_t, N a double, B a bool, P and C a string, so a row cannot bind a member of another type.
namespace field_table {
using K = FieldKind;
using L = std::optional<int64_t>;
const L none;

template <class S>
struct Section {
  const char* name;
  S RunConfig::*member;
};
const Section<ModelConfig> kModel{"model", &RunConfig::model};
const Section<ParallelConfig> kParallel{"parallel", &RunConfig::parallel};
const Section<TrainConfig> kTrain{"train", &RunConfig::train};
const Section<DataConfig> kData{"data", &RunConfig::data};
const Section<ProfileConfig> kProfile{"profile", &RunConfig::profile};
const Section<FaultsConfig> kFaults{"faults", &RunConfig::faults};

template <class S, class T>
ConfigField make(const Section<S>& s, const char* k, T S::*m, K kind, const char* label, const std::string& doc) {
  ConfigField f;
  f.section = s.name;
  f.key = k;
  f.kind = kind;
  f.label = label;
  f.doc = doc;
  const auto sec = s.member;
  f.read = [sec, m](RunConfig& c, const json& v, const std::string& path) { read_value((c.*sec).*m, v, path); };
  f.write = [sec, m](const RunConfig& c) { return json((c.*sec).*m); };
  return f;
}
template <class S>
ConfigField I(const Section<S>& s, const char* k, int64_t S::*m, const char* label, const std::string& doc, L lo,
              L hi) {
  ConfigField f = make(s, k, m, K::Integer, label, doc);
  f.min = lo;
  f.max = hi;
  return f;
}
template <class S>
ConfigField N(const Section<S>& s, const char* k, double S::*m, const char* label, const std::string& doc) {
  return make(s, k, m, K::Number, label, doc);
}
template <class S>
ConfigField B(const Section<S>& s, const char* k, bool S::*m, const char* label, const std::string& doc) {
  return make(s, k, m, K::Check, label, doc);
}
template <class S>
ConfigField P(const Section<S>& s, const char* k, std::string S::*m, const char* label, const std::string& doc) {
  return make(s, k, m, K::Path, label, doc);
}
template <class S>
ConfigField C(const Section<S>& s, const char* k, std::string S::*m, const char* label, const std::string& doc,
              std::vector<std::string> ch) {
  ConfigField f = make(s, k, m, K::Choice, label, doc);
  f.choices = std::move(ch);
  return f;
}
ConfigField hidden(ConfigField f) {
  f.in_form = false;
  return f;
}
std::string hf(const std::string& doc) {
  return doc + " (no form field: set by a Hugging Face config.json import or a config file)";
}
}  // namespace field_table

// The model section (Hugging Face LlamaConfig's keys; those only an import sets have no field).
std::vector<ConfigField> model_field_table() {
  using namespace field_table;
  std::vector<ConfigField> t = {
      I(kModel, "vocab_size", &ModelConfig::vocab_size, "Vocabulary",
        "vocab_size: token ids 0..V-1 (256 for byte-level text)", 1, kMaxVocab),
      I(kModel, "hidden_size", &ModelConfig::hidden_size, "Hidden size", "hidden_size d", 1, kMaxHidden),
      I(kModel, "intermediate_size", &ModelConfig::intermediate_size, "FFN size", "intermediate_size of the SwiGLU MLP",
        1, kMaxIntermediate),
      I(kModel, "num_hidden_layers", &ModelConfig::num_hidden_layers, "Layers", "num_hidden_layers", 1, kMaxLayers),
      I(kModel, "num_attention_heads", &ModelConfig::num_attention_heads, "Attention heads",
        "num_attention_heads H (must divide by sp_size)", 1, kMaxHeads),
      I(kModel, "num_key_value_heads", &ModelConfig::num_key_value_heads, "KV heads",
        "num_key_value_heads (GQA when < heads)", 1, kMaxHeads),
      N(kModel, "rms_norm_eps", &ModelConfig::rms_norm_eps, "RMSNorm eps", "rms_norm_eps"),
      N(kModel, "rope_theta", &ModelConfig::rope_theta, "RoPE theta", "rope_theta"),
      I(kModel, "max_position_embeddings", &ModelConfig::max_position_embeddings, "Max positions",
        "max_position_embeddings", 1, kMaxTokens),
      B(kModel, "tie_word_embeddings", &ModelConfig::tie_word_embeddings, "Tie embeddings",
        "tie_word_embeddings: lm_head shares the embedding"),
  };
  t.push_back(hidden(C(kModel, "model_type", &ModelConfig::model_type, "Model family", hf("Hugging Face model_type"),
                       {"llama", "mistral", "qwen2", "qwen3"})));
  t.push_back(hidden(I(kModel, "head_dim", &ModelConfig::explicit_head_dim, "Head dim",
                       hf("head_dim; 0 = hidden_size / num_attention_heads"), 0, kMaxHidden)));
  t.push_back(hidden(B(kModel, "attention_bias", &ModelConfig::attention_bias, "Attention bias",
                       hf("q/k/v/o biases (llama, qwen3)"))));
  t.push_back(hidden(C(kModel, "rope_type", &ModelConfig::rope_type, "RoPE type", hf("RoPE scaling type"),
                       {"default", "linear", "llama3", "yarn"})));
  t.push_back(hidden(N(kModel, "rope_factor", &ModelConfig::rope_factor, "RoPE factor",
                       hf("RoPE scaling factor (linear, llama3, yarn)"))));
  t.push_back(hidden(
      N(kModel, "rope_low_freq_factor", &ModelConfig::rope_low_freq_factor, "RoPE low freq factor", hf("llama3"))));
  t.push_back(hidden(
      N(kModel, "rope_high_freq_factor", &ModelConfig::rope_high_freq_factor, "RoPE high freq factor", hf("llama3"))));
  t.push_back(
      hidden(I(kModel, "rope_original_max_position_embeddings", &ModelConfig::rope_original_max_position_embeddings,
               "RoPE original max positions", hf("llama3 (required), yarn; 0 = absent"), 0, kMaxTokens)));
  t.push_back(hidden(N(kModel, "rope_beta_fast", &ModelConfig::rope_beta_fast, "RoPE beta fast", hf("yarn"))));
  t.push_back(hidden(N(kModel, "rope_beta_slow", &ModelConfig::rope_beta_slow, "RoPE beta slow", hf("yarn"))));
  t.push_back(hidden(N(kModel, "rope_attention_factor", &ModelConfig::rope_attention_factor, "RoPE attention factor",
                       hf("yarn; 0 = Hugging Face's default"))));
  t.push_back(hidden(B(kModel, "rope_truncate", &ModelConfig::rope_truncate, "RoPE truncate",
                       hf("yarn: floor/ceil the correction range"))));
  t.push_back(hidden(C(kModel, "rope_precision", &ModelConfig::rope_precision, "RoPE precision",
                       "RoPE angles: hf = fp32 as Transformers (bit-compatible), fp64 = computed in fp64 then cast "
                       "(docs/NUMERICS.md; no form field: set in a config file or with --set)",
                       {"hf", "fp64"})));
  return t;
}

// parallel, train, data, profile and faults.
std::vector<ConfigField> run_field_table() {
  using namespace field_table;
  return {
      I(kParallel, "sp_size", &ParallelConfig::sp_size, "Sequence parallel (sp)",
        "Ulysses ranks that split one sequence", 1, kMaxWorld),
      I(kParallel, "dp_size", &ParallelConfig::dp_size, "Data parallel (dp)", "replicas; world size = sp x ring x dp",
        1, kMaxWorld),
      I(kParallel, "head_chunks", &ParallelConfig::head_chunks, "Head chunks",
        "overlap the all-to-all of chunk i+1 with attention of chunk i", 1, kMaxHeads),
      C(kParallel, "backend", &ParallelConfig::backend, "Backend", "collectives: gloo (CPU), nccl (GPU) or auto",
        {"auto", "gloo", "nccl"}),
      B(kParallel, "fused_qkv", &ParallelConfig::fused_qkv, "Fused q/k/v all-to-all", "one all-to-all for q, k and v"),
      N(kParallel, "timeout_s", &ParallelConfig::timeout_s, "Collective timeout (s)", "timeout of every collective"),
      I(kParallel, "ring_size", &ParallelConfig::ring_size, "Ring attention (ring)",
        "ranks of a ring that pass K/V blocks round; the sequence splits over sp x ring ranks, world = sp x ring x dp",
        1, kMaxWorld),
      B(kParallel, "ring_zigzag", &ParallelConfig::ring_zigzag, "Ring zigzag balance",
        "ring rank r holds sequence chunks r and 2R-1-r so every rank has the same causal work (off: contiguous)"),
      C(kParallel, "ring_transport", &ParallelConfig::ring_transport, "Ring transport",
        "how K/V blocks travel: auto (p2p on Gloo, alltoall on NCCL), p2p (send + recv; Gloo only) or alltoall "
        "(one all-to-all of the ring group per step)",
        {"auto", "p2p", "alltoall"}),
      I(kTrain, "seq_length", &TrainConfig::seq_length, "Sequence length",
        "tokens per sequence N (must divide by sp_size)", 1, kMaxTokens),
      I(kTrain, "micro_batch_size", &TrainConfig::micro_batch_size, "Micro batch",
        "sequences per step per data-parallel rank", 1, kMaxMicroBatch),
      I(kTrain, "steps", &TrainConfig::steps, "Steps", "optimizer steps", 1, kMaxSteps),
      N(kTrain, "lr", &TrainConfig::lr, "Learning rate", "peak learning rate (AdamW)"),
      I(kTrain, "warmup_steps", &TrainConfig::warmup_steps, "Warm-up steps", "linear warm-up", 0, kMaxSteps),
      N(kTrain, "min_lr", &TrainConfig::min_lr, "Min learning rate", "cosine decay floor"),
      N(kTrain, "weight_decay", &TrainConfig::weight_decay, "Weight decay", "AdamW weight decay"),
      N(kTrain, "grad_clip", &TrainConfig::grad_clip, "Gradient clip", "max gradient norm, 0 = off"),
      I(kTrain, "gradient_accumulation_steps", &TrainConfig::gradient_accumulation_steps, "Gradient accumulation",
        "micro-steps per optimizer step (token-weighted)", 1, 65536),
      C(kTrain, "lr_scheduler_type", &TrainConfig::lr_scheduler_type, "LR schedule",
        "transformers' get_scheduler formulas; warm-up from 0",
        {"cosine", "cosine_with_min_lr", "linear", "constant_with_warmup"}),
      N(kTrain, "adam_beta1", &TrainConfig::adam_beta1, "Adam beta1", "AdamW first-moment decay"),
      N(kTrain, "adam_beta2", &TrainConfig::adam_beta2, "Adam beta2", "AdamW second-moment decay"),
      N(kTrain, "adam_epsilon", &TrainConfig::adam_epsilon, "Adam epsilon", "AdamW epsilon"),
      I(kTrain, "seed", &TrainConfig::seed, "Seed", "same seed, same loss", none, none),
      C(kTrain, "dtype", &TrainConfig::dtype, "Dtype", "float32, or bfloat16 with fp32 master weights",
        {"float32", "bfloat16"}),
      C(kTrain, "device", &TrainConfig::device, "Device", "auto = cuda when GPUs are present", {"auto", "cpu", "cuda"}),
      I(kTrain, "threads_per_rank", &TrainConfig::threads_per_rank, "Threads per rank", "0 = cores / local ranks", 0,
        kMaxThreads),
      C(kTrain, "activation_checkpointing", &TrainConfig::activation_checkpointing, "Activation checkpointing",
        "layer: keep only each layer's input, recompute in backward", {"none", "layer"}),
      B(kTrain, "offload_activations", &TrainConfig::offload_activations, "Offload checkpoints",
        "kept layer inputs go to CPU memory (needs checkpointing)"),
      I(kTrain, "loss_chunk_tokens", &TrainConfig::loss_chunk_tokens, "Loss chunk (tokens)",
        "tiled lm_head + loss: no [N, vocab] tensor; 0 = off", 0, kMaxTokens),
      I(kTrain, "mlp_chunk_tokens", &TrainConfig::mlp_chunk_tokens, "MLP chunk (tokens)",
        "TiledMLP: the MLP over token chunks with recompute; 0 = off", 0, kMaxTokens),
      I(kTrain, "proj_chunk_tokens", &TrainConfig::proj_chunk_tokens, "Layer chunk (tokens)",
        "norms, q/k/v/o projections, RoPE, residual adds and MLP over token chunks with recompute (only q, k, v and "
        "the attention output stay whole); 0 = off",
        0, kMaxTokens),
      C(kTrain, "attention", &TrainConfig::attention, "Attention kernel",
        "auto: block-causal on CPU, SDPA (flash) on GPU", {"auto", "sdpa", "blocked"}),
      I(kTrain, "attention_block", &TrainConfig::attention_block, "Attention block",
        "tokens per block of the block-causal attention", 1, kMaxTokens),
      I(kTrain, "zero_stage", &TrainConfig::zero_stage, "ZeRO stage",
        "shard over all ranks: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (DeepSpeed's stages)", 0, 3),
      B(kTrain, "offload_optimizer", &TrainConfig::offload_optimizer, "Offload optimizer",
        "fp32 masters and AdamW state of each shard in CPU memory, stepped there (needs zero_stage >= 1)"),
      B(kTrain, "offload_params", &TrainConfig::offload_params, "Offload parameters",
        "stage-3 parameter shards in CPU memory between uses"),
      B(kTrain, "offload_gradients", &TrainConfig::offload_gradients, "Offload gradients",
        "stage 3 with offload_optimizer: the fp32 gradient shard in CPU memory too (false: on the device)"),
      C(kTrain, "allocator", &TrainConfig::allocator, "CUDA allocator",
        "GPU ranks: caching (PyTorch's default) or expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
        "as ALST runs); the memory plan replays its allocations through the one chosen",
        {"caching", "expandable"}),
      C(kTrain, "grad_accum_dtype", &TrainConfig::grad_accum_dtype, "Gradient accumulation dtype",
        "stage 3: each layer's gradient buffer during backward, reduce-scattered into the fp32 gradient shard and "
        "freed; auto = the compute dtype (bfloat16 in bf16 training: half the bytes)",
        {"auto", "float32", "bfloat16"}),
      C(kTrain, "gather_dtype", &TrainConfig::gather_dtype, "Gather dtype",
        "stage 3: the weights gathered for each layer; auto = the compute dtype (bfloat16 in bf16 training: half the "
        "bytes in memory and on the wire, the same values), float32 = the fp32 masters",
        {"auto", "float32"}),
      C(kTrain, "grad_reduce_dtype", &TrainConfig::grad_reduce_dtype, "Gradient reduce dtype",
        "stage 3 with bf16 layer gradients: the reduce-scatter's wire dtype; float32 (default) sums over ranks in "
        "fp32, bfloat16 halves the bytes",
        {"float32", "bfloat16"}),
      P(kTrain, "init_from", &TrainConfig::init_from, "Initialize from",
        "Hugging Face checkpoint directory (empty = random init)"),
      P(kTrain, "save_to", &TrainConfig::save_to, "Save to",
        "Hugging Face checkpoint directory written at the end (empty = none)"),
      I(kTrain, "save_shard_bytes", &TrainConfig::save_shard_bytes, "Shard size (bytes)",
        "split the saved model into files of at most this size; 0 = one file", 0, int64_t{1} << 50),
      I(kTrain, "save_every", &TrainConfig::save_every, "Checkpoint every",
        "full training state into save_to/step-N every this many steps; 0 = off", 0, kMaxSteps),
      I(kTrain, "save_keep", &TrainConfig::save_keep, "Checkpoints kept",
        "the last this many complete step-N checkpoints", 1, 1 << 20),
      P(kTrain, "resume_from", &TrainConfig::resume_from, "Resume from",
        "a save_to folder (its latest complete checkpoint) or one step-N folder; empty = none"),
      C(kData, "kind", &DataConfig::kind, "Data",
        "synthetic tokens, byte-level text file, a raw token file, or documents prepared by `ulysses data prepare` "
        "(packed, masked at document borders)",
        {"synthetic", "text", "tokens", "documents"}),
      P(kData, "path", &DataConfig::path, "Data file",
        "text or token file (kind text/tokens), or a prepared documents folder (kind documents)"),
      C(kData, "token_dtype", &DataConfig::token_dtype, "Token width", "for kind=tokens", {"uint16", "uint32"}),
      B(kProfile, "enabled", &ProfileConfig::enabled, "Trace", "write RUN/trace/rank*.sqlite"),
      B(kProfile, "memory", &ProfileConfig::memory, "Memory samples", "sample memory in the trace"),
      I(kProfile, "step_begin", &ProfileConfig::step_begin, "First traced step", "0-based", 0, kMaxSteps),
      I(kProfile, "step_end", &ProfileConfig::step_end, "Last traced step", "-1 = all", -1, kMaxSteps),
      I(kFaults, "slow_rank", &FaultsConfig::slow_rank, "Slow rank",
        "this rank sleeps before each collective: a straggler on demand; -1 = off (below the world size)", -1, none),
      N(kFaults, "delay_ms", &FaultsConfig::delay_ms, "Delay (ms)", "sleep of the slow rank before each collective"),
  };
}

std::vector<ConfigField> build() {
  std::vector<ConfigField> t = model_field_table();
  const std::vector<ConfigField> rest = run_field_table();
  t.insert(t.end(), rest.begin(), rest.end());
  // Defaults: the structs' initializers, through each row's binding.
  const RunConfig defaults;
  for (auto& f : t) f.default_value = f.write(defaults);
  return t;
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> t = build();
  return t;
}

const ConfigField* find_config_field(const std::string& dotted) {
  const auto& t = config_fields();
  auto it = std::find_if(t.begin(), t.end(), [&](const ConfigField& f) { return f.dotted() == dotted; });
  return it == t.end() ? nullptr : &*it;
}

std::string choice_list(const ConfigField& f) {
  std::string s;
  for (size_t i = 0; i < f.choices.size(); ++i)
    s += (i == 0 ? "" : i + 1 == f.choices.size() ? " or " : ", ") + f.choices[i];
  return s;
}

json field_value_from_text(const ConfigField& f, const std::string& text) {
  switch (f.kind) {
    case FieldKind::Integer:
    case FieldKind::Number:
    case FieldKind::Check: {
      const std::string t = trim(text);
      try {
        return parse_checked_json(t);
      } catch (const JsonShapeError&) {  // too deep, a key twice: the text, which the field refuses
        return t;
      } catch (const json::exception&) {  // not JSON (or 1e999): the parser names the text
        return t;
      }
    }
    case FieldKind::Text:
    case FieldKind::Path:
      return trim(text);
    case FieldKind::Choice:
      return text;
  }
  return text;
}

}  // namespace ulysses
