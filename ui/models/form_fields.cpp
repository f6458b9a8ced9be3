// The launcher form's fields, generated from engine/config/config_fields (see form_fields.hpp).
#include "form_fields.hpp"

namespace ulysses::ui {

const QVector<FieldSpec>& configFields() {
  static const QVector<FieldSpec> t = [] {
    QVector<FieldSpec> out;
    for (const auto& f : config_fields()) {
      if (!f.in_form) continue;
      QStringList choices;
      for (const auto& c : f.choices) choices << QString::fromStdString(c);
      out.push_back({QString::fromStdString(f.section), QString::fromStdString(f.key), f.kind,
                     QString::fromStdString(f.label), QString::fromStdString(f.doc), choices, &f});
    }
    return out;
  }();
  return t;
}

}  // namespace ulysses::ui
