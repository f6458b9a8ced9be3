// Internal to engine/config: the run config's JSON reflection (run_config.cpp) as the Hugging
// Face mapping (hf_config.cpp) uses it for the model section.
#pragma once

#include <nlohmann/json.hpp>

#include "run_config.hpp"

namespace ulysses::config_detail {

// The model section's keys read from `j` (unknown keys refused, as in a run config) / written.
void read_model_section(ModelConfig& m, const nlohmann::json& j);
nlohmann::json write_model_section(const ModelConfig& m);

}  // namespace ulysses::config_detail
