// File ▸ Export image: the current view as PNG (any view: the widget as drawn) or SVG (any
// view: the widget drawn through svg_export's SVG paint engine; the explainer's stage is
// written directly as vector shapes from explain_model, explainStageSvg).
#pragma once

#include <QString>

class QWidget;

namespace ulysses::ui {

struct Explanation;

// PNG (or any raster suffix Qt writes) of `w`, SVG for a .svg name; false with *error on failure.
bool exportWidgetImage(QWidget* w, const QString& path, QString* error);
// SVG text of one explainer stage (self-contained, no external reference).
QString explainStageSvg(const Explanation& e, int stage);

}  // namespace ulysses::ui
