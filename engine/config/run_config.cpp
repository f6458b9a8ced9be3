// Run configuration: JSON reflection (one table of fields per section), files, overrides and
// train.init_from. The Hugging Face mapping is hf_config.cpp, the validation config_validate.cpp.
#include "run_config.hpp"

#include "config_reflection.hpp"

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
      f("sp_size", &ParallelConfig::sp_size),
      f("dp_size", &ParallelConfig::dp_size),
      f("backend", &ParallelConfig::backend),
      f("head_chunks", &ParallelConfig::head_chunks),
      f("fused_qkv", &ParallelConfig::fused_qkv),
      f("timeout_s", &ParallelConfig::timeout_s),
      f("ring_size", &ParallelConfig::ring_size),
      f("ring_zigzag", &ParallelConfig::ring_zigzag),
      f("ring_transport", &ParallelConfig::ring_transport),
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

namespace config_detail {

void read_model_section(ModelConfig& m, const json& j) { read_section(m, j, "model", model_fields()); }
json write_model_section(const ModelConfig& m) { return write_section(m, model_fields()); }

}  // namespace config_detail

}  // namespace ulysses
