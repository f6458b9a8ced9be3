// The run config's field table: every key of every section with the struct member it binds,
// its kind, choices, integer limits, default, label and documentation. The one table of
// config keys: the JSON parser and writer (RunConfig::from_json / to_json) read and write
// through its bindings, the launcher form (the studio generates its fields from it) and
// validate()'s choice and range checks use its rows, and so do the docs. Keys the form does
// not offer are listed too, with in_form = false and the reason in `doc`. Torch-free and
// Qt-free.
#pragma once

#include <cstdint>
#include <functional>
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
  // The row's binding to its RunConfig member: `read` stores a JSON value (refusing a value of
  // the wrong type with a ConfigError naming `path`), `write` gives the member as JSON.
  std::function<void(RunConfig&, const json&, const std::string& path)> read;
  std::function<json(const RunConfig&)> write;

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
