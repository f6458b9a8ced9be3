// File ▸ Export image: the current view as PNG (any view: the widget as drawn) or SVG (the
// explainer: its stage written as vector shapes from explain_model; other views have no
// vector form without Qt Svg, which the studio does not link, and say so).
#pragma once

#include <QString>

class QWidget;

namespace ulysses::ui {

struct Explanation;

// PNG (or any raster suffix Qt writes) of `w`; false with *error on failure.
bool exportWidgetImage(QWidget* w, const QString& path, QString* error);
// SVG text of one explainer stage (self-contained, no external reference).
QString explainStageSvg(const Explanation& e, int stage);

}  // namespace ulysses::ui
