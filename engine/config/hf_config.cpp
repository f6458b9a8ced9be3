// Hugging Face config.json (Transformers v4 and v5 layouts) read into and written from the
// model section of a run config: families, RoPE dictionaries, informational keys.
#include "run_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "config_reflection.hpp"
#include "json_checked.hpp"

namespace ulysses {

namespace {

std::string hf_show(const json& v) { return json_for_message(v); }

}  // namespace

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
  if (!r.is_object()) throw ConfigError("config.json: " + where + " must be an object or null, got " + hf_show(r));
  std::string type;
  if (r.contains("rope_type") && !r["rope_type"].is_null())
    type = r["rope_type"].is_string() ? r["rope_type"].get<std::string>() : "?";
  else if (r.contains("type") && !r["type"].is_null())
    type = r["type"].is_string() ? r["type"].get<std::string>() : "?";  // v4 legacy key
  else if (r.contains("full_attention") || r.contains("sliding_attention"))
    throw ConfigError("config.json: " + where + " per layer type (" + hf_show(r) +
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
      throw ConfigError("config.json: " + where + "." + k + " must be a number, got " + hf_show(v));
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
                          ".original_max_position_embeddings must be a positive integer, got " + hf_show(v));
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

namespace {

// The family: architectures[0] and model_type must name the same supported family; llama
// when neither is given.
std::string hf_family(const json& hf) {
  std::string arch_type, model_type;
  if (hf.contains("architectures") && !hf["architectures"].is_null()) {
    const json& a = hf["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      throw ConfigError("config.json: architectures must be a list of one name, got " + hf_show(a));
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
  return !model_type.empty() ? model_type : !arch_type.empty() ? arch_type : "llama";
}

// The keys of a Hugging Face config.json sorted: ours to read as the model section, the RoPE
// dictionaries of either layout, and whether num_key_value_heads was given.
struct HfKeys {
  json ours = json::object();
  bool kv_given = false;
  const json* rope_scaling = nullptr;
  const json* rope_parameters = nullptr;
};

// Every key checked: informational ones skipped, unsupported features refused with the key,
// attention_bias set on m (its family is known).
HfKeys sort_hf_keys(const json& hf, ModelConfig& m) {
  const bool qwen = m.model_type == "qwen2" || m.model_type == "qwen3";
  HfKeys keys;
  json& ours = keys.ours;
  for (auto it = hf.begin(); it != hf.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "architectures" || k == "model_type") continue;
    // The checkpoint's dtype is informational (the tensors carry theirs), but a value no
    // Transformers writes (5, "int8", "torch.float16") is a damaged or hand-made file.
    if ((k == "torch_dtype" || k == "dtype") && !v.is_null() &&
        !(v.is_string() && (v == "float32" || v == "float16" || v == "bfloat16" || v == "float64")))
      throw ConfigError("config.json: " + k + " " + hf_show(v) +
                        " is not a dtype Transformers writes (float32, float16, bfloat16, float64)");
    if (std::find(kHfInformational.begin(), kHfInformational.end(), k) != kHfInformational.end()) continue;
    if (k == "hidden_act") {
      if (v != "silu") throw ConfigError("config.json: hidden_act " + hf_show(v) + " is not supported (only silu)");
      continue;
    }
    if (k == "mlp_bias") {
      if (!v.is_boolean() && !v.is_null())
        throw ConfigError("config.json: mlp_bias must be true or false, got " + hf_show(v));
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
      keys.rope_scaling = &v;
      continue;
    }
    if (k == "rope_parameters") {
      keys.rope_parameters = &v;
      continue;
    }
    if (k == "partial_rotary_factor") {
      if (!(v.is_number() && v.get<double>() == 1.0))
        throw ConfigError("config.json: partial_rotary_factor " + hf_show(v) + " is not supported (only 1.0)");
      continue;
    }
    if (k == "sliding_window") {
      // Qwen configs carry a window that only applies with use_sliding_window=true.
      if (!v.is_null() && !qwen)
        throw ConfigError("config.json: sliding_window=" + hf_show(v) +
                          " is not supported (full causal attention only); set it to null");
      continue;
    }
    if (k == "use_sliding_window") {
      if (!(v.is_boolean() && !v.get<bool>()))
        throw ConfigError("config.json: use_sliding_window=" + hf_show(v) +
                          " is not supported (full causal attention only)");
      continue;
    }
    if (k == "layer_types") {
      if (!v.is_array()) throw ConfigError("config.json: layer_types must be a list");
      for (const auto& lt : v)
        if (lt != "full_attention")
          throw ConfigError("config.json: layer_types entry " + hf_show(lt) +
                            " is not supported (only full_attention)");
      continue;
    }
    if (k == "head_dim") {
      if (v.is_null()) continue;
      ours["head_dim"] = v;  // checked against hidden_size below
      continue;
    }
    if (k == "num_key_value_heads") keys.kv_given = !v.is_null();
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
  return keys;
}

// The RoPE settings: v5 rope_parameters (rope_theta inside) wins over v4 rope_scaling; both
// set must agree.
void read_hf_rope(const HfKeys& keys, ModelConfig& m) {
  const json& ours = keys.ours;
  const json* rope_scaling = keys.rope_scaling;
  const json* rope_parameters = keys.rope_parameters;
  ModelConfig from_params = m, from_scaling = m;
  const bool has_params = rope_parameters && !rope_parameters->is_null();
  const bool has_scaling = rope_scaling && !rope_scaling->is_null();
  if (has_params) read_rope_dict(*rope_parameters, "rope_parameters", from_params);
  if (has_scaling) read_rope_dict(*rope_scaling, "rope_scaling", from_scaling);
  // Both layouts present: Transformers v4 reads rope_theta and rope_scaling (null: no scaling),
  // v5 rope_parameters; they must build the same model (a top-level rope_theta 10000 beside
  // rope_parameters' 500000, or rope_scaling null beside a yarn rope_parameters, builds one model
  // in v5 and another in v4, and taking either one unsaid would be a guess).
  if (has_params && ours.contains("rope_theta") && m.rope_theta != from_params.rope_theta)
    throw ConfigError("config.json: rope_theta " + hf_show(ours["rope_theta"]) + " (Transformers v4's key) and " +
                      "rope_parameters' rope_theta " + hf_show(json(from_params.rope_theta)) +
                      " (v5's) disagree; keep one layout");
  if (has_params && rope_scaling) {
    from_scaling.rope_theta = from_params.rope_theta;
    if (config_detail::write_model_section(from_params) != config_detail::write_model_section(from_scaling))
      throw ConfigError("config.json: rope_scaling " + hf_show(*rope_scaling) + " and rope_parameters " +
                        hf_show(*rope_parameters) + " disagree; keep one");
  }
  m = has_params ? from_params : from_scaling;
}

}  // namespace

ModelConfig model_from_hf_config(const json& hf) {
  if (!hf.is_object()) throw ConfigError("config.json must be a JSON object");
  ModelConfig m;
  m.model_type = hf_family(hf);
  const bool qwen = m.model_type == "qwen2" || m.model_type == "qwen3";

  HfKeys keys = sort_hf_keys(hf, m);
  json& ours = keys.ours;
  // Transformers' default for the four families, not the demo's 1e-5.
  if (!ours.contains("rms_norm_eps")) ours["rms_norm_eps"] = 1e-6;
  // A key the file leaves out means the family's Transformers default, not the demo's (checked
  // against a pure-Python reference of each family's math): max_position_embeddings (yarn
  // without original_max_position_embeddings scales by it, and it differs per family), Qwen3's
  // head_dim (128, not hidden_size / heads, or its checkpoints' shapes do not match), and
  // num_key_value_heads when absent (Mistral and Qwen3 8, Qwen2 32; null or a Llama: as many as
  // the query heads).
  const bool mistral = m.model_type == "mistral";
  if (!hf.contains("max_position_embeddings")) ours["max_position_embeddings"] = mistral ? 131072 : qwen ? 32768 : 2048;
  if (m.model_type == "qwen3" && !hf.contains("head_dim")) ours["head_dim"] = 128;
  // Mistral's sliding_window defaults to a 4096-token window, which this engine does not have:
  // absent is refused like an explicit 4096 (this engine runs full attention, a different model past
  // 4096 tokens).
  if (mistral && !hf.contains("sliding_window"))
    throw ConfigError(
        "config.json: no sliding_window key: Transformers' Mistral then uses a 4096-token sliding window, which is "
        "not supported (full causal attention only); set \"sliding_window\": null if the model uses full attention");
  config_detail::read_model_section(m, ours);
  if (!keys.kv_given)
    m.num_key_value_heads = hf.contains("num_key_value_heads") || m.model_type == "llama" ? m.num_attention_heads
                            : m.model_type == "qwen2"                                     ? 32
                                                                                          : 8;
  // head_dim equal to hidden_size / heads is the implicit one (kept 0, so configs compare equal).
  if (m.explicit_head_dim > 0 && m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads == 0 &&
      m.explicit_head_dim == m.hidden_size / m.num_attention_heads)
    m.explicit_head_dim = 0;
  read_hf_rope(keys, m);
  return m;
}

json model_to_hf_config(const ModelConfig& m, const std::string& torch_dtype) {
  // Transformers v4 layout (rope_theta + rope_scaling), which v5 also reads.
  json j = config_detail::write_model_section(m);
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

}  // namespace ulysses
