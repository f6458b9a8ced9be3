#include "json_checked.hpp"

#include <set>
#include <string>
#include <vector>

namespace ulysses {

std::string json_for_message(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

nlohmann::json parse_checked_json(std::string_view text) {
  using nlohmann::json;
  std::vector<std::set<std::string>> keys;  // the keys met so far in each object still open
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth)
      throw JsonShapeError("nests arrays or objects more than " + std::to_string(kMaxJsonDepth) + " deep");
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::key: {
        std::string k = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(k).second) {
          if (k.size() > 60) k = k.substr(0, 57) + "...";
          throw JsonShapeError("has the key \"" + k + "\" twice in one object");
        }
        break;
      }
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), check);
}

}  // namespace ulysses
