// Run configuration: JSON reading and writing through the field table (config_fields.cpp), files,
// overrides and train.init_from. The Hugging Face mapping is hf_config.cpp, the validation config_validate.cpp.
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
#include <sstream>

namespace ulysses {
namespace fs = std::filesystem;

namespace {

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

// "a, b, c": the keys of one section, in the table's order.
std::string key_list(const std::string& section) {
  std::string out;
  for (const auto& f : config_fields())
    if (f.section == section) out += (out.empty() ? "" : ", ") + f.key;
  return out;
}

// Hugging Face TrainingArguments names read as our train keys (docs/CONTRACTS.md). Files we write
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

// One section of `j` read into `c` through the field table's bindings; unknown keys refused.
void read_section(RunConfig& c, const json& j, const std::string& section) {
  if (!j.is_object()) throw ConfigError(section + " must be a JSON object");
  const auto& table = config_fields();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string ours = canonical_key(section + "." + it.key()).substr(section.size() + 1);
    if (ours != it.key() && j.contains(ours))
      throw ConfigError(section + "." + it.key() + " and " + section + "." + ours + " name the same setting; keep one");
    auto fd = std::find_if(table.begin(), table.end(),
                           [&](const ConfigField& x) { return x.section == section && x.key == ours; });
    if (fd == table.end())
      throw ConfigError("unknown config key '" + section + "." + it.key() + "' (valid keys in " + section + ": " +
                        key_list(section) + ")");
    fd->read(c, it.value(), section + "." + it.key());
  }
}

// One section of `c` as JSON, every key of the table.
json write_section(const RunConfig& c, const std::string& section) {
  json j = json::object();
  for (const auto& f : config_fields())
    if (f.section == section) j[f.key] = f.write(c);
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
  for (const char* section : kRunConfigSections) j[section] = write_section(*this, section);
  return j;
}

RunConfig RunConfig::from_json(const json& j) {
  if (!j.is_object()) throw ConfigError("a run config must be a JSON object with sections " + kSections);
  RunConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (std::find_if(kRunConfigSections.begin(), kRunConfigSections.end(), [&](const char* sec) { return k == sec; }) !=
        kRunConfigSections.end())
      read_section(c, it.value(), k);
    else if (k == "name" || k == "description") {
      if (!it.value().is_string()) throw ConfigError(k + " must be a string");
      if (!config_detail::valid_utf8(it.value().get_ref<const std::string&>()))
        throw ConfigError(k + " is not valid UTF-8");
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
    const std::string cj = (fs::path(c.train.init_from) / ckpt::kModelConfigFile).string();
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
      // A checkpoint's sizes have no default worth guessing: ours (the 2-layer demo's) would read
      // a 4-layer checkpoint lacking num_hidden_layers as a 2-layer model without a word, and
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
      json mine = config_detail::write_model_section(c.model);
      json theirs = config_detail::write_model_section(hf);
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

void read_model_section(ModelConfig& m, const json& j) {
  RunConfig c;
  c.model = m;
  read_section(c, j, "model");
  m = c.model;
}
json write_model_section(const ModelConfig& m) {
  RunConfig c;
  c.model = m;
  return write_section(c, "model");
}

}  // namespace config_detail

}  // namespace ulysses
