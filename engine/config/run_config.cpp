// Run configuration parsing, overrides, HF config.json mapping and validation.
#include "run_config.hpp"

#include "checkpoint_layout.hpp"

#include <sys/stat.h>

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

// A value for an error message: never throws (invalid UTF-8 is replaced), never huge.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len = 0;
    unsigned cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
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
  return {name,
          [m](S& s, const json& v, const std::string& path) {
            if (v.is_number_unsigned()) {
              if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
                throw ConfigError(path + " = " + show(v) + " is out of range (at most " + std::to_string(INT64_MAX) + ")");
              s.*m = static_cast<int64_t>(v.get<uint64_t>());
            } else if (v.is_number_integer()) {
              s.*m = v.get<int64_t>();
            } else if (v.is_number_float()) {
              // Range first: casting a double beyond int64 to int64 is undefined behaviour.
              const double x = v.get<double>();
              if (!(std::fabs(x) < 9.2e18))
                throw ConfigError(path + " = " + show(v) + " is out of range for a 64-bit integer");
              if (x != std::trunc(x)) throw ConfigError(path + " must be an integer, got " + show(v));
              s.*m = static_cast<int64_t>(x);
            } else {
              throw ConfigError(path + " must be an integer, got " + show(v) + " (" + type_name(v) + ")");
            }
          },
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
            if (v.is_null()) { s.*m = ""; return; }
            if (!v.is_string()) throw ConfigError(path + " must be a string, got " + show(v));
            const std::string& x = v.get_ref<const std::string&>();
            if (!valid_utf8(x))
              throw ConfigError(path + " is not valid UTF-8 (" + show(v) + "); rename the file or directory to a UTF-8 name");
            if (x.size() > 4096) throw ConfigError(path + " is longer than 4096 bytes");
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
  };
  return t;
}
const std::vector<Field<ParallelConfig>>& parallel_fields() {
  static const std::vector<Field<ParallelConfig>> t = {
      f("sp_size", &ParallelConfig::sp_size),         f("dp_size", &ParallelConfig::dp_size),
      f("backend", &ParallelConfig::backend),         f("head_chunks", &ParallelConfig::head_chunks),
      f("fused_qkv", &ParallelConfig::fused_qkv),     f("timeout_s", &ParallelConfig::timeout_s),
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
      f("seed", &TrainConfig::seed),
      f("dtype", &TrainConfig::dtype),
      f("init_from", &TrainConfig::init_from),
      f("save_to", &TrainConfig::save_to),
      f("save_every", &TrainConfig::save_every),
      f("save_keep", &TrainConfig::save_keep),
      f("resume_from", &TrainConfig::resume_from),
      f("device", &TrainConfig::device),
      f("threads_per_rank", &TrainConfig::threads_per_rank),
      f("activation_checkpointing", &TrainConfig::activation_checkpointing),
      f("offload_activations", &TrainConfig::offload_activations),
      f("loss_chunk_tokens", &TrainConfig::loss_chunk_tokens),
      f("mlp_chunk_tokens", &TrainConfig::mlp_chunk_tokens),
      f("attention", &TrainConfig::attention),
      f("attention_block", &TrainConfig::attention_block),
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

template <class S>
void read_section(S& s, const json& j, const std::string& section, const std::vector<Field<S>>& fields) {
  if (!j.is_object()) throw ConfigError(section + " must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto fd = std::find_if(fields.begin(), fields.end(), [&](const Field<S>& x) { return it.key() == x.name; });
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

const char* kSections = "model, parallel, train, data, profile, faults";

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
  const int64_t attn = d * num_attention_heads * dh * 2 + d * num_key_value_heads * dh * 2;
  const int64_t mlp = 3 * d * intermediate_size;
  const int64_t layer = attn + mlp + 2 * d;
  int64_t n = vocab_size * d + num_hidden_layers * layer + d;
  if (!tie_word_embeddings) n += vocab_size * d;
  return n;
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
  if (!j.is_object()) throw ConfigError("a run config must be a JSON object with sections " + std::string(kSections));
  RunConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "model") read_section(c.model, it.value(), k, model_fields());
    else if (k == "parallel") read_section(c.parallel, it.value(), k, parallel_fields());
    else if (k == "train") read_section(c.train, it.value(), k, train_fields());
    else if (k == "data") read_section(c.data, it.value(), k, data_fields());
    else if (k == "profile") read_section(c.profile, it.value(), k, profile_fields());
    else if (k == "faults") read_section(c.faults, it.value(), k, faults_fields());
    else if (k == "name" || k == "description") {
      if (!it.value().is_string()) throw ConfigError(k + " must be a string");
      if (!valid_utf8(it.value().get_ref<const std::string&>())) throw ConfigError(k + " is not valid UTF-8");
      (k == "name" ? c.name : c.description) = it.value().get<std::string>();
    }
    else throw ConfigError("unknown config section '" + k + "' (valid: " + kSections + ", name, description)");
  }
  return c;
}

std::string regular_file_problem(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "no such file" : std::string(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return "it is a directory, not a file";
  if (!S_ISREG(st.st_mode))
    return std::string("it is not a regular file (") +
           (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
                                                                                 : S_ISSOCK(st.st_mode) ? "a socket" : "special") +
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
  text.resize(static_cast<size_t>(std::min<uintmax_t>(ec ? 0 : expected, static_cast<uintmax_t>(kMaxJsonFileBytes)) + 1));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw ConfigError("cannot read " + path + ": I/O error");
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxJsonFileBytes)
    throw ConfigError("cannot read " + path + ": more than " + std::to_string(kMaxJsonFileBytes) + " bytes");
  try {
    return json::parse(text);
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
    value = json::parse(raw);
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
  config[section][field] = value;
}

static std::vector<std::string> kHfInformational = {
    "architectures", "model_type", "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "pretraining_tp", "use_cache", "transformers_version", "attention_dropout",
    "_name_or_path", "tokenizer_class"};

ModelConfig model_from_hf_config(const json& hf) {
  if (!hf.is_object()) throw ConfigError("config.json must be a JSON object");
  ModelConfig m;
  json ours = json::object();
  bool kv_given = false;
  for (auto it = hf.begin(); it != hf.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (std::find(kHfInformational.begin(), kHfInformational.end(), k) != kHfInformational.end()) continue;
    if (k == "hidden_act") {
      if (v != "silu") throw ConfigError("config.json: hidden_act '" + show(v) + "' is not supported (only silu)");
      continue;
    }
    if (k == "attention_bias" || k == "mlp_bias") {
      if (v.is_boolean() && v.get<bool>()) throw ConfigError("config.json: " + k + "=true is not supported (Llama has no biases)");
      continue;
    }
    if (k == "rope_scaling") {
      if (!v.is_null()) throw ConfigError("config.json: rope_scaling is not supported (only plain RoPE)");
      continue;
    }
    if (k == "head_dim") continue;  // checked below
    if (k == "num_key_value_heads") kv_given = !v.is_null();
    if (v.is_null()) continue;
    ours[k] = v;
  }
  read_section(m, ours, "model", model_fields());
  if (!kv_given) m.num_key_value_heads = m.num_attention_heads;
  if (hf.contains("head_dim") && hf["head_dim"].is_number_integer() && m.num_attention_heads > 0 &&
      hf["head_dim"].get<int64_t>() != m.hidden_size / m.num_attention_heads)
    throw ConfigError("config.json: head_dim " + show(hf["head_dim"]) + " differs from hidden_size/num_attention_heads (" +
                      num(m.hidden_size / m.num_attention_heads) + "), which is not supported");
  return m;
}

json model_to_hf_config(const ModelConfig& m, const std::string& torch_dtype) {
  json j = write_section(m, model_fields());
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["rope_scaling"] = nullptr;
  j["initializer_range"] = 0.02;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  j["head_dim"] = m.head_dim();
  j["torch_dtype"] = torch_dtype;
  return j;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = load_json_file(path);
  if (!j.is_object()) throw ConfigError(path + ": a run config must be a JSON object");
  for (const auto& o : overrides) apply_override(j, o);
  RunConfig c = RunConfig::from_json(j);
  if (!c.train.init_from.empty()) {
    const std::string cj = (fs::path(c.train.init_from) / "config.json").string();
    std::error_code ec;
    if (!fs::exists(cj, ec))
      throw ConfigError("train.init_from: " + cj + " not found (expected a Hugging Face checkpoint directory with config.json and model.safetensors)");
    ModelConfig hf;
    try {
      hf = model_from_hf_config(load_json_file(cj));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("train.init_from: ") + e.what());
    }
    // Keys the user set explicitly must agree with the checkpoint.
    if (j.contains("model")) {
      json mine = write_section(c.model, model_fields());
      json theirs = write_section(hf, model_fields());
      for (auto it = j["model"].begin(); it != j["model"].end(); ++it) {
        if (mine[it.key()] != theirs[it.key()])
          throw ConfigError("model." + it.key() + " = " + mine[it.key()].dump() + " differs from " + cj + " (" +
                            theirs[it.key()].dump() + "); remove it from the config or use a matching checkpoint");
      }
    }
    c.model = hf;
  }
  return c;
}

int64_t local_q_heads(const RunConfig& cfg) { return cfg.model.num_attention_heads / cfg.parallel.sp_size; }
int64_t local_kv_heads(const RunConfig& cfg) {
  const int64_t kv = cfg.model.num_key_value_heads, p = cfg.parallel.sp_size;
  return kv >= p ? kv / p : 1;
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
      bad(field, field + " must be " + (lo == 1 ? std::string("positive") : lo == 0 ? std::string(">= 0") : ">= " + num(lo)) +
                     " and at most " + num(hi) + ", got " + num(v));
      return false;
    }
    return true;
  };
  auto positive = [&](const std::string& field, int64_t v, int64_t hi) { return in_range(field, v, 1, hi); };
  bool ok_model = positive("model.vocab_size", m.vocab_size, kMaxVocab) & positive("model.hidden_size", m.hidden_size, kMaxHidden) &
                  positive("model.intermediate_size", m.intermediate_size, kMaxIntermediate) &
                  positive("model.num_hidden_layers", m.num_hidden_layers, kMaxLayers) &
                  positive("model.num_attention_heads", m.num_attention_heads, kMaxHeads) &
                  positive("model.num_key_value_heads", m.num_key_value_heads, kMaxHeads);
  ok_model &= positive("model.max_position_embeddings", m.max_position_embeddings, kMaxTokens);
  bool ok_par = positive("parallel.sp_size", p.sp_size, kMaxWorld) & positive("parallel.dp_size", p.dp_size, kMaxWorld) &
                positive("parallel.head_chunks", p.head_chunks, kMaxHeads);
  bool ok_train = positive("train.seq_length", t.seq_length, kMaxTokens) &
                  positive("train.micro_batch_size", t.micro_batch_size, kMaxMicroBatch);
  positive("train.steps", t.steps, kMaxSteps);
  in_range("train.warmup_steps", t.warmup_steps, 0, kMaxSteps);
  auto finite = [&](const std::string& field, double v) {
    if (!std::isfinite(v)) bad(field, field + " must be a finite number");
    return std::isfinite(v);
  };
  if (finite("train.lr", t.lr) && !(t.lr > 0)) bad("train.lr", "train.lr must be positive");
  if (finite("train.min_lr", t.min_lr) && (t.min_lr < 0 || t.min_lr > t.lr))
    bad("train.min_lr", "train.min_lr must be between 0 and train.lr");
  if (finite("train.weight_decay", t.weight_decay) && t.weight_decay < 0)
    bad("train.weight_decay", "train.weight_decay must be >= 0");
  if (finite("train.grad_clip", t.grad_clip) && t.grad_clip < 0)
    bad("train.grad_clip", "train.grad_clip must be >= 0 (0 disables clipping)");
  in_range("train.threads_per_rank", t.threads_per_rank, 0, kMaxThreads);
  if (finite("model.rms_norm_eps", m.rms_norm_eps) && !(m.rms_norm_eps > 0 && m.rms_norm_eps <= 1))
    bad("model.rms_norm_eps", "model.rms_norm_eps must be positive and at most 1");
  if (finite("model.rope_theta", m.rope_theta) && !(m.rope_theta > 0 && m.rope_theta <= 1e15))
    bad("model.rope_theta", "model.rope_theta must be positive and at most 1e15");
  if (finite("parallel.timeout_s", p.timeout_s) && !(p.timeout_s > 0 && p.timeout_s <= kMaxTimeoutS)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", p.timeout_s);
    bad("parallel.timeout_s", std::string("parallel.timeout_s must be positive and at most ") + num(static_cast<int64_t>(kMaxTimeoutS)) +
                                  " (7 days), got " + buf);
  }
  if (ok_par && p.world_size() > kMaxWorld)
    bad("parallel.sp_size", "sp_size x dp_size = " + num(p.world_size()) + " ranks is more than " + num(kMaxWorld));
  // Byte counts of the step, in checked 64-bit arithmetic: the cost model and the engine
  // multiply these sizes, and a product past 2^63 wraps to nonsense (negative sizes).
  if (ok_model && ok_par && ok_train) {
    auto mul = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); };
    auto add = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); };
    const int64_t b = t.micro_batch_size, N = t.seq_length, d = m.hidden_size, f = m.intermediate_size, L = m.num_hidden_layers;
    const int64_t V = m.vocab_size, H = m.num_attention_heads;
    int64_t per_token = 0, act = 0, logits = 0, scores = 0, tokens = 0, x = 0;
    // activations ~ b*N*(L*(12d + 3f) + d)*4 bytes; logits b*N*V*8; math attention 2*b*H*N^2*L*4
    const bool fits = mul(d, 12, &x) && mul(f, 3, &per_token) && add(x, per_token, &per_token) && mul(per_token, L, &per_token) &&
                      add(per_token, d, &per_token) && mul(b, N, &tokens) && mul(tokens, per_token, &act) && mul(act, 4, &act) &&
                      mul(tokens, V, &logits) && mul(logits, 8, &logits) && add(act, logits, &x) && mul(tokens, p.dp_size, &x) &&
                      // N x N scores only where attention may materialize them (not on cuda: flash)
                      (t.device == "cuda" || (mul(tokens, N, &scores) && mul(scores, H, &scores) && mul(scores, L, &scores) &&
                                              mul(scores, 8, &scores) && add(act + logits, scores, &x)));
    if (!fits)
      bad("train.seq_length", "train.seq_length (" + num(N) + ") x train.micro_batch_size (" + num(b) +
                                  ") with this model needs more than 2^63 bytes for one step's activations; reduce them");
  }

  if (ok_model) {
    if (m.hidden_size % m.num_attention_heads != 0)
      bad("model.hidden_size", "model.hidden_size (" + num(m.hidden_size) + ") must be divisible by model.num_attention_heads (" +
                                   num(m.num_attention_heads) + ")");
    else if (m.head_dim() % 2 != 0)
      bad("model.hidden_size", "head dimension hidden_size/num_attention_heads (" + num(m.head_dim()) + ") must be even for RoPE");
    if (m.num_attention_heads % m.num_key_value_heads != 0)
      bad("model.num_key_value_heads", "model.num_attention_heads (" + num(m.num_attention_heads) +
                                           ") must be divisible by model.num_key_value_heads (" + num(m.num_key_value_heads) + ")");
  }
  if (ok_model && ok_par && ok_train) {
    if (m.num_attention_heads % p.sp_size != 0)
      bad("parallel.sp_size", "model.num_attention_heads (" + num(m.num_attention_heads) + ") must be divisible by parallel.sp_size (" +
                                  num(p.sp_size) + ")");
    const int64_t kv = m.num_key_value_heads;
    if (kv % p.sp_size != 0 && p.sp_size % kv != 0)
      bad("model.num_key_value_heads", "model.num_key_value_heads (" + num(kv) + ") must be divisible by parallel.sp_size (" +
                                           num(p.sp_size) + "), or divide it so that kv heads can be replicated");
    if (t.seq_length > 0 && t.seq_length % p.sp_size != 0)
      bad("train.seq_length", "train.seq_length (" + num(t.seq_length) + ") must be divisible by parallel.sp_size (" + num(p.sp_size) +
                                  "); try " + num((t.seq_length / p.sp_size + 1) * p.sp_size));
    if (m.num_attention_heads % p.sp_size == 0) {
      // Any divisor of the local q heads: with GQA a kv head travels with the first chunk
      // that needs it, so the local kv head count puts no constraint on head_chunks.
      const int64_t hq = m.num_attention_heads / p.sp_size;
      if (hq % p.head_chunks != 0)
        bad("parallel.head_chunks", "parallel.head_chunks (" + num(p.head_chunks) + ") must divide the local heads per rank, num_attention_heads/sp_size = " +
                                        num(hq));
    }
  }
  if (p.backend != "auto" && p.backend != "gloo" && p.backend != "nccl")
    bad("parallel.backend", "parallel.backend must be auto, gloo or nccl, got '" + p.backend + "'");
  if (t.dtype != "float32" && t.dtype != "bfloat16")
    bad("train.dtype", "train.dtype must be float32 or bfloat16, got '" + t.dtype + "'");
  if (t.device != "auto" && t.device != "cpu" && t.device != "cuda")
    bad("train.device", "train.device must be auto, cpu or cuda, got '" + t.device + "'");
  if (t.activation_checkpointing != "none" && t.activation_checkpointing != "layer")
    bad("train.activation_checkpointing", "train.activation_checkpointing must be none or layer, got '" + t.activation_checkpointing + "'");
  if (t.offload_activations && t.activation_checkpointing != "layer")
    bad("train.offload_activations", "train.offload_activations needs train.activation_checkpointing=layer (only the kept layer inputs are offloaded)");
  in_range("train.loss_chunk_tokens", t.loss_chunk_tokens, 0, kMaxTokens);
  in_range("train.mlp_chunk_tokens", t.mlp_chunk_tokens, 0, kMaxTokens);
  if (t.attention != "auto" && t.attention != "sdpa" && t.attention != "blocked")
    bad("train.attention", "train.attention must be auto, sdpa or blocked, got '" + t.attention + "'");
  positive("train.attention_block", t.attention_block, kMaxTokens);
  in_range("train.save_every", t.save_every, 0, kMaxSteps);
  positive("train.save_keep", t.save_keep, 1 << 20);
  if (t.save_every > 0 && t.save_to.empty())
    bad("train.save_every", "train.save_every (" + num(t.save_every) + ") needs train.save_to, the folder the checkpoints go to");
  const auto& d = c.data;
  if (d.kind != "synthetic" && d.kind != "text" && d.kind != "tokens")
    bad("data.kind", "data.kind must be synthetic, text or tokens, got '" + d.kind + "'");
  if ((d.kind == "text" || d.kind == "tokens") && d.path.empty()) bad("data.path", "data.kind=" + d.kind + " needs data.path");
  if (d.kind == "text" && m.vocab_size < 256)
    bad("model.vocab_size", "model.vocab_size (" + num(m.vocab_size) + ") is too small for byte-level text data, which needs at least 256");
  if (d.token_dtype != "uint16" && d.token_dtype != "uint32")
    bad("data.token_dtype", "data.token_dtype must be uint16 or uint32, got '" + d.token_dtype + "'");
  if (d.kind == "tokens" && d.token_dtype == "uint16" && m.vocab_size > 65536)
    bad("data.token_dtype", "uint16 tokens cannot address model.vocab_size (" + num(m.vocab_size) + "); use uint32");
  if (c.profile.step_begin < 0 || c.profile.step_begin > kMaxSteps)
    bad("profile.step_begin", "profile.step_begin must be >= 0 and at most " + num(kMaxSteps));
  if (c.profile.step_end < -1 || c.profile.step_end > kMaxSteps)
    bad("profile.step_end", "profile.step_end must be -1 (all) or a step number up to " + num(kMaxSteps));
  else if (c.profile.step_end >= 0 && c.profile.step_end < c.profile.step_begin)
    bad("profile.step_end", "profile.step_end must be -1 (all) or >= profile.step_begin");
  const auto& fl = c.faults;
  if (fl.slow_rank < -1 || fl.slow_rank >= p.world_size())
    bad("faults.slow_rank", "faults.slow_rank (" + num(fl.slow_rank) + ") must be -1 (off) or a rank below the world size (" +
                                num(p.world_size()) + " = sp_size x dp_size)");
  if (!(fl.delay_ms >= 0 && fl.delay_ms <= kMaxFaultDelayMs))
    bad("faults.delay_ms", "faults.delay_ms must be between 0 and " + num(static_cast<int64_t>(kMaxFaultDelayMs)) + " ms");
  else if (fl.slow_rank >= 0 && fl.delay_ms == 0)
    bad("faults.delay_ms", "faults.slow_rank is set but faults.delay_ms is 0; give the delay (e.g. 50) or set faults.slow_rank to -1");
  return out;
}

