// Internal to engine/config: the run config's JSON reflection (run_config.cpp, through the field
// table's bindings in config_fields.cpp) as the Hugging Face mapping (hf_config.cpp) uses it for
// the model section, and the UTF-8 check the bindings and the parser share.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "run_config.hpp"

namespace ulysses::config_detail {

// The model section's keys read from `j` (unknown keys refused, as in a run config) / written.
void read_model_section(ModelConfig& m, const nlohmann::json& j);
nlohmann::json write_model_section(const ModelConfig& m);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s);

}  // namespace ulysses::config_detail
