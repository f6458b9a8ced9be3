// The config's field table (engine/config/config_fields), the one table of config keys: each row
// binds its own member (the parser and writer go through the bindings), kinds match the
// defaults, and validate() takes its choices and integer limits from it.
#include <gtest/gtest.h>

#include <set>

#include "config_fields.hpp"
#include "run_config.hpp"

using namespace ulysses;

namespace {
bool has_issue(const std::vector<ConfigIssue>& v, const std::string& field, const std::string& text = "") {
  for (const auto& i : v)
    if (i.field == field && i.message.find(text) != std::string::npos) return true;
  return false;
}

// A value of the field's kind that differs from its default.
json other_value(const ConfigField& f) {
  switch (f.kind) {
    case FieldKind::Integer:
      return f.default_value.get<int64_t>() + 7;
    case FieldKind::Number:
      return f.default_value.get<double>() + 0.25;
    case FieldKind::Check:
      return !f.default_value.get<bool>();
    case FieldKind::Text:
    case FieldKind::Path:
      return f.default_value.get<std::string>() + "other/place";
    case FieldKind::Choice:
      for (const auto& c : f.choices)
        if (c != f.default_value.get<std::string>()) return c;
  }
  return nullptr;
}
}  // namespace

TEST(ConfigFields, EveryRowBindsItsOwnMember) {
  std::set<std::string> table;
  for (const auto& f : config_fields()) EXPECT_TRUE(table.insert(f.dotted()).second) << "listed twice: " << f.dotted();
  EXPECT_GE(table.size(), 50u);
  const json defaults = RunConfig{}.to_json();
  size_t keys = 0;
  for (auto s = defaults.begin(); s != defaults.end(); ++s) keys += s.value().size();
  EXPECT_EQ(keys, table.size()) << "the writer writes a key the table has no row for, or leaves one out";
  for (const auto& f : config_fields()) {
    SCOPED_TRACE(f.dotted());
    // Through the row's binding and through the parser, only this key changes, and it reads back.
    const json v = other_value(f);
    ASSERT_FALSE(v.is_null()) << "a choice field with one choice";
    RunConfig c;
    f.read(c, v, f.dotted());
    EXPECT_EQ(f.write(c), v);
    json expected = defaults;
    expected[f.section][f.key] = v;
    EXPECT_EQ(json::diff(expected, c.to_json()), json::array()) << "other keys changed too";
    json file = json::object();
    file[f.section][f.key] = v;
    EXPECT_EQ(json::diff(expected, RunConfig::from_json(file).to_json()), json::array());
    // A value of another type is refused with the key's path.
    const json wrong = f.kind == FieldKind::Check ? json("yes") : json(json::array());
    try {
      RunConfig d;
      f.read(d, wrong, "x." + f.key);
      ADD_FAILURE() << "accepted " << wrong.dump();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("x." + f.key), std::string::npos) << e.what();
    }
    EXPECT_EQ(find_config_field(f.dotted()), &f);
    EXPECT_FALSE(f.label.empty());
    EXPECT_FALSE(f.doc.empty());
    if (!f.in_form) {
      EXPECT_NE(f.doc.find("no form field"), std::string::npos) << "say why it has no field";
    }
  }
  EXPECT_EQ(find_config_field("train.no_such_key"), nullptr);
  EXPECT_THROW(RunConfig::from_json(json::parse(R"({"train": {"no_such_key": 1}})")), ConfigError);
}

TEST(ConfigFields, KindsMatchTheDefaults) {
  const json d = RunConfig{}.to_json();
  for (const auto& f : config_fields()) {
    SCOPED_TRACE(f.dotted());
    EXPECT_EQ(f.default_value, d[f.section][f.key]);
    switch (f.kind) {
      case FieldKind::Integer:
        EXPECT_TRUE(f.default_value.is_number_integer());
        break;
      case FieldKind::Number:
        EXPECT_TRUE(f.default_value.is_number_float());
        break;
      case FieldKind::Check:
        EXPECT_TRUE(f.default_value.is_boolean());
        break;
      case FieldKind::Text:
      case FieldKind::Path:
        EXPECT_TRUE(f.default_value.is_string());
        break;
      case FieldKind::Choice:
        ASSERT_TRUE(f.default_value.is_string());
        EXPECT_NE(std::find(f.choices.begin(), f.choices.end(), f.default_value.get<std::string>()), f.choices.end());
        break;
    }
    if (f.kind != FieldKind::Choice) {
      EXPECT_TRUE(f.choices.empty());
    }
    if (f.kind != FieldKind::Integer) {
      EXPECT_FALSE(f.min || f.max);
    }
  }
}

// validate() refuses a value outside the choices with the table's list, and accepts each choice.
TEST(ConfigFields, ValidateUsesTheTablesChoices) {
  int checked = 0;
  for (const auto& f : config_fields()) {
    if (f.kind != FieldKind::Choice) continue;
    SCOPED_TRACE(f.dotted());
    json j = RunConfig{}.to_json();
    // The gradient and gather dtypes' bf16 choices run only in bf16 training at ZeRO stage 3
    // (docs/ZERO.md; refused elsewhere, ZeroConfig tests): each choice is tried where it can run.
    if (f.dotted() == "train.grad_accum_dtype" || f.dotted() == "train.grad_reduce_dtype" ||
        f.dotted() == "train.gather_dtype") {
      j["train"]["dtype"] = "bfloat16";
      j["train"]["zero_stage"] = 3;
    }
    j[f.section][f.key] = "bogus";
    EXPECT_TRUE(has_issue(validate(RunConfig::from_json(j)), f.dotted(),
                          f.dotted() + " must be " + choice_list(f) + ", got 'bogus'"));
    for (const auto& c : f.choices) {
      j[f.section][f.key] = c;
      EXPECT_FALSE(has_issue(validate(RunConfig::from_json(j)), f.dotted())) << c;
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
  EXPECT_EQ(choice_list(*find_config_field("train.device")), "auto, cpu or cuda");
}

// validate() refuses one below the table's min and one above its max on that field.
TEST(ConfigFields, ValidateUsesTheTablesLimits) {
  int checked = 0;
  for (const auto& f : config_fields()) {
    if (f.kind != FieldKind::Integer) continue;
    SCOPED_TRACE(f.dotted());
    for (auto v : {f.min ? std::optional<int64_t>(*f.min - 1) : std::nullopt,
                   f.max ? std::optional<int64_t>(*f.max + 1) : std::nullopt}) {
      if (!v) continue;
      json j = RunConfig{}.to_json();
      j[f.section][f.key] = *v;
      EXPECT_TRUE(has_issue(validate(RunConfig::from_json(j)), f.dotted())) << *v << " accepted";
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(ConfigFields, TextToValueAsSetReadsIt) {
  const auto& steps = *find_config_field("train.steps");
  EXPECT_EQ(field_value_from_text(steps, " 7 "), json(7));
  EXPECT_EQ(field_value_from_text(steps, "abc"), json("abc"));  // the parser names it
  EXPECT_EQ(field_value_from_text(steps, "1e999"), json("1e999"));
  EXPECT_EQ(field_value_from_text(*find_config_field("profile.enabled"), "false"), json(false));
  EXPECT_EQ(field_value_from_text(*find_config_field("data.path"), " /a b "), json("/a b"));
  EXPECT_EQ(field_value_from_text(*find_config_field("train.dtype"), "bfloat16"), json("bfloat16"));
}
