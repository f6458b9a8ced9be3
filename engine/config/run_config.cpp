// Run configuration parsing, overrides, HF config.json mapping and validation.
#include "run_config.hpp"

#include "checkpoint_layout.hpp"
#include "safetensors_header.hpp"
#include "config_fields.hpp"
#include "json_checked.hpp"
#include "ring_geometry.hpp"
#include "ulysses_geometry.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace ulysses {
namespace fs = std::filesystem;

namespace {

// ---- field tables: one place lists every key of every section ---------------------

template <class S>
struct Field {
  const char* name;
  std::function<void(S&, const json&, const std::string&)> set;
  std::function<json(const S&)> get;
};

std::string type_name(const json& v) { return v.type_name(); }

std::string show(const json& v) { return json_for_message(v); }
std::string show_double(double v) { return json_for_message(json(v)); }

}  // namespace

int64_t json_int64(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw ConfigError(path + " = " + show(v) + " is out of range (at most " + std::to_string(INT64_MAX) + ")");
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // Range first: casting a double beyond int64 to int64 is undefined behaviour.
    const double x = v.get<double>();
    if (!(std::fabs(x) < 9.2e18)) throw ConfigError(path + " = " + show(v) + " is out of range for a 64-bit integer");
    if (x != std::trunc(x)) throw ConfigError(path + " must be an integer, got " + show(v));
    return static_cast<int64_t>(x);
  }
  throw ConfigError(path + " must be an integer, got " + show(v) + " (" + type_name(v) + ")");
}

namespace {

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

template <class S>
Field<S> f(const char* name, int64_t S::*m) {
  return {name, [m](S& s, const json& v, const std::string& path) { s.*m = json_int64(v, path); },
          [m](const S& s) { return json(s.*m); }};
}
template <class S>
Field<S> f(const char* name, double S::*m) {
  return {name,
          [m](S& s, const json& v, const std::string& path) {
            if (!v.is_number()) throw ConfigError(path + " must be a number, got " + show(v));
            const double x = v.get<double>();
            if (!std::isfinite(x)) throw ConfigError(path + " must be a finite number, got " + show(v));
            s.*m = x;
          },
          [m](const S& s) { return json(s.*m); }};
}
template <class S>
Field<S> f(const char* name, bool S::*m) {
  return {name,
          [m](S& s, const json& v, const std::string& path) {
            if (!v.is_boolean()) throw ConfigError(path + " must be true or false, got " + show(v));
            s.*m = v.get<bool>();
          },
          [m](const S& s) { return json(s.*m); }};
}
template <class S>
Field<S> f(const char* name, std::string S::*m) {
  return {name,
          [m](S& s, const json& v, const std::string& path) {
            if (v.is_null()) {
              s.*m = "";
              return;
            }
            if (!v.is_string()) throw ConfigError(path + " must be a string, got " + show(v));
            const std::string& x = v.get_ref<const std::string&>();
            if (!valid_utf8(x))
              throw ConfigError(path + " is not valid UTF-8 (" + show(v) +
                                "); rename the file or directory to a UTF-8 name");
            if (x.size() > 4096) throw ConfigError(path + " is longer than 4096 bytes");
            // A NUL cut the path short where the system read it (data.path trained on a
            // prefix of the name; save_to made a folder of the prefix).
            if (x.find('\0') != std::string::npos)
              throw ConfigError(path + " holds a NUL character (\\u0000), which no file name can; remove it");
            s.*m = x;
          },
          [m](const S& s) { return json(s.*m); }};
}

const std::vector<Field<ModelConfig>>& model_fields() {
  static const std::vector<Field<ModelConfig>> t = {
      f("vocab_size", &ModelConfig::vocab_size),
      f("hidden_size", &ModelConfig::hidden_size),
      f("intermediate_size", &ModelConfig::intermediate_size),
      f("num_hidden_layers", &ModelConfig::num_hidden_layers),
      f("num_attention_heads", &ModelConfig::num_attention_heads),
      f("num_key_value_heads", &ModelConfig::num_key_value_heads),
      f("rms_norm_eps", &ModelConfig::rms_norm_eps),
      f("rope_theta", &ModelConfig::rope_theta),
      f("max_position_embeddings", &ModelConfig::max_position_embeddings),
      f("tie_word_embeddings", &ModelConfig::tie_word_embeddings),
      f("model_type", &ModelConfig::model_type),
      f("head_dim", &ModelConfig::explicit_head_dim),
      f("attention_bias", &ModelConfig::attention_bias),
      f("rope_type", &ModelConfig::rope_type),
      f("rope_factor", &ModelConfig::rope_factor),
      f("rope_low_freq_factor", &ModelConfig::rope_low_freq_factor),
      f("rope_high_freq_factor", &ModelConfig::rope_high_freq_factor),
      f("rope_original_max_position_embeddings", &ModelConfig::rope_original_max_position_embeddings),
      f("rope_beta_fast", &ModelConfig::rope_beta_fast),
      f("rope_beta_slow", &ModelConfig::rope_beta_slow),
      f("rope_attention_factor", &ModelConfig::rope_attention_factor),
      f("rope_truncate", &ModelConfig::rope_truncate),
      f("rope_precision", &ModelConfig::rope_precision),
  };
  return t;
}
const std::vector<Field<ParallelConfig>>& parallel_fields() {
  static const std::vector<Field<ParallelConfig>> t = {
      f("sp_size", &ParallelConfig::sp_size),     f("dp_size", &ParallelConfig::dp_size),
      f("backend", &ParallelConfig::backend),     f("head_chunks", &ParallelConfig::head_chunks),
      f("fused_qkv", &ParallelConfig::fused_qkv), f("timeout_s", &ParallelConfig::timeout_s),
      f("ring_size", &ParallelConfig::ring_size), f("ring_zigzag", &ParallelConfig::ring_zigzag),
  };
  return t;
}
const std::vector<Field<TrainConfig>>& train_fields() {
  static const std::vector<Field<TrainConfig>> t = {
      f("seq_length", &TrainConfig::seq_length),
      f("micro_batch_size", &TrainConfig::micro_batch_size),
      f("steps", &TrainConfig::steps),
      f("lr", &TrainConfig::lr),
      f("warmup_steps", &TrainConfig::warmup_steps),
      f("min_lr", &TrainConfig::min_lr),
      f("weight_decay", &TrainConfig::weight_decay),
      f("grad_clip", &TrainConfig::grad_clip),
      f("gradient_accumulation_steps", &TrainConfig::gradient_accumulation_steps),
      f("adam_beta1", &TrainConfig::adam_beta1),
      f("adam_beta2", &TrainConfig::adam_beta2),
      f("adam_epsilon", &TrainConfig::adam_epsilon),
      f("lr_scheduler_type", &TrainConfig::lr_scheduler_type),
      f("seed", &TrainConfig::seed),
      f("dtype", &TrainConfig::dtype),
      f("init_from", &TrainConfig::init_from),
      f("save_to", &TrainConfig::save_to),
      f("save_every", &TrainConfig::save_every),
      f("save_keep", &TrainConfig::save_keep),
      f("resume_from", &TrainConfig::resume_from),
      f("save_shard_bytes", &TrainConfig::save_shard_bytes),
      f("device", &TrainConfig::device),
      f("threads_per_rank", &TrainConfig::threads_per_rank),
      f("activation_checkpointing", &TrainConfig::activation_checkpointing),
      f("offload_activations", &TrainConfig::offload_activations),
      f("loss_chunk_tokens", &TrainConfig::loss_chunk_tokens),
      f("mlp_chunk_tokens", &TrainConfig::mlp_chunk_tokens),
      f("attention", &TrainConfig::attention),
      f("attention_block", &TrainConfig::attention_block),
      f("zero_stage", &TrainConfig::zero_stage),
      f("offload_optimizer", &TrainConfig::offload_optimizer),
      f("offload_params", &TrainConfig::offload_params),
  };
  return t;
}
const std::vector<Field<DataConfig>>& data_fields() {
  static const std::vector<Field<DataConfig>> t = {
      f("kind", &DataConfig::kind),
      f("path", &DataConfig::path),
      f("token_dtype", &DataConfig::token_dtype),
  };
  return t;
}
const std::vector<Field<ProfileConfig>>& profile_fields() {
  static const std::vector<Field<ProfileConfig>> t = {
      f("enabled", &ProfileConfig::enabled),
      f("memory", &ProfileConfig::memory),
      f("step_begin", &ProfileConfig::step_begin),
      f("step_end", &ProfileConfig::step_end),
  };
  return t;
}

const std::vector<Field<FaultsConfig>>& faults_fields() {
  static const std::vector<Field<FaultsConfig>> t = {
      f("slow_rank", &FaultsConfig::slow_rank),
      f("delay_ms", &FaultsConfig::delay_ms),
  };
  return t;
}

template <class S>
std::string key_list(const std::vector<Field<S>>& fields) {
  std::string out;
  for (const auto& fd : fields) out += (out.empty() ? "" : ", ") + std::string(fd.name);
  return out;
}

// Hugging Face TrainingArguments names read as our train keys (issue 14). Files we write
// keep our names (the studio's forms and existing configs use them).
const std::vector<std::pair<std::string, std::string>>& key_aliases() {
  static const std::vector<std::pair<std::string, std::string>> t = {
      {"train.learning_rate", "train.lr"},
      {"train.max_steps", "train.steps"},
      {"train.per_device_train_batch_size", "train.micro_batch_size"},
      {"train.max_grad_norm", "train.grad_clip"}};
  return t;
}
std::string canonical_key(const std::string& dotted) {
  for (const auto& [alias, ours] : key_aliases())
    if (dotted == alias) return ours;
  return dotted;
}

template <class S>
void read_section(S& s, const json& j, const std::string& section, const std::vector<Field<S>>& fields) {
  if (!j.is_object()) throw ConfigError(section + " must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string ours = canonical_key(section + "." + it.key()).substr(section.size() + 1);
    if (ours != it.key() && j.contains(ours))
      throw ConfigError(section + "." + it.key() + " and " + section + "." + ours + " name the same setting; keep one");
    auto fd = std::find_if(fields.begin(), fields.end(), [&](const Field<S>& x) { return ours == x.name; });
    if (fd == fields.end())
      throw ConfigError("unknown config key '" + section + "." + it.key() + "' (valid keys in " + section + ": " +
                        key_list(fields) + ")");
    fd->set(s, it.value(), section + "." + it.key());
  }
}

template <class S>
json write_section(const S& s, const std::vector<Field<S>>& fields) {
  json j = json::object();
  for (const auto& fd : fields) j[fd.name] = fd.get(s);
  return j;
}

// "model, parallel, ..." for messages, from kRunConfigSections.
const std::string kSections = [] {
  std::string t;
  for (const char* sec : kRunConfigSections) t += (t.empty() ? "" : ", ") + std::string(sec);
  return t;
}();

std::string num(int64_t v) { return std::to_string(v); }

// Returns the size of a file in bytes, or -1.
int64_t file_size(const std::string& p) {
  std::error_code ec;
  auto s = fs::file_size(p, ec);
  return ec ? -1 : static_cast<int64_t>(s);
}

}  // namespace

