// The launcher form's fields: one row per RunConfig key the user can edit, with its kind
// (integer, number, text, choice, check box), label and help text.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

namespace ulysses::ui {

enum class FieldKind { Integer, Number, Text, Path, Choice, Check };

struct FieldSpec {
  QString section;  // model | parallel | train | data | profile
  QString key;      // RunConfig key, as in the JSON
  FieldKind kind;
  QString label;
  QString help;
  QStringList choices;  // FieldKind::Choice
  QString dotted() const { return section + QLatin1Char('.') + key; }
};

const QVector<FieldSpec>& configFields();

}  // namespace ulysses::ui
