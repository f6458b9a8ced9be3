// Line chart of one metric over steps.
#include "metric_chart.hpp"

#include "axis_ticks.hpp"

#include <QChart>
#include <QEvent>
#include <QPainter>
#include <QPen>
#include <QLineSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>
#include <tuple>

namespace ulysses::ui {

MetricChart::MetricChart(const QString& title, const QString& unit, QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart;
  chart->setTitle(title);
  chart->legend()->hide();
  chart->setMargins(QMargins(4, 4, 4, 4));
  series_ = new QLineSeries(chart);
  chart->addSeries(series_);
  ax_ = new QValueAxis(chart);
  ax_->setTitleText(QStringLiteral("step"));
  ay_ = new QValueAxis(chart);
  ay_->setTitleText(unit);
  chart->addAxis(ax_, Qt::AlignBottom);
  chart->addAxis(ay_, Qt::AlignLeft);
  series_->attachAxis(ax_);
  series_->attachAxis(ay_);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumHeight(160);
  applyPalette();
  applyFonts();
  clear();
}

void MetricChart::applyPalette() {
  const bool dark = palette().color(QPalette::Window).lightness() < 128;
  const auto theme = dark ? QChart::ChartThemeDark : QChart::ChartThemeLight;
  if (chart()->theme() != theme) {
    chart()->setTheme(theme);
    QPen pen(dark ? QColor(0x5a, 0xb0, 0xff) : QColor(0x20, 0x7a, 0xd0));
    pen.setWidthF(2.0);
    series_->setPen(pen);
    applyFonts();  // a theme brings its own fonts
  }
}

void MetricChart::changeEvent(QEvent* e) {
  QChartView::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) applyPalette();
  if (e->type() == QEvent::FontChange) applyFonts();
}

// Qt Charts keeps fonts of its own (its theme's): the title, axis labels and axis titles follow
// the widget's font instead, so presentation mode's 1.5x bold font enlarges them too.
void MetricChart::applyFonts() {
  const QFont f = font();
  QFont title = f;
  title.setBold(true);
  chart()->setTitleFont(title);
  for (QValueAxis* a : {ax_, ay_}) {
    a->setLabelsFont(f);
    a->setTitleFont(f);
  }
}

void MetricChart::append(double x, double y) { appendMany({QPointF(x, y)}); }

void MetricChart::appendMany(const QList<QPointF>& points) {
  QList<QPointF> finite;  // a NaN or infinite loss is no point on the line (nor in the axes)
  finite.reserve(points.size());
  for (const QPointF& p : points) {
    if (!std::isfinite(p.x()) || !std::isfinite(p.y())) continue;
    if (data_.isEmpty() && finite.isEmpty()) {
      minY_ = maxY_ = p.y();
    } else {
      minY_ = std::min(minY_, p.y());
      maxY_ = std::max(maxY_, p.y());
    }
    maxX_ = std::max(maxX_, p.x());
    finite.append(p);
  }
  if (finite.isEmpty()) return;
  data_.append(finite);
  // Up to kMaxDrawn points the line is the data (appended); past it, its min/max outline.
  if (data_.size() <= kMaxDrawn) {
    series_->append(finite);
  } else {
    series_->replace(decimate_line(data_, kMaxDrawn / 2));
  }
  setRanges(0, std::max(1.0, maxX_), minY_, maxY_);
}

void MetricChart::setRanges(double x0, double x1, double y0, double y1) {
  // A flat line sits in the middle of a band 10% of its value (or 1) wide.
  const double pad = y1 > y0 ? (y1 - y0) * 0.08 : (y0 != 0 ? std::fabs(y0) * 0.05 : 1.0);
  y0 -= pad;
  y1 += pad;
  // Ticks 1, 2 or 5 x 10^k apart, labelled with the decimals that tell them apart. The axis
  // lays its ticks out on every change: with the old interval still dynamic, a range a
  // million intervals wide makes a million tick items (and hangs in Qt). So: fixed ticks
  // while range, anchor and interval change, dynamic again once all three agree.
  const AxisTicks tx = nice_axis_ticks(x0, x1, 6, true), ty = nice_axis_ticks(y0, y1, 6, false);
  for (auto [a, lo, hi, t] : {std::tuple{ax_, x0, x1, &tx}, std::tuple{ay_, y0, y1, &ty}}) {
    a->setTickType(QValueAxis::TicksFixed);
    a->setRange(lo, hi);
    a->setTickAnchor(t->anchor);
    a->setTickInterval(t->interval);
    a->setLabelFormat(t->format);
    a->setTickType(QValueAxis::TicksDynamic);
  }
}

QStringList MetricChart::tickLabels(Qt::Orientation o) const {
  const QValueAxis* a = o == Qt::Horizontal ? ax_ : ay_;
  AxisTicks t;
  t.interval = a->tickInterval();
  t.anchor = a->tickAnchor();
  t.format = a->labelFormat();
  return axis_tick_labels(t, a->min(), a->max());
}

void MetricChart::setMarkers(const QList<double>& xs, const QString& label) {
  markers_ = xs;
  markerLabel_ = label;
  viewport()->update();
}

int MetricChart::markerPixelX(double x) const {
  const QPointF scene = chart()->mapToScene(chart()->mapToPosition(QPointF(x, ay_->min()), series_));
  return mapFromScene(scene).x();
}

void MetricChart::drawForeground(QPainter* p, const QRectF& rect) {
  QChartView::drawForeground(p, rect);
  if (markers_.isEmpty()) return;
  p->save();
  QPen pen(QColor(0xFF, 0x8F, 0x00));
  pen.setWidthF(2.0);
  pen.setStyle(Qt::DashLine);
  p->setPen(pen);
  for (double x : markers_) {
    if (x < ax_->min() || x > ax_->max()) continue;
    const QPointF top = chart()->mapToScene(chart()->mapToPosition(QPointF(x, ay_->max()), series_));
    const QPointF bottom = chart()->mapToScene(chart()->mapToPosition(QPointF(x, ay_->min()), series_));
    p->drawLine(top, bottom);
    p->drawText(top + QPointF(4, 12), markerLabel_);
  }
  p->restore();
}

void MetricChart::clear() {
  markers_.clear();
  series_->clear();
  data_.clear();
  minY_ = maxY_ = maxX_ = 0;
  setRanges(0, 1, 0, 1);
}

int MetricChart::count() const { return int(data_.size()); }
QList<QPointF> MetricChart::points() const { return data_; }
int MetricChart::drawnPoints() const { return series_->count(); }

QFont MetricChart::axisLabelFont() const { return ax_->labelsFont(); }

QFont MetricChart::titleFont() const { return chart()->titleFont(); }

}  // namespace ulysses::ui