// ---------------------------------------------------------------------------------

int64_t ModelConfig::num_parameters() const {
  const int64_t d = hidden_size, dh = head_dim();
  int64_t attn = d * num_attention_heads * dh * 2 + d * num_key_value_heads * dh * 2;
  if (qkv_bias()) attn += (num_attention_heads + 2 * num_key_value_heads) * dh;
  if (o_bias()) attn += d;
  if (qk_norm()) attn += 2 * dh;
  const int64_t mlp = 3 * d * intermediate_size;
  const int64_t layer = attn + mlp + 2 * d;
  int64_t n = vocab_size * d + num_hidden_layers * layer + d;
  if (!tie_word_embeddings) n += vocab_size * d;
  return n;
}

std::vector<ModelConfig::Parameter> ModelConfig::parameters() const {
  const int64_t d = hidden_size, dh = head_dim(), ff = intermediate_size;
  const int64_t nq = num_attention_heads * dh, nkv = num_key_value_heads * dh;
  std::vector<Parameter> out;
  auto add = [&](std::string name, std::vector<int64_t> shape) { out.push_back({std::move(name), std::move(shape)}); };
  add("model.embed_tokens.weight", {vocab_size, d});
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // q, k, v, o (with their biases), Qwen3's q_norm and k_norm after them.
    add(p + "self_attn.q_proj.weight", {nq, d});
    if (qkv_bias()) add(p + "self_attn.q_proj.bias", {nq});
    add(p + "self_attn.k_proj.weight", {nkv, d});
    if (qkv_bias()) add(p + "self_attn.k_proj.bias", {nkv});
    add(p + "self_attn.v_proj.weight", {nkv, d});
    if (qkv_bias()) add(p + "self_attn.v_proj.bias", {nkv});
    add(p + "self_attn.o_proj.weight", {d, nq});
    if (o_bias()) add(p + "self_attn.o_proj.bias", {d});
    if (qk_norm()) {
      add(p + "self_attn.q_norm.weight", {dh});
      add(p + "self_attn.k_norm.weight", {dh});
    }
    add(p + "mlp.gate_proj.weight", {ff, d});
    add(p + "mlp.up_proj.weight", {ff, d});
    add(p + "mlp.down_proj.weight", {d, ff});
    add(p + "input_layernorm.weight", {d});
    add(p + "post_attention_layernorm.weight", {d});
  }
  add("model.norm.weight", {d});
  if (!tie_word_embeddings) add("lm_head.weight", {vocab_size, d});
  return out;
}

json RunConfig::to_json() const {
  json j;
  if (!name.empty()) j["name"] = name;
  if (!description.empty()) j["description"] = description;
  j["model"] = write_section(model, model_fields());
  j["parallel"] = write_section(parallel, parallel_fields());
  j["train"] = write_section(train, train_fields());
  j["data"] = write_section(data, data_fields());
  j["profile"] = write_section(profile, profile_fields());
  j["faults"] = write_section(faults, faults_fields());
  return j;
}

RunConfig RunConfig::from_json(const json& j) {
  if (!j.is_object()) throw ConfigError("a run config must be a JSON object with sections " + kSections);
  RunConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "model")
      read_section(c.model, it.value(), k, model_fields());
    else if (k == "parallel")
      read_section(c.parallel, it.value(), k, parallel_fields());
    else if (k == "train")
      read_section(c.train, it.value(), k, train_fields());
    else if (k == "data")
      read_section(c.data, it.value(), k, data_fields());
    else if (k == "profile")
      read_section(c.profile, it.value(), k, profile_fields());
    else if (k == "faults")
      read_section(c.faults, it.value(), k, faults_fields());
    else if (k == "name" || k == "description") {
      if (!it.value().is_string()) throw ConfigError(k + " must be a string");
      if (!valid_utf8(it.value().get_ref<const std::string&>())) throw ConfigError(k + " is not valid UTF-8");
      (k == "name" ? c.name : c.description) = it.value().get<std::string>();
    } else
      throw ConfigError("unknown config section '" + k + "' (valid: " + kSections + ", name, description)");
  }
  return c;
}

