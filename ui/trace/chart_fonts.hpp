// Qt Charts draws its titles, legends and axis labels in fonts of its own (its theme's), not the
// widget's: presentation mode's 1.5x bold font left the charts small. follow_widget_font makes a
// chart view's chart (title, legend, every axis, also axes added later) use the view's font.
#pragma once

class QChart;
class QChartView;
class QFont;

namespace ulysses::ui {

void follow_widget_font(QChartView* view);
// Sets the chart's title (bold), legend and axes' label and title fonts to `f` (no-op where equal).
void apply_chart_font(QChart* chart, const QFont& f);

}  // namespace ulysses::ui