std::vector<ConfigIssue> validate_with_files(const RunConfig& c) {
  std::vector<ConfigIssue> out = validate(c);
  if (!out.empty()) return out;
  auto bad = [&](const std::string& field, const std::string& msg) { out.push_back({field, msg}); };
  const auto& d = c.data;
  const int64_t need_tokens = c.train.seq_length + 1;
  if (d.kind == "text" || d.kind == "tokens") {
    // Only a regular file: a FIFO would block the launcher and every worker forever.
    const std::string why = regular_file_problem(d.path);
    if (!why.empty()) {
      bad("data.path", "data file " + d.path + (why == "no such file" ? std::string(" not found") : ": " + why));
      return out;
    }
    const int64_t size = file_size(d.path);
    if (size < 0) {
      bad("data.path", "data file " + d.path + " not found");
      return out;
    }
    const int64_t width = d.kind == "text" ? 1 : (d.token_dtype == "uint16" ? 2 : 4);
    if (size % width != 0)
      bad("data.path", d.path + " has " + num(size) + " bytes, not a multiple of " + num(width) + " (" + d.token_dtype + " tokens)");
    const int64_t tokens = size / width;
    if (tokens < need_tokens)
      bad("data.path", d.path + " holds " + num(tokens) + " tokens, fewer than train.seq_length + 1 = " + num(need_tokens));
    if (d.kind == "tokens" && out.empty()) {
      std::ifstream in(d.path, std::ios::binary);
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
    const std::string st = (dir / "model.safetensors").string();
    const std::string why = regular_file_problem(st);
    if (why == "no such file")
      bad("train.init_from", st + " not found (sharded checkpoints are not supported)");
    else if (!why.empty())
      bad("train.init_from", st + ": " + why);
  }
  return out;
}

void throw_if_invalid(const std::vector<ConfigIssue>& issues) {
  if (issues.empty()) return;
  std::string msg;
  for (const auto& i : issues) msg += (msg.empty() ? "" : "\n") + i.message;
  throw ConfigError(msg);
}

}  // namespace ulysses