std::string regular_file_problem(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "no such file" : std::string(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return "it is a directory, not a file";
  if (!S_ISREG(st.st_mode))
    return std::string("it is not a regular file (") +
           (S_ISFIFO(st.st_mode)   ? "a FIFO"
            : S_ISCHR(st.st_mode)  ? "a character device"
            : S_ISBLK(st.st_mode)  ? "a block device"
            : S_ISSOCK(st.st_mode) ? "a socket"
                                   : "special") +
           "); only regular files are read";
  if (max_bytes >= 0 && st.st_size > max_bytes)
    return std::to_string(st.st_size) + " bytes is more than the limit of " + std::to_string(max_bytes) + " bytes";
  return {};
}

json load_json_file(const std::string& path) {
  // stat first: a FIFO would block forever, /dev/zero would read until memory runs out.
  const std::string why = regular_file_problem(path, kMaxJsonFileBytes);
  if (!why.empty()) throw ConfigError("cannot read " + path + ": " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open " + path + ": " + std::strerror(errno));
  std::string text;
  std::error_code ec;
  const auto expected = fs::file_size(path, ec);
  // One byte more than stat said, so that a file growing past the limit is noticed.
  text.resize(
      static_cast<size_t>(std::min<uintmax_t>(ec ? 0 : expected, static_cast<uintmax_t>(kMaxJsonFileBytes)) + 1));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw ConfigError("cannot read " + path + ": I/O error");
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxJsonFileBytes)
    throw ConfigError("cannot read " + path + ": more than " + std::to_string(kMaxJsonFileBytes) + " bytes");
  try {
    return parse_checked_json(text);
  } catch (const JsonShapeError& e) {
    throw ConfigError(path + " " + e.what());
  } catch (const json::out_of_range& e) {  // e.g. 1e999: beyond a double
    throw ConfigError(path + " holds a number out of range: " + e.what());
  } catch (const json::exception& e) {
    throw ConfigError(path + " is not valid JSON: " + e.what());
  }
}

void apply_override(json& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set expects key=value with a dotted key such as parallel.sp_size=4, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string raw = assignment.substr(eq + 1);
  json value;
  try {
    value = parse_checked_json(raw);
  } catch (const JsonShapeError& e) {
    throw ConfigError("--set " + key + ": the value " + e.what());
  } catch (const json::out_of_range& e) {  // 1e999: a number, but not one a double holds
    throw ConfigError("--set " + key + ": " + show(json(raw)) + " is out of range (beyond a 64-bit double)");
  } catch (const json::exception&) {
    value = raw;  // plain string
  }
  auto dot = key.find('.');
  if (dot == std::string::npos || key.find('.', dot + 1) != std::string::npos)
    throw ConfigError("--set key '" + key + "' must be section.key, e.g. train.steps (sections: " + kSections + ")");
  const std::string section = key.substr(0, dot);
  const std::string field = key.substr(dot + 1);
  // Validate the key against the tables by round-tripping through from_json.
  json probe = json::object();
  probe[section] = json::object();
  probe[section][field] = value;
  try {
    RunConfig::from_json(probe);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--set ") + assignment + ": " + e.what());
  }
  if (!config.contains(section)) config[section] = json::object();
  // An HF alias overrides the key of our name (and removes the alias, so both never clash).
  const std::string ours = canonical_key(key).substr(section.size() + 1);
  if (ours != field && config[section].is_object()) {
    config[section].erase(field);
    config[section][ours] = value;
    return;
  }
  if (config[section].is_object())
    for (const auto& [alias, o] : key_aliases())
      if (o == key) config[section].erase(alias.substr(section.size() + 1));
  config[section][field] = value;
}

// ---- Hugging Face config.json (Transformers v4 and v5 layouts) ----------------------

static std::vector<std::string> kHfInformational = {
    "torch_dtype",       "dtype",           "bos_token_id",     "eos_token_id",         "pad_token_id",
    "initializer_range", "pretraining_tp",  "use_cache",        "transformers_version", "attention_dropout",
    "_name_or_path",     "tokenizer_class", "max_window_layers"};

namespace {

struct Family {
  const char* arch;
  const char* model_type;
};
constexpr Family kFamilies[] = {{"LlamaForCausalLM", "llama"},
                                {"MistralForCausalLM", "mistral"},
                                {"Qwen2ForCausalLM", "qwen2"},
                                {"Qwen3ForCausalLM", "qwen3"}};
const char* kFamilyList = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

const char* arch_of(const std::string& model_type) {
  for (const auto& f : kFamilies)
    if (model_type == f.model_type) return f.arch;
  return nullptr;
}

// One RoPE dictionary (v4 rope_scaling or v5 rope_parameters) into m's rope_* fields.
// `where` names the key for messages. rope_theta inside it (v5) sets m.rope_theta.
void read_rope_dict(const json& r, const std::string& where, ModelConfig& m) {
  if (!r.is_object()) throw ConfigError("config.json: " + where + " must be an object or null, got " + show(r));
  std::string type;
  if (r.contains("rope_type") && !r["rope_type"].is_null())
    type = r["rope_type"].is_string() ? r["rope_type"].get<std::string>() : "?";
  else if (r.contains("type") && !r["type"].is_null())
    type = r["type"].is_string() ? r["type"].get<std::string>() : "?";  // v4 legacy key
  else if (r.contains("full_attention") || r.contains("sliding_attention"))
    throw ConfigError("config.json: " + where + " per layer type (" + show(r) +
                      ") is not supported (one RoPE for all layers only)");
  else
    type = "default";
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn")
    throw ConfigError(
        "config.json: " + where + " rope_type '" + type +
        "' is not supported (supported: default, linear, llama3, yarn; dynamic, longrope and others are refused)");
  m.rope_type = type;
  auto number = [&](const std::string& k) {
    const json& v = r[k];
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw ConfigError("config.json: " + where + "." + k + " must be a number, got " + show(v));
    return v.get<double>();
  };
  std::vector<std::string> allowed = {"rope_type", "type", "rope_theta"};
  if (type == "linear") allowed.insert(allowed.end(), {"factor"});
  if (type == "llama3")
    allowed.insert(allowed.end(),
                   {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (type == "yarn")
    allowed.insert(allowed.end(), {"factor", "attention_factor", "beta_fast", "beta_slow",
                                   "original_max_position_embeddings", "truncate", "mscale", "mscale_all_dim"});
  for (auto it = r.begin(); it != r.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      throw ConfigError("config.json: " + where + "." + k + " is not supported with rope_type " + type);
    if (k == "rope_type" || k == "type") continue;
    const json& v = it.value();
    if (v.is_null()) continue;  // HF treats a null optional as absent (".get(k) or default")
    if (k == "rope_theta")
      m.rope_theta = number(k);
    else if (k == "factor")
      m.rope_factor = number(k);
    else if (k == "low_freq_factor")
      m.rope_low_freq_factor = number(k);
    else if (k == "high_freq_factor")
      m.rope_high_freq_factor = number(k);
    else if (k == "beta_fast")
      m.rope_beta_fast = number(k);
    else if (k == "beta_slow")
      m.rope_beta_slow = number(k);
    else if (k == "attention_factor")
      m.rope_attention_factor = number(k);
    else if (k == "original_max_position_embeddings") {
      const double x = number(k);
      if (x != std::trunc(x) || x < 1 || x > static_cast<double>(kMaxTokens))
        throw ConfigError("config.json: " + where +
                          ".original_max_position_embeddings must be a positive integer, got " + show(v));
      m.rope_original_max_position_embeddings = static_cast<int64_t>(x);
    } else if (k == "truncate") {
      if (!v.is_boolean()) throw ConfigError("config.json: " + where + ".truncate must be true or false");
      m.rope_truncate = v.get<bool>();
    } else if (k == "mscale" || k == "mscale_all_dim") {
      throw ConfigError("config.json: " + where + "." + k + " (DeepSeek-style yarn attention factor) is not supported");
    }
  }
  if (type != "default" && !(r.contains("factor") && !r["factor"].is_null()))
    throw ConfigError("config.json: " + where + " of rope_type " + type + " needs a factor");
  if (type == "llama3")
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!r.contains(k) || r[k].is_null())
        throw ConfigError("config.json: " + where + " of rope_type llama3 needs " + k);
}

}  // namespace

ModelConfig model_from_hf_config(const json& hf) {
  if (!hf.is_object()) throw ConfigError("config.json must be a JSON object");
  ModelConfig m;
  // Family: architectures[0] and model_type must name the same supported family.
  std::string arch_type, model_type;
  if (hf.contains("architectures") && !hf["architectures"].is_null()) {
    const json& a = hf["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      throw ConfigError("config.json: architectures must be a list of one name, got " + show(a));
    const std::string name = a[0].get<std::string>();
    for (const auto& f : kFamilies)
      if (name == f.arch) arch_type = f.model_type;
    if (arch_type.empty())
      throw ConfigError("config.json: architecture " + name + " is not supported (supported: " + kFamilyList + ")");
  }
  if (hf.contains("model_type") && !hf["model_type"].is_null()) {
    if (!hf["model_type"].is_string()) throw ConfigError("config.json: model_type must be a string");
    model_type = hf["model_type"].get<std::string>();
    if (!arch_of(model_type))
      throw ConfigError("config.json: model_type '" + model_type +
                        "' is not supported (supported: llama, mistral, qwen2, qwen3)");
  }
  if (!arch_type.empty() && !model_type.empty() && arch_type != model_type)
    throw ConfigError("config.json: architectures names " + std::string(arch_of(arch_type)) + " but model_type is '" +
                      model_type + "'");
  m.model_type = !model_type.empty() ? model_type : !arch_type.empty() ? arch_type : "llama";
  const bool qwen = m.model_type == "qwen2" || m.model_type == "qwen3";

  json ours = json::object();
  bool kv_given = false;
  const json* rope_scaling = nullptr;
  const json* rope_parameters = nullptr;
  for (auto it = hf.begin(); it != hf.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "architectures" || k == "model_type") continue;
    // The checkpoint's dtype is informational (the tensors carry theirs), but a value no
    // Transformers writes (5, "int8", "torch.float16") is a damaged or hand-made file.
    if ((k == "torch_dtype" || k == "dtype") && !v.is_null() &&
        !(v.is_string() && (v == "float32" || v == "float16" || v == "bfloat16" || v == "float64")))
      throw ConfigError("config.json: " + k + " " + show(v) +
                        " is not a dtype Transformers writes (float32, float16, bfloat16, float64)");
    if (std::find(kHfInformational.begin(), kHfInformational.end(), k) != kHfInformational.end()) continue;
    if (k == "hidden_act") {
      if (v != "silu") throw ConfigError("config.json: hidden_act " + show(v) + " is not supported (only silu)");
      continue;
    }
    if (k == "mlp_bias") {
      if (!v.is_boolean() && !v.is_null())
        throw ConfigError("config.json: mlp_bias must be true or false, got " + show(v));
      if (v.is_boolean() && v.get<bool>())
        throw ConfigError("config.json: mlp_bias=true is not supported (no MLP biases)");
      continue;
    }
    if (k == "attention_bias") {
      if (!v.is_boolean()) throw ConfigError("config.json: attention_bias must be true or false");
      if (v.get<bool>() && (m.model_type == "mistral" || m.model_type == "qwen2"))
        throw ConfigError(
            "config.json: attention_bias=true is not part of " + std::string(arch_of(m.model_type)) +
            (m.model_type == "qwen2" ? " (it always has q/k/v biases and no o bias)" : " (it has no biases)"));
      m.attention_bias = v.get<bool>();
      continue;
    }
    if (k == "rope_scaling") {
      rope_scaling = &v;
      continue;
    }
    if (k == "rope_parameters") {
      rope_parameters = &v;
      continue;
    }
    if (k == "partial_rotary_factor") {
      if (!(v.is_number() && v.get<double>() == 1.0))
        throw ConfigError("config.json: partial_rotary_factor " + show(v) + " is not supported (only 1.0)");
      continue;
    }
    if (k == "sliding_window") {
      // Qwen configs carry a window that only applies with use_sliding_window=true.
      if (!v.is_null() && !qwen)
        throw ConfigError("config.json: sliding_window=" + show(v) +
                          " is not supported (full causal attention only); set it to null");
      continue;
    }
    if (k == "use_sliding_window") {
      if (!(v.is_boolean() && !v.get<bool>()))
        throw ConfigError("config.json: use_sliding_window=" + show(v) +
                          " is not supported (full causal attention only)");
      continue;
    }
    if (k == "layer_types") {
      if (!v.is_array()) throw ConfigError("config.json: layer_types must be a list");
      for (const auto& lt : v)
        if (lt != "full_attention")
          throw ConfigError("config.json: layer_types entry " + show(lt) + " is not supported (only full_attention)");
      continue;
    }
    if (k == "head_dim") {
      if (v.is_null()) continue;
      ours["head_dim"] = v;  // checked against hidden_size below
      continue;
    }
    if (k == "num_key_value_heads") kv_given = !v.is_null();
    // null: num_key_value_heads means "as many as the query heads" (above); for any other key
    // there is no Hugging Face default to fall back on that this reader could be sure of (ours
    // differ: vocab_size 256, not 32000), so a null there is refused rather than guessed.
    if (v.is_null() && k != "num_key_value_heads") throw ConfigError("config.json: " + k + " is null; give it a value");
    if (v.is_null()) continue;
    if (k.rfind("rope_", 0) == 0 && k != "rope_theta")
      throw ConfigError("config.json: " + k +
                        " is not a Hugging Face key (RoPE settings go in rope_scaling or rope_parameters)");
    if (k == "model_type" || k == "attention_bias") continue;
    ours[k] = v;
  }
  // Transformers' default for the four families, not the demo's 1e-5.
  if (!ours.contains("rms_norm_eps")) ours["rms_norm_eps"] = 1e-6;
  // A key the file leaves out means the family's Transformers default, not the demo's (a
  // pure-Python reference of each family's math found these read otherwise):
  // max_position_embeddings (yarn without original_max_position_embeddings scales by it: 4096
  // was read for every family), Qwen3's head_dim (128: its checkpoints were refused), and
  // num_key_value_heads when absent (Mistral and Qwen3 8, Qwen2 32; null or a Llama: as many as
  // the query heads).
  const bool mistral = m.model_type == "mistral";
  if (!hf.contains("max_position_embeddings")) ours["max_position_embeddings"] = mistral ? 131072 : qwen ? 32768 : 2048;
  if (m.model_type == "qwen3" && !hf.contains("head_dim")) ours["head_dim"] = 128;
  // Mistral's sliding_window defaults to a 4096-token window, which this engine does not have:
  // absent is refused like an explicit 4096 (it ran full attention, a different model past 4096
  // tokens).
  if (mistral && !hf.contains("sliding_window"))
    throw ConfigError(
        "config.json: no sliding_window key: Transformers' Mistral then uses a 4096-token sliding window, which is "
        "not supported (full causal attention only); set \"sliding_window\": null if the model uses full attention");
  read_section(m, ours, "model", model_fields());
  if (!kv_given)
    m.num_key_value_heads = hf.contains("num_key_value_heads") || m.model_type == "llama" ? m.num_attention_heads
                            : m.model_type == "qwen2"                                     ? 32
                                                                                          : 8;
  // head_dim equal to hidden_size / heads is the implicit one (kept 0, so configs compare equal).
  if (m.explicit_head_dim > 0 && m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads == 0 &&
      m.explicit_head_dim == m.hidden_size / m.num_attention_heads)
    m.explicit_head_dim = 0;
  // v5 rope_parameters (rope_theta inside) wins over v4 rope_scaling; both set must agree.
  ModelConfig from_params = m, from_scaling = m;
  const bool has_params = rope_parameters && !rope_parameters->is_null();
  const bool has_scaling = rope_scaling && !rope_scaling->is_null();
  if (has_params) read_rope_dict(*rope_parameters, "rope_parameters", from_params);
  if (has_scaling) read_rope_dict(*rope_scaling, "rope_scaling", from_scaling);
  // Both layouts present: Transformers v4 reads rope_theta and rope_scaling (null: no scaling),
  // v5 rope_parameters; they must build the same model (a top-level rope_theta 10000 beside
  // rope_parameters' 500000, or rope_scaling null beside a yarn rope_parameters, was read as v5
  // says, silently, while v4 builds the other model).
  if (has_params && ours.contains("rope_theta") && m.rope_theta != from_params.rope_theta)
    throw ConfigError("config.json: rope_theta " + show(ours["rope_theta"]) + " (Transformers v4's key) and " +
                      "rope_parameters' rope_theta " + show(json(from_params.rope_theta)) +
                      " (v5's) disagree; keep one layout");
  if (has_params && rope_scaling) {
    from_scaling.rope_theta = from_params.rope_theta;
    if (write_section(from_params, model_fields()) != write_section(from_scaling, model_fields()))
      throw ConfigError("config.json: rope_scaling " + show(*rope_scaling) + " and rope_parameters " +
                        show(*rope_parameters) + " disagree; keep one");
  }
  m = has_params ? from_params : from_scaling;
  return m;
}

json model_to_hf_config(const ModelConfig& m, const std::string& torch_dtype) {
  // Transformers v4 layout (rope_theta + rope_scaling), which v5 also reads.
  json j = write_section(m, model_fields());
  for (const char* k : {"model_type", "head_dim", "attention_bias", "rope_type", "rope_factor", "rope_low_freq_factor",
                        "rope_high_freq_factor", "rope_original_max_position_embeddings", "rope_beta_fast",
                        "rope_beta_slow", "rope_attention_factor", "rope_truncate", "rope_precision"})
    j.erase(k);
  const char* arch = arch_of(m.model_type);
  j["architectures"] = json::array({arch ? arch : "LlamaForCausalLM"});
  j["model_type"] = m.model_type;
  j["hidden_act"] = "silu";
  if (m.model_type == "llama" || m.model_type == "qwen3") j["attention_bias"] = m.attention_bias;
  if (m.model_type == "llama") {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (m.model_type == "mistral" || m.model_type == "qwen2" || m.model_type == "qwen3") j["sliding_window"] = nullptr;
  if (m.model_type == "qwen2" || m.model_type == "qwen3") j["use_sliding_window"] = false;
  j["attention_dropout"] = 0.0;
  if (m.rope_type == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    json r = {{"rope_type", m.rope_type}, {"factor", m.rope_factor}};
    if (m.rope_type == "llama3") {
      r["low_freq_factor"] = m.rope_low_freq_factor;
      r["high_freq_factor"] = m.rope_high_freq_factor;
      r["original_max_position_embeddings"] = m.rope_original_max_position_embeddings;
    }
    if (m.rope_type == "yarn") {
      r["beta_fast"] = m.rope_beta_fast;
      r["beta_slow"] = m.rope_beta_slow;
      if (m.rope_attention_factor > 0) r["attention_factor"] = m.rope_attention_factor;
      if (m.rope_original_max_position_embeddings > 0)
        r["original_max_position_embeddings"] = m.rope_original_max_position_embeddings;
      if (!m.rope_truncate) r["truncate"] = false;
    }
    j["rope_scaling"] = r;
  }
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["head_dim"] = m.head_dim();
  j["torch_dtype"] = torch_dtype;
  return j;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = load_json_file(path);
  if (!j.is_object()) throw ConfigError(path + ": a run config must be a JSON object");
  for (const auto& o : overrides) apply_override(j, o);
  return run_config_from_json(j);
}

RunConfig run_config_from_json(const json& j) {
  RunConfig c = RunConfig::from_json(j);
  if (!c.train.init_from.empty()) {
    const std::string cj = (fs::path(c.train.init_from) / "config.json").string();
    std::error_code ec;
    if (fs::exists(c.train.init_from, ec) && !fs::is_directory(c.train.init_from, ec))
      throw ConfigError("train.init_from: " + c.train.init_from +
                        " is a file, not a folder (give the Hugging Face checkpoint folder holding config.json and "
                        "model.safetensors)");
    if (!fs::exists(cj, ec))
      throw ConfigError(
          "train.init_from: " + cj +
          " not found (expected a Hugging Face checkpoint directory with config.json and model.safetensors)");
    ModelConfig hf;
    try {
      const json hj = load_json_file(cj);
      // A checkpoint's sizes have no default worth guessing: ours (the 2-layer demo's) read a
      // 4-layer checkpoint lacking num_hidden_layers as a 2-layer model, silently, and
      // Transformers would take 32.
      for (const char* k :
           {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
        if (hj.is_object() && !hj.contains(k))
          throw ConfigError(cj + " lacks " + k +
                            " (a model size this reader does not guess: Transformers' default is another model's); "
                            "add it");
      hf = model_from_hf_config(hj);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("train.init_from: ") + e.what());
    }
    // Keys the user set explicitly must agree with the checkpoint.
    if (j.contains("model")) {
      json mine = write_section(c.model, model_fields());
      json theirs = write_section(hf, model_fields());
      for (auto it = j["model"].begin(); it != j["model"].end(); ++it) {
        if (it.key() == "rope_precision") continue;  // ours, not the checkpoint's (docs/NUMERICS.md)
        if (mine[it.key()] != theirs[it.key()])
          throw ConfigError("model." + it.key() + " = " + mine[it.key()].dump() + " differs from " + cj + " (" +
                            theirs[it.key()].dump() + "); remove it from the config or use a matching checkpoint");
      }
    }
    hf.rope_precision = c.model.rope_precision;
    c.model = hf;
  }
  return c;
}

// Family and RoPE rules of the model section (issue 14); formulas in docs/CONTRACTS.md.
static void validate_model_family(const ModelConfig& m,
                                  const std::function<void(const std::string&, const std::string&)>& bad) {
  // Choices from the field table (config_fields.cpp).
  auto one_of = [&](const std::string& field, const std::string& v) {
    const ConfigField* f = find_config_field(field);
    if (std::find(f->choices.begin(), f->choices.end(), v) != f->choices.end()) return true;
    bad(field, field + " must be " + choice_list(*f) + ", got '" + v + "'");
    return false;
  };
  if (one_of("model.model_type", m.model_type) && m.attention_bias &&
      (m.model_type == "mistral" || m.model_type == "qwen2"))
    bad("model.attention_bias",
        "model.attention_bias must be false for " + m.model_type +
            (m.model_type == "qwen2" ? " (it always has q/k/v biases and no o bias)" : " (it has no biases)"));
  one_of("model.rope_precision", m.rope_precision);
  const std::string& t = m.rope_type;
  if (!one_of("model.rope_type", t)) return;
  auto finite = [](double x) { return std::isfinite(x); };
  if (t != "default" && !(finite(m.rope_factor) && m.rope_factor >= 1 && m.rope_factor <= 1e6))
    bad("model.rope_factor", "model.rope_factor must be between 1 and 1e6 for rope_type " + t);
  if (m.rope_original_max_position_embeddings < 0 || m.rope_original_max_position_embeddings > kMaxTokens)
    bad("model.rope_original_max_position_embeddings",
        "model.rope_original_max_position_embeddings must be >= 0 and at most " + num(kMaxTokens));
  if (t == "llama3") {
    if (m.rope_original_max_position_embeddings < 1)
      bad("model.rope_original_max_position_embeddings",
          "rope_type llama3 needs model.rope_original_max_position_embeddings (e.g. 8192)");
    if (!(finite(m.rope_low_freq_factor) && finite(m.rope_high_freq_factor) && m.rope_low_freq_factor > 0 &&
          m.rope_high_freq_factor > m.rope_low_freq_factor))
      bad("model.rope_high_freq_factor",
          "rope_type llama3 needs 0 < model.rope_low_freq_factor < model.rope_high_freq_factor");
  }
  if (t == "yarn") {
    if (!(finite(m.rope_beta_fast) && finite(m.rope_beta_slow) && m.rope_beta_fast > 0 && m.rope_beta_slow > 0))
      bad("model.rope_beta_fast", "rope_type yarn needs positive model.rope_beta_fast and model.rope_beta_slow");
    if (!(finite(m.rope_attention_factor) && m.rope_attention_factor >= 0 && m.rope_attention_factor <= 100))
      bad("model.rope_attention_factor",
          "model.rope_attention_factor must be between 0 and 100 (0 = Hugging Face's default 0.1 ln(factor) + 1, "
          "about 1.07 for factor 2)");
    // Transformers versions disagree on yarn's factor when original_max_position_embeddings is
    // set (some replace factor by max_position_embeddings / original): accept only configs on
    // which they agree.
    const int64_t orig = m.rope_original_max_position_embeddings;
    if (orig > 0 &&
        std::fabs(static_cast<double>(m.max_position_embeddings) - m.rope_factor * static_cast<double>(orig)) > 1e-6) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", m.rope_factor);
      bad("model.max_position_embeddings",
          "rope_type yarn with original_max_position_embeddings " + num(orig) + " and factor " + buf +
              " needs model.max_position_embeddings = factor x original = " +
              num(static_cast<int64_t>(std::llround(m.rope_factor * static_cast<double>(orig)))) + " (got " +
              num(m.max_position_embeddings) + "; Transformers versions compute different frequencies otherwise)");
    }
  }
}

std::vector<ConfigIssue> validate(const RunConfig& c) {
  std::vector<ConfigIssue> out;
  auto bad = [&](const std::string& field, const std::string& msg) { out.push_back({field, msg}); };
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.train;

  // Every integer has a range: without an upper bound, num_hidden_layers=1e9 builds a model
  // until memory runs out and products such as sp_size x dp_size overflow int64.
  auto in_range = [&](const std::string& field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      bad(field, field + " must be " +
                     (lo == 1   ? std::string("positive")
                      : lo == 0 ? std::string(">= 0")
                                : ">= " + num(lo)) +
                     " and at most " + num(hi) + ", got " + num(v));
      return false;
    }
    return true;
  };
  // Integer range and choices from the field table (config_fields.cpp), one source for the form too.
  auto ranged = [&](const std::string& field, int64_t v) {
    const ConfigField* f = find_config_field(field);
    return in_range(field, v, f->min.value_or(INT64_MIN), f->max.value_or(INT64_MAX));
  };
  auto one_of = [&](const std::string& field, const std::string& v) {
    const ConfigField* f = find_config_field(field);
    if (std::find(f->choices.begin(), f->choices.end(), v) != f->choices.end()) return true;
    bad(field, field + " must be " + choice_list(*f) + ", got '" + v + "'");
    return false;
  };
  // Every check runs (all problems are reported), in this order (the order of the messages).
  bool ok_model = ranged("model.vocab_size", m.vocab_size);
  ok_model &= ranged("model.hidden_size", m.hidden_size);
  ok_model &= ranged("model.intermediate_size", m.intermediate_size);
  ok_model &= ranged("model.num_hidden_layers", m.num_hidden_layers);
  ok_model &= ranged("model.num_attention_heads", m.num_attention_heads);
  ok_model &= ranged("model.num_key_value_heads", m.num_key_value_heads);
  ok_model &= ranged("model.max_position_embeddings", m.max_position_embeddings);
  bool ok_par = ranged("parallel.sp_size", p.sp_size);
  ok_par &= ranged("parallel.dp_size", p.dp_size);
  ok_par &= ranged("parallel.head_chunks", p.head_chunks);
  ok_par &= ranged("parallel.ring_size", p.ring_size);
  bool ok_train = ranged("train.seq_length", t.seq_length);
  ok_train &= ranged("train.micro_batch_size", t.micro_batch_size);
  ranged("train.steps", t.steps);
  ranged("train.warmup_steps", t.warmup_steps);
  auto finite = [&](const std::string& field, double v) {
    if (!std::isfinite(v)) bad(field, field + " must be a finite number");
    return std::isfinite(v);
  };
  // At most 10: no AdamW run trains above it, and 1e300 (finite, so accepted) turned the weights
  // into inf at the first update, a NaN loss after launch.
  const bool lr_ok = finite("train.lr", t.lr) && t.lr > 0 && t.lr <= kMaxLr;
  if (std::isfinite(t.lr) && !lr_ok)
    bad("train.lr", "train.lr must be positive and at most " + show_double(kMaxLr) + ", got " + show_double(t.lr));
  if (finite("train.min_lr", t.min_lr) && (t.min_lr < 0 || t.min_lr > t.lr))
    bad("train.min_lr", "train.min_lr must be between 0 and train.lr");
  // AdamW multiplies every weight by 1 - lr x weight_decay each step: at 1 and above it zeroes or
  // flips the weights (1e300 was accepted and gave a NaN loss after launch).
  if (finite("train.weight_decay", t.weight_decay) && t.weight_decay < 0)
    bad("train.weight_decay", "train.weight_decay must be >= 0");
  else if (lr_ok && std::isfinite(t.weight_decay) && !(t.lr * t.weight_decay < 1))
    bad("train.weight_decay",
        "train.lr x train.weight_decay must be below 1 (AdamW scales every weight by 1 - lr x "
        "weight_decay each step), got " +
            show_double(t.lr) + " x " + show_double(t.weight_decay));
  if (finite("train.grad_clip", t.grad_clip) && t.grad_clip < 0)
    bad("train.grad_clip", "train.grad_clip must be >= 0 (0 disables clipping)");
  ranged("train.threads_per_rank", t.threads_per_rank);
  ranged("train.gradient_accumulation_steps", t.gradient_accumulation_steps);
  if (finite("train.adam_beta1", t.adam_beta1) && !(t.adam_beta1 >= 0 && t.adam_beta1 < 1))
    bad("train.adam_beta1", "train.adam_beta1 must be in [0, 1)");
  if (finite("train.adam_beta2", t.adam_beta2) && !(t.adam_beta2 >= 0 && t.adam_beta2 < 1))
    bad("train.adam_beta2", "train.adam_beta2 must be in [0, 1)");
  if (finite("train.adam_epsilon", t.adam_epsilon) && !(t.adam_epsilon > 0 && t.adam_epsilon <= 1))
    bad("train.adam_epsilon", "train.adam_epsilon must be positive and at most 1");
  one_of("train.lr_scheduler_type", t.lr_scheduler_type);
  ranged("train.save_shard_bytes", t.save_shard_bytes);
  if (finite("model.rms_norm_eps", m.rms_norm_eps) && !(m.rms_norm_eps > 0 && m.rms_norm_eps <= 1))
    bad("model.rms_norm_eps", "model.rms_norm_eps must be positive and at most 1");
  // At least 1: below it RoPE's frequencies theta^(-2i/d) grow past what fp32 holds (1e-50
  // gave a NaN loss at step 0, after launch); real models use 1e4 and more.
  if (finite("model.rope_theta", m.rope_theta) && !(m.rope_theta >= 1 && m.rope_theta <= 1e15))
    bad("model.rope_theta", "model.rope_theta must be between 1 and 1e15 (Llama uses 10000 or 500000)");
  // At least 1 s: with less (0.001 was accepted) the launcher's liveness check declared a
  // healthy rank dead after launch and c10d timed out before the ranks had met.
  if (finite("parallel.timeout_s", p.timeout_s) && !(p.timeout_s >= kMinTimeoutS && p.timeout_s <= kMaxTimeoutS)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", p.timeout_s);
    bad("parallel.timeout_s", std::string("parallel.timeout_s must be at least 1 s and at most ") +
                                  num(static_cast<int64_t>(kMaxTimeoutS)) + " (7 days), got " + buf);
  }
  if (ok_par && p.world_size() > kMaxWorld)
    bad("parallel.sp_size", (p.ring_size > 1 ? "sp_size x ring_size x dp_size = " : "sp_size x dp_size = ") +
                                num(p.world_size()) + " ranks is more than " + num(kMaxWorld));
  // Byte counts of the step, in checked 64-bit arithmetic: the cost model and the engine
  // multiply these sizes, and a product past 2^63 wraps to nonsense (negative sizes).
  if (ok_model && ok_par && ok_train) {
    auto mul = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); };
    auto add = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); };
    const int64_t b = t.micro_batch_size, N = t.seq_length, d = m.hidden_size, f = m.intermediate_size,
                  L = m.num_hidden_layers;
    const int64_t V = m.vocab_size, H = m.num_attention_heads;
    int64_t per_token = 0, act = 0, logits = 0, scores = 0, tokens = 0, x = 0;
    // activations ~ b*N*(L*(12d + 3f) + d)*4 bytes; logits b*N*V*8; math attention 2*b*H*N^2*L*4
    const bool fits =
        mul(d, 12, &x) && mul(f, 3, &per_token) && add(x, per_token, &per_token) && mul(per_token, L, &per_token) &&
        add(per_token, d, &per_token) && mul(b, N, &tokens) && mul(tokens, per_token, &act) && mul(act, 4, &act) &&
        mul(tokens, V, &logits) && mul(logits, 8, &logits) && add(act, logits, &x) && mul(tokens, p.dp_size, &x) &&
        // N x N scores only where attention may materialize them (not on cuda: flash)
        (t.device == "cuda" || (mul(tokens, N, &scores) && mul(scores, H, &scores) && mul(scores, L, &scores) &&
                                mul(scores, 8, &scores) && add(act + logits, scores, &x)));
    if (!fits)
      bad("train.seq_length",
          "train.seq_length (" + num(N) + ") x train.micro_batch_size (" + num(b) +
              ") with this model needs more than 2^63 bytes for one step's activations; reduce them");
  }

  ok_model &= ranged("model.head_dim", m.explicit_head_dim);
  if (ok_model) {
    if (m.explicit_head_dim > 0) {
      if (m.head_dim() % 2 != 0)
        bad("model.head_dim", "model.head_dim (" + num(m.head_dim()) + ") must be even for RoPE");
    } else if (m.hidden_size % m.num_attention_heads != 0)
      bad("model.hidden_size", "model.hidden_size (" + num(m.hidden_size) +
                                   ") must be divisible by model.num_attention_heads (" + num(m.num_attention_heads) +
                                   "), or set model.head_dim");
    else if (m.head_dim() % 2 != 0)
      bad("model.hidden_size",
          "head dimension hidden_size/num_attention_heads (" + num(m.head_dim()) + ") must be even for RoPE");
    for (auto& i : ulysses_geometry(m.num_attention_heads, m.num_key_value_heads, 1, 1).issues)
      out.push_back(i);  // GQA groups
  }
  if (ok_model && ok_par && ok_train) {
    // Heads over ranks, kv replication, head chunks: the rules of ulysses_geometry.hpp (the
    // GQA rule, P-independent, was reported above).
    const auto gqa = ulysses_geometry(m.num_attention_heads, m.num_key_value_heads, 1, 1).issues;
    for (auto& i : ulysses_geometry(c).issues)
      if (std::none_of(gqa.begin(), gqa.end(), [&](const ConfigIssue& x) { return x.message == i.message; }))
        out.push_back(i);
    if (p.ring_size > 1) {
      for (auto& i : ring_issues(t.seq_length, p.sp_size, p.ring_size, p.ring_zigzag)) out.push_back(i);
    } else if (t.seq_length > 0 && t.seq_length % p.sp_size != 0)
      bad("train.seq_length", "train.seq_length (" + num(t.seq_length) + ") must be divisible by parallel.sp_size (" +
                                  num(p.sp_size) + "); try " + num((t.seq_length / p.sp_size + 1) * p.sp_size));
  }
  validate_model_family(m, bad);
  if (p.ring_size > 1 && (p.backend == "nccl" || t.device == "cuda"))
    bad("parallel.ring_size", "parallel.ring_size " + num(p.ring_size) +
                                  " runs on Gloo (CPU ranks) only: the ring's send/recv on NCCL is not implemented "
                                  "yet; use train.device=cpu (parallel.backend gloo) or parallel.ring_size=1");
  one_of("parallel.backend", p.backend);
  one_of("train.dtype", t.dtype);
  one_of("train.device", t.device);
  one_of("train.activation_checkpointing", t.activation_checkpointing);
  if (t.offload_activations && t.activation_checkpointing != "layer")
    bad("train.offload_activations",
        "train.offload_activations needs train.activation_checkpointing=layer (only the kept layer inputs are "
        "offloaded)");
  ranged("train.zero_stage", t.zero_stage);
  if (t.offload_optimizer && t.zero_stage < 1)
    bad("train.offload_optimizer",
        "train.offload_optimizer needs train.zero_stage >= 1 (the offloaded AdamW state is each rank's shard)");
  if (t.offload_params && t.zero_stage < 3)
    bad("train.offload_params",
        "train.offload_params needs train.zero_stage 3 (only stage 3 shards the parameters; got " + num(t.zero_stage) +
            ")");
  ranged("train.loss_chunk_tokens", t.loss_chunk_tokens);
  ranged("train.mlp_chunk_tokens", t.mlp_chunk_tokens);
  one_of("train.attention", t.attention);
  ranged("train.attention_block", t.attention_block);
  ranged("train.save_every", t.save_every);
  ranged("train.save_keep", t.save_keep);
  if (t.save_every > 0 && t.save_to.empty())
    bad("train.save_every",
        "train.save_every (" + num(t.save_every) + ") needs train.save_to, the folder the checkpoints go to");
  const auto& d = c.data;
  one_of("data.kind", d.kind);
  if ((d.kind == "text" || d.kind == "tokens") && d.path.empty())
    bad("data.path", "data.kind=" + d.kind + " needs data.path");
  if (d.kind == "text" && m.vocab_size < 256)
    bad("model.vocab_size",
        "model.vocab_size (" + num(m.vocab_size) + ") is too small for byte-level text data, which needs at least 256");
  one_of("data.token_dtype", d.token_dtype);
  if (d.kind == "tokens" && d.token_dtype == "uint16" && m.vocab_size > 65536)
    bad("data.token_dtype", "uint16 tokens cannot address model.vocab_size (" + num(m.vocab_size) + "); use uint32");
  if (c.profile.step_begin < 0 || c.profile.step_begin > kMaxSteps)
    bad("profile.step_begin", "profile.step_begin must be >= 0 and at most " + num(kMaxSteps));
  if (c.profile.step_end < -1 || c.profile.step_end > kMaxSteps)
    bad("profile.step_end", "profile.step_end must be -1 (all) or a step number up to " + num(kMaxSteps));
  else if (c.profile.step_end >= 0 && c.profile.step_end < c.profile.step_begin)
    bad("profile.step_end", "profile.step_end must be -1 (all) or >= profile.step_begin");
  // A window past the last step traced nothing and said nothing (a trace of 0 ranges).
  if (c.profile.enabled && c.profile.step_begin >= 0 && c.train.steps > 0 && c.profile.step_begin >= c.train.steps)
    bad("profile.step_begin", "profile.step_begin (" + num(c.profile.step_begin) + ") is past the last step (" +
                                  num(c.train.steps - 1) + ", train.steps " + num(c.train.steps) +
                                  "): nothing would be traced; lower it or set profile.enabled = false");
  const auto& fl = c.faults;
  // Against the world size only when that is valid (sp_size -2 gave "slow_rank (-1) must be
  // below the world size (-2)", though slow_rank was off).
  if (fl.slow_rank < -1 || (ok_par && fl.slow_rank >= p.world_size()))
    bad("faults.slow_rank", "faults.slow_rank (" + num(fl.slow_rank) +
                                ") must be -1 (off) or a rank below the world size (" + num(p.world_size()) +
                                " = sp_size x dp_size)");
  if (!(fl.delay_ms >= 0 && fl.delay_ms <= kMaxFaultDelayMs))
    bad("faults.delay_ms",
        "faults.delay_ms must be between 0 and " + num(static_cast<int64_t>(kMaxFaultDelayMs)) + " ms");
  else if (fl.slow_rank >= 0 && fl.delay_ms == 0)
    bad("faults.delay_ms",
        "faults.slow_rank is set but faults.delay_ms is 0; give the delay (e.g. 50) or set faults.slow_rank to -1");
  return out;
}

