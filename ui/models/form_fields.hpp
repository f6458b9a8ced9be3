// The launcher form's fields, generated from the config's own field table
// (engine/config/config_fields.hpp): one row per key the table marks in_form, as Qt
// strings, in the table's order. No field is written here: the parser knows only the keys with
// a row there; one without in_form has no widget (tests/ui/test_ui_launcher checks the form
// against the table).
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

#include "config_fields.hpp"  // engine/config: the table

namespace ulysses::ui {

using FieldKind = ulysses::FieldKind;

struct FieldSpec {
  QString section;  // model | parallel | train | data | profile | faults
  QString key;      // RunConfig key, as in the JSON
  FieldKind kind;
  QString label;
  QString help;
  QStringList choices;                 // FieldKind::Choice
  const ConfigField* field = nullptr;  // the engine's row
  QString dotted() const { return section + QLatin1Char('.') + key; }
};

const QVector<FieldSpec>& configFields();

}  // namespace ulysses::ui
