// Line chart of one metric over steps.
#include "metric_chart.hpp"

#include <QChart>
#include <QLineSeries>
#include <QValueAxis>
#include <algorithm>

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
  clear();
}

void MetricChart::append(double x, double y) {
  if (series_->count() == 0) {
    minY_ = maxY_ = y;
  } else {
    minY_ = std::min(minY_, y);
    maxY_ = std::max(maxY_, y);
  }
  maxX_ = std::max(maxX_, x);
  series_->append(x, y);
  ax_->setRange(0, std::max(1.0, maxX_));
  const double pad = std::max(1e-9, (maxY_ - minY_) * 0.08);
  ay_->setRange(minY_ - pad, maxY_ + pad);
}

void MetricChart::clear() {
  series_->clear();
  minY_ = maxY_ = maxX_ = 0;
  ax_->setRange(0, 1);
  ay_->setRange(0, 1);
}

int MetricChart::count() const { return series_->count(); }

}  // namespace ulysses::ui
