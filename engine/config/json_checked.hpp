// Parsing JSON that users and other tools hand us (configs, --set values, the launcher form,
// safetensors headers, checkpoint manifests) in time linear in its length, with rules
// nlohmann's parser does not keep by itself:
// - nesting at most kMaxJsonDepth deep: printing or comparing a value nested 80 000 deep
//   recurses once per level and ends the launcher with SIGSEGV;
// - no key twice in one object: the parser keeps the last one silently, so a config saying
//   "sp_size": 2 and, further down, "sp_size": 3 would run with 3 and nothing would say so;
// - at most JsonLimits::max_entries members in one object or elements in one array.
// The DOM is built by our own SAX handler: nlohmann's callback parser scans the enclosing
// object at the end of every child object (to drop discarded values), which made a
// safetensors header of 100 000 tensors take 79 s.
// Torch-free.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ulysses {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonEntries = size_t{1} << 20;  // members of one object / elements of one array

struct JsonLimits {
  size_t max_entries = kMaxJsonEntries;
};

// What parse_checked_json throws for a text that breaks one of the rules above (its what():
// "nests arrays or objects more than 64 deep", "has the key \"x\" twice in one object",
// "has more than 1048576 entries in one object or array").
// Malformed JSON throws nlohmann::json::exception as json::parse does.
struct JsonShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json parse_checked_json(std::string_view text, const JsonLimits& limits = {});

// A value for an error message: never throws (invalid UTF-8 is replaced), at most 80
// characters ("..." when cut).
std::string json_for_message(const nlohmann::json& v);

// A name (a file, a tensor, a path) for a message: as it is when it is valid UTF-8 without
// control characters, else quoted and escaped as JSON ("model\n.safetensors" -> "\"model\\n..."),
// invalid bytes as U+FFFD, so it never splits a line, moves the cursor or throws.
std::string name_for_message(const std::string& name);

}  // namespace ulysses
