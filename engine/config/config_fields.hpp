// The run config's field table: every key of every section with its kind, choices, integer
// limits, default, label and documentation. The single source for the launcher form (the
// studio generates its fields from it), for validate()'s choice and range checks, and for
// docs. Keys the form does not offer are listed here too, with in_form = false and the
// reason in `doc`. tests/config/test_config_fields.cpp checks that the key set equals the
// parser's (RunConfig::to_json()). Torch-free and Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "run_config.hpp"

namespace ulysses {

enum class FieldKind { Integer, Number, Text, Path, Choice, Check };

struct ConfigField {
  std::string section;  // model | parallel | train | data | profile | faults
  std::string key;      // as in the JSON
  FieldKind kind = FieldKind::Text;
  std::string label;                 // short name for a form
  std::string doc;                   // one line: meaning, units, what 0 / -1 mean
  std::vector<std::string> choices;  // FieldKind::Choice, in the order messages list them
  std::optional<int64_t> min, max;   // FieldKind::Integer: the range validate() enforces
  bool in_form = true;               // false: no launcher field (doc says why)
  json default_value;                // RunConfig{}'s value (filled from the structs' initializers)

  std::string dotted() const { return section + "." + key; }
};

// Every field, sections in file order (model, parallel, train, data, profile, faults).
const std::vector<ConfigField>& config_fields();
// The field of a dotted key, or nullptr.
const ConfigField* find_config_field(const std::string& dotted);

// "a, b or c" for a choice field's choices.
std::string choice_list(const ConfigField& f);

// The JSON value a form's text stands for, as --set reads values: for integer, number and
// check fields the text parsed as JSON when it parses (else the text as a string, so the
// parser's type error names it); for text, path and choice fields the text itself. Leading
// and trailing blanks are dropped, except for choices.
json field_value_from_text(const ConfigField& f, const std::string& text);

}  // namespace ulysses
