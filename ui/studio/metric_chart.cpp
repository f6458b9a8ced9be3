// Line chart of one metric over steps.
#include "metric_chart.hpp"

#include <QChart>
#include <QEvent>
#include <QPen>
#include <QLineSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

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
  ax_->setLabelFormat(QStringLiteral("%d"));
  ay_ = new QValueAxis(chart);
  ay_->setTitleText(unit);
  ay_->setLabelFormat(QStringLiteral("%.3g"));
  chart->addAxis(ax_, Qt::AlignBottom);
  chart->addAxis(ay_, Qt::AlignLeft);
  series_->attachAxis(ax_);
  series_->attachAxis(ay_);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumHeight(160);
  applyPalette();
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
  }
}

void MetricChart::changeEvent(QEvent* e) {
  QChartView::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) applyPalette();
}

void MetricChart::append(double x, double y) { appendMany({QPointF(x, y)}); }

void MetricChart::appendMany(const QList<QPointF>& points) {
  if (points.isEmpty()) return;
  bool first = series_->count() == 0;
  for (const QPointF& p : points) {
    if (first) {
      minY_ = maxY_ = p.y();
      first = false;
    } else {
      minY_ = std::min(minY_, p.y());
      maxY_ = std::max(maxY_, p.y());
    }
    maxX_ = std::max(maxX_, p.x());
  }
  series_->append(points);
  ax_->setRange(0, std::max(1.0, maxX_));
  const double pad = std::max(1e-9, (maxY_ - minY_) * 0.08);
  ay_->setRange(minY_ - pad, maxY_ + pad);
  ay_->setLabelFormat(std::max(std::abs(minY_), std::abs(maxY_)) >= 1000 ? QStringLiteral("%.0f")
                                                                         : QStringLiteral("%.3g"));
}

void MetricChart::clear() {
  series_->clear();
  minY_ = maxY_ = maxX_ = 0;
  ax_->setRange(0, 1);
  ay_->setRange(0, 1);
}

int MetricChart::count() const { return series_->count(); }
QList<QPointF> MetricChart::points() const { return series_->points(); }

}  // namespace ulysses::ui
