// Parsing JSON that users and other tools hand us (configs, --set values, the launcher form,
// safetensors headers) with two rules nlohmann's parser does not keep by itself:
// - nesting at most kMaxJsonDepth deep: printing or comparing a value nested 80 000 deep
//   recurses once per level and ends the launcher with SIGSEGV;
// - no key twice in one object: the parser keeps the last one silently, so a config saying
//   "sp_size": 2 and, further down, "sp_size": 3 would run with 3 and nothing would say so.
// Torch-free.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ulysses {

inline constexpr int kMaxJsonDepth = 64;

// What parse_checked_json throws for a text that breaks one of the rules above (its what():
// "nests arrays or objects more than 64 deep", "has the key \"x\" twice in one object").
// Malformed JSON throws nlohmann::json::exception as json::parse does.
struct JsonShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json parse_checked_json(std::string_view text);

// A value for an error message: never throws (invalid UTF-8 is replaced), at most 80
// characters ("..." when cut).
std::string json_for_message(const nlohmann::json& v);

}  // namespace ulysses
