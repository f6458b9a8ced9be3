// Linear-time checked JSON parsing (see json_checked.hpp): a SAX handler that builds the DOM.
#include "json_checked.hpp"

#include <vector>

namespace ulysses {

std::string json_for_message(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

std::string name_for_message(const std::string& name) {
  bool plain = true;
  for (unsigned char c : name) plain = plain && c >= 0x20 && c != 0x7f;
  if (plain) {
    try {
      (void)nlohmann::json(name).dump();  // throws on invalid UTF-8
      return name;
    } catch (const nlohmann::json::exception&) {
    }
  }
  return nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

using nlohmann::json;

// Builds the value as nlohmann's DOM parser does (a stack of the open containers, the member a
// key names), checking depth, repeated keys and entry counts as each event arrives: O(1) per
// event plus O(log n) per key.
class CheckedDomBuilder {
 public:
  CheckedDomBuilder(json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    check_depth();
    json& obj = *stack_.back();
    if (obj.contains(k)) {
      std::string shown = k.size() > 60 ? k.substr(0, 57) + "..." : k;
      throw JsonShapeError("has the key \"" + shown + "\" twice in one object");
    }
    count_entry(obj);
    member_ = &obj[k];
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    throw ex;  // its own type (parse_error, out_of_range), as json::parse throws it
  }

 private:
  // An event's depth as nlohmann's callback parser gave it: the containers open around it.
  void check_depth() const {
    if (stack_.size() > static_cast<size_t>(kMaxJsonDepth))
      throw JsonShapeError("nests arrays or objects more than " + std::to_string(kMaxJsonDepth) + " deep");
  }
  void count_entry(const json& container) const {
    if (container.size() >= limits_.max_entries)
      throw JsonShapeError("has more than " + std::to_string(limits_.max_entries) + " entries in one object or array");
  }

  // Places a value where the next one goes: the root, the end of the open array, or the
  // member the last key named. Returns where it went.
  json* place(json&& v) {
    check_depth();
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      count_entry(top);
      top.push_back(std::move(v));
      return &top.back();
    }
    *member_ = std::move(v);
    return member_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& container) {
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json& root_;
  const JsonLimits& limits_;
  std::vector<json*> stack_;  // the open containers, outermost first
  json* member_ = nullptr;    // the object member the last key made
};

}  // namespace

nlohmann::json parse_checked_json(std::string_view text, const JsonLimits& limits) {
  json root;
  CheckedDomBuilder builder(root, limits);
  json::sax_parse(text.begin(), text.end(), &builder);
  return root;
}

}  // namespace ulysses