namespace {
std::string identity_of(const struct stat& st, const DataConfig& d, int64_t vocab_size) {
  const int64_t width = d.token_bytes();
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec) + ":" +
         std::to_string(vocab_size) + ":" + std::to_string(width);
}
}  // namespace

std::string tokens_file_identity(const std::string& path, const DataConfig& d, int64_t vocab_size) {
  struct stat st {};
  if (d.kind != "tokens" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return identity_of(st, d, vocab_size);
}

std::string tokens_file_identity(int fd, const DataConfig& d, int64_t vocab_size) {
  struct stat st {};
  if (d.kind != "tokens" || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return identity_of(st, d, vocab_size);
}

std::vector<ConfigIssue> validate_with_files(const RunConfig& c, FileChecks depth) {
  std::vector<ConfigIssue> out = validate(c);
  if (!out.empty()) return out;
  auto bad = [&](const std::string& field, const std::string& msg) { out.push_back({field, msg}); };
  const auto& d = c.data;
  const int64_t need_tokens = c.train.seq_length + 1;
  if (d.kind == "text" || d.kind == "tokens") {
    // Only a regular file: a FIFO would block the launcher and every worker forever.
    const std::string why = regular_file_problem(d.path);
    if (!why.empty()) {
      // A relative path is looked for in the current folder: said, with the folder (an example
      // config run from another folder said only "not found").
      std::error_code ec;
      const std::string where = !d.path.empty() && d.path[0] != '/' && why == "no such file"
                                    ? " (a relative path: looked for in the current folder " +
                                          fs::current_path(ec).string() +
                                          "; run from the folder it is relative to, or "
                                          "give an absolute path)"
                                    : std::string();
      bad("data.path",
          "data file " + d.path + (why == "no such file" ? std::string(" not found") : ": " + why) + where);
      return out;
    }
    const int64_t size = file_size(d.path);
    if (size < 0) {
      bad("data.path", "data file " + d.path + " not found");
      return out;
    }
    // Readable by this user: an unreadable file was found by every worker after launch (and the
    // token-id scan below read nothing from it, silently).
    if (::access(d.path.c_str(), R_OK) != 0) {
      bad("data.path", "data file " + d.path + " cannot be read: " + std::strerror(errno));
      return out;
    }
    const int64_t width = d.kind == "text" ? 1 : (d.token_dtype == "uint16" ? 2 : 4);
    if (size % width != 0)
      bad("data.path",
          d.path + " has " + num(size) + " bytes, not a multiple of " + num(width) + " (" + d.token_dtype + " tokens)");
    const int64_t tokens = size / width;
    if (tokens < need_tokens)
      bad("data.path",
          d.path + " holds " + num(tokens) + " tokens, fewer than train.seq_length + 1 = " + num(need_tokens));
    if (d.kind == "tokens" && out.empty() && depth == FileChecks::Full) {
      std::ifstream in(d.path, std::ios::binary);
      if (!in) {
        bad("data.path", "data file " + d.path + " cannot be read: " + std::strerror(errno));
        return out;
      }
      std::vector<char> buf(1 << 20);
      uint64_t max_id = 0;
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto n = in.gcount();
        for (std::streamsize i = 0; i + width <= n; i += width) {
          uint64_t v = 0;
          for (int b = 0; b < width; ++b) v |= static_cast<uint64_t>(static_cast<unsigned char>(buf[i + b])) << (8 * b);
          max_id = std::max(max_id, v);
        }
      }
      if (static_cast<int64_t>(max_id) >= c.model.vocab_size)
        bad("model.vocab_size", "model.vocab_size (" + num(c.model.vocab_size) + ") is too small for " + d.path +
                                    ", whose largest token id is " + num(static_cast<int64_t>(max_id)));
    }
  }
  for (auto& i : ckpt::resume_issues(c)) out.push_back(std::move(i));  // train.resume_from
  if (!c.train.init_from.empty()) {
    const fs::path dir(c.train.init_from);
    const std::string cj = (dir / "config.json").string();
    const std::string st = (dir / "model.safetensors").string();
    const std::string why = regular_file_problem(st);
    if (!regular_file_problem(cj).empty())  // (load_run_config refuses this first, with the same words)
      bad("train.init_from",
          cj + " not found (expected a Hugging Face checkpoint directory with config.json and model.safetensors)");
    else if (why == "no such file") {
      const std::string idx = (dir / "model.safetensors.index.json").string();
      if (const std::string idx_why = regular_file_problem(idx); idx_why == "no such file")
        bad("train.init_from", st + " not found, nor a sharded checkpoint's " + idx);
      else if (!idx_why.empty())
        bad("train.init_from", idx + ": " + idx_why);
    } else if (!why.empty())
      bad("train.init_from", st + ": " + why);
    const bool files_there =
        std::none_of(out.begin(), out.end(), [](const ConfigIssue& i) { return i.field == "train.init_from"; });
    if (files_there) {
      try {  // the headers, and the tensors against the model's parameters, before any worker starts
        const std::string m = checkpoint_mismatch(checkpoint_tensors(c.train.init_from), c.model, c.train.init_from);
        if (!m.empty()) bad("train.init_from", m);
      } catch (const ConfigError& e) {
        bad("train.init_from", e.what());
      }
    }
  }
  return out;
}

std::string not_yet_trained(const RunConfig& cfg) {
  (void)cfg;  // every setting validate() passes is trained (ZeRO 0-3 and both offloads: docs/ZERO.md)
  return {};
}

void throw_if_invalid(const std::vector<ConfigIssue>& issues) {
  if (issues.empty()) return;
  std::string msg;
  for (const auto& i : issues) msg += (msg.empty() ? "" : "\n") + i.message;
  throw ConfigError(msg);
}

}  // namespace ulysses
