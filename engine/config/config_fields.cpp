// The run config's field table (see config_fields.hpp).
#include "config_fields.hpp"
#include "json_checked.hpp"

#include <algorithm>

namespace ulysses {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The table's shorthands (a namespace of their own: the library is a unity build).
namespace field_table {
using K = FieldKind;
using L = std::optional<int64_t>;
const L none;

ConfigField make(const char* s, const char* k, K kind, const char* label, const std::string& doc) {
  ConfigField f;
  f.section = s;
  f.key = k;
  f.kind = kind;
  f.label = label;
  f.doc = doc;
  return f;
}
ConfigField I(const char* s, const char* k, const char* label, const std::string& doc, L lo, L hi) {
  ConfigField f = make(s, k, K::Integer, label, doc);
  f.min = lo;
  f.max = hi;
  return f;
}
ConfigField N(const char* s, const char* k, const char* label, const std::string& doc) {
  return make(s, k, K::Number, label, doc);
}
ConfigField B(const char* s, const char* k, const char* label, const std::string& doc) {
  return make(s, k, K::Check, label, doc);
}
ConfigField P(const char* s, const char* k, const char* label, const std::string& doc) {
  return make(s, k, K::Path, label, doc);
}
ConfigField C(const char* s, const char* k, const char* label, const std::string& doc, std::vector<std::string> ch) {
  ConfigField f = make(s, k, K::Choice, label, doc);
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
      I("model", "vocab_size", "Vocabulary", "vocab_size: token ids 0..V-1 (256 for byte-level text)", 1, kMaxVocab),
      I("model", "hidden_size", "Hidden size", "hidden_size d", 1, kMaxHidden),
      I("model", "intermediate_size", "FFN size", "intermediate_size of the SwiGLU MLP", 1, kMaxIntermediate),
      I("model", "num_hidden_layers", "Layers", "num_hidden_layers", 1, kMaxLayers),
      I("model", "num_attention_heads", "Attention heads", "num_attention_heads H (must divide by sp_size)", 1,
        kMaxHeads),
      I("model", "num_key_value_heads", "KV heads", "num_key_value_heads (GQA when < heads)", 1, kMaxHeads),
      N("model", "rms_norm_eps", "RMSNorm eps", "rms_norm_eps"),
      N("model", "rope_theta", "RoPE theta", "rope_theta"),
      I("model", "max_position_embeddings", "Max positions", "max_position_embeddings", 1, kMaxTokens),
      B("model", "tie_word_embeddings", "Tie embeddings", "tie_word_embeddings: lm_head shares the embedding"),
  };
  t.push_back(hidden(
      C("model", "model_type", "Model family", hf("Hugging Face model_type"), {"llama", "mistral", "qwen2", "qwen3"})));
  t.push_back(
      hidden(I("model", "head_dim", "Head dim", hf("head_dim; 0 = hidden_size / num_attention_heads"), 0, kMaxHidden)));
  t.push_back(hidden(B("model", "attention_bias", "Attention bias", hf("q/k/v/o biases (llama, qwen3)"))));
  t.push_back(
      hidden(C("model", "rope_type", "RoPE type", hf("RoPE scaling type"), {"default", "linear", "llama3", "yarn"})));
  t.push_back(hidden(N("model", "rope_factor", "RoPE factor", hf("RoPE scaling factor (linear, llama3, yarn)"))));
  t.push_back(hidden(N("model", "rope_low_freq_factor", "RoPE low freq factor", hf("llama3"))));
  t.push_back(hidden(N("model", "rope_high_freq_factor", "RoPE high freq factor", hf("llama3"))));
  t.push_back(hidden(I("model", "rope_original_max_position_embeddings", "RoPE original max positions",
                       hf("llama3 (required), yarn; 0 = absent"), 0, kMaxTokens)));
  t.push_back(hidden(N("model", "rope_beta_fast", "RoPE beta fast", hf("yarn"))));
  t.push_back(hidden(N("model", "rope_beta_slow", "RoPE beta slow", hf("yarn"))));
  t.push_back(
      hidden(N("model", "rope_attention_factor", "RoPE attention factor", hf("yarn; 0 = Hugging Face's default"))));
  t.push_back(hidden(B("model", "rope_truncate", "RoPE truncate", hf("yarn: floor/ceil the correction range"))));
  t.push_back(hidden(C("model", "rope_precision", "RoPE precision",
                       "RoPE angles: hf = fp32 as Transformers (bit-compatible), fp64 = computed in fp64 then cast "
                       "(docs/NUMERICS.md; no form field: set in a config file or with --set)",
                       {"hf", "fp64"})));
  return t;
}

// parallel, train, data, profile and faults.
std::vector<ConfigField> run_field_table() {
  using namespace field_table;
  return {
      I("parallel", "sp_size", "Sequence parallel (sp)", "Ulysses ranks that split one sequence", 1, kMaxWorld),
      I("parallel", "dp_size", "Data parallel (dp)", "replicas; world size = sp x ring x dp", 1, kMaxWorld),
      I("parallel", "head_chunks", "Head chunks", "overlap the all-to-all of chunk i+1 with attention of chunk i", 1,
        kMaxHeads),
      C("parallel", "backend", "Backend", "collectives: gloo (CPU), nccl (GPU) or auto", {"auto", "gloo", "nccl"}),
      B("parallel", "fused_qkv", "Fused q/k/v all-to-all", "one all-to-all for q, k and v"),
      N("parallel", "timeout_s", "Collective timeout (s)", "timeout of every collective"),
      I("parallel", "ring_size", "Ring attention (ring)",
        "ranks of a ring that pass K/V blocks round; the sequence splits over sp x ring ranks, world = sp x ring x dp",
        1, kMaxWorld),
      B("parallel", "ring_zigzag", "Ring zigzag balance",
        "ring rank r holds sequence chunks r and 2R-1-r so every rank has the same causal work (off: contiguous)"),
      C("parallel", "ring_transport", "Ring transport",
        "how K/V blocks travel: auto (p2p on Gloo, alltoall on NCCL), p2p (send + recv; Gloo only) or alltoall "
        "(one all-to-all of the ring group per step)",
        {"auto", "p2p", "alltoall"}),
      I("train", "seq_length", "Sequence length", "tokens per sequence N (must divide by sp_size)", 1, kMaxTokens),
      I("train", "micro_batch_size", "Micro batch", "sequences per step per data-parallel rank", 1, kMaxMicroBatch),
      I("train", "steps", "Steps", "optimizer steps", 1, kMaxSteps),
      N("train", "lr", "Learning rate", "peak learning rate (AdamW)"),
      I("train", "warmup_steps", "Warm-up steps", "linear warm-up", 0, kMaxSteps),
      N("train", "min_lr", "Min learning rate", "cosine decay floor"),
      N("train", "weight_decay", "Weight decay", "AdamW weight decay"),
      N("train", "grad_clip", "Gradient clip", "max gradient norm, 0 = off"),
      I("train", "gradient_accumulation_steps", "Gradient accumulation",
        "micro-steps per optimizer step (token-weighted)", 1, 65536),
      C("train", "lr_scheduler_type", "LR schedule", "transformers' get_scheduler formulas; warm-up from 0",
        {"cosine", "cosine_with_min_lr", "linear", "constant_with_warmup"}),
      N("train", "adam_beta1", "Adam beta1", "AdamW first-moment decay"),
      N("train", "adam_beta2", "Adam beta2", "AdamW second-moment decay"),
      N("train", "adam_epsilon", "Adam epsilon", "AdamW epsilon"),
      I("train", "seed", "Seed", "same seed, same loss", none, none),
      C("train", "dtype", "Dtype", "float32, or bfloat16 with fp32 master weights", {"float32", "bfloat16"}),
      C("train", "device", "Device", "auto = cuda when GPUs are present", {"auto", "cpu", "cuda"}),
      I("train", "threads_per_rank", "Threads per rank", "0 = cores / local ranks", 0, kMaxThreads),
      C("train", "activation_checkpointing", "Activation checkpointing",
        "layer: keep only each layer's input, recompute in backward", {"none", "layer"}),
      B("train", "offload_activations", "Offload checkpoints",
        "kept layer inputs go to CPU memory (needs checkpointing)"),
      I("train", "loss_chunk_tokens", "Loss chunk (tokens)", "tiled lm_head + loss: no [N, vocab] tensor; 0 = off", 0,
        kMaxTokens),
      I("train", "mlp_chunk_tokens", "MLP chunk (tokens)",
        "TiledMLP: the MLP over token chunks with recompute; 0 = off", 0, kMaxTokens),
      C("train", "attention", "Attention kernel", "auto: block-causal on CPU, SDPA (flash) on GPU",
        {"auto", "sdpa", "blocked"}),
      I("train", "attention_block", "Attention block", "tokens per block of the block-causal attention", 1, kMaxTokens),
      I("train", "zero_stage", "ZeRO stage",
        "shard over all ranks: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (DeepSpeed's stages)", 0, 3),
      B("train", "offload_optimizer", "Offload optimizer",
        "fp32 masters and AdamW state of each shard in CPU memory, stepped there (needs zero_stage >= 1)"),
      B("train", "offload_params", "Offload parameters", "stage-3 parameter shards in CPU memory between uses"),
      P("train", "init_from", "Initialize from", "Hugging Face checkpoint directory (empty = random init)"),
      P("train", "save_to", "Save to", "Hugging Face checkpoint directory written at the end (empty = none)"),
      I("train", "save_shard_bytes", "Shard size (bytes)",
        "split the saved model into files of at most this size; 0 = one file", 0, int64_t{1} << 50),
      I("train", "save_every", "Checkpoint every",
        "full training state into save_to/step-N every this many steps; 0 = off", 0, kMaxSteps),
      I("train", "save_keep", "Checkpoints kept", "the last this many complete step-N checkpoints", 1, 1 << 20),
      P("train", "resume_from", "Resume from",
        "a save_to folder (its latest complete checkpoint) or one step-N folder; empty = none"),
      C("data", "kind", "Data", "synthetic tokens, byte-level text file, or a raw token file",
        {"synthetic", "text", "tokens"}),
      P("data", "path", "Data file", "text or token file (kind text/tokens)"),
      C("data", "token_dtype", "Token width", "for kind=tokens", {"uint16", "uint32"}),
      B("profile", "enabled", "Trace", "write RUN/trace/rank*.sqlite"),
      B("profile", "memory", "Memory samples", "sample memory in the trace"),
      I("profile", "step_begin", "First traced step", "0-based", 0, kMaxSteps),
      I("profile", "step_end", "Last traced step", "-1 = all", -1, kMaxSteps),
      I("faults", "slow_rank", "Slow rank",
        "this rank sleeps before each collective: a straggler on demand; -1 = off (below the world size)", -1, none),
      N("faults", "delay_ms", "Delay (ms)", "sleep of the slow rank before each collective"),
  };
}

std::vector<ConfigField> build() {
  std::vector<ConfigField> t = model_field_table();
  const std::vector<ConfigField> rest = run_field_table();
  t.insert(t.end(), rest.begin(), rest.end());
  // Defaults: the structs' initializers, through the parser's own writer.
  const json defaults = RunConfig{}.to_json();
  for (auto& f : t)
    if (defaults.contains(f.section) && defaults[f.section].contains(f.key))
      f.default_value = defaults[f.section][f.key];
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
