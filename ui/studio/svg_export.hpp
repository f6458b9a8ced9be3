// SVG export of any studio view without Qt Svg (which the studio does not link): a paint
// device whose paint engine writes what a QPainter draws as SVG elements, so
// QWidget::render() of a page (its child widgets, charts and custom painting included)
// becomes a vector drawing. Paths, rectangles, lines, polygons and text stay vectors (text
// as <text>, selectable in a browser); pixmaps and images the styles draw are embedded as
// base64 PNG data, so the file references nothing outside itself. Clipping is kept (each
// state's clip as a <clipPath>); gradients are drawn in their first stop's colour.
#pragma once

#include <QString>

class QWidget;

namespace ulysses::ui {

// The SVG text of `w` as it would be drawn now (its current size), or "" for no widget.
QString widgetSvg(QWidget* w);
// Writes widgetSvg(w) to `path`; false with *error when nothing can be drawn or written.
bool exportWidgetSvg(QWidget* w, const QString& path, QString* error);

}  // namespace ulysses::ui
