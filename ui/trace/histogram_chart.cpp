// The range statistics' histogram with axes (see histogram_chart.hpp).
#include "trace/histogram_chart.hpp"

#include <QPainter>
#include <algorithm>
#include <cmath>

namespace ulysses::ui {

std::vector<double> log_ticks_125(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !(hi >= lo) || !std::isfinite(hi)) return out;
  for (int e = int(std::floor(std::log10(lo))) - 1; e <= int(std::ceil(std::log10(hi))); ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
    }
  return out;
}

double round_125(double v, bool up) {
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  const double steps[] = {0.1, 0.2, 0.5, 1, 2, 5, 10};
  if (up) {
    for (double m : steps)
      if (m * p >= v * (1 - 1e-12)) return m * p;
    return 10 * p;
  }
  double best = 0.1 * p;
  for (double m : steps)
    if (m * p <= v * (1 + 1e-12)) best = m * p;
  return best;
}

std::vector<int64_t> count_ticks_125(int64_t top, int max_ticks) {
  top = std::max<int64_t>(1, top);
  int64_t step = 1;
  for (int64_t p = 1;; p *= 10) {
    bool found = false;
    for (int64_t m : {1, 2, 5})
      if ((top + m * p - 1) / (m * p) <= max_ticks) {
        step = m * p;
        found = true;
        break;
      }
    if (found) break;
  }
  std::vector<int64_t> out;
  for (int64_t v = 0; v < top + step; v += step) out.push_back(v);
  return out;
}

QString tick_label(double v) {
  const int decimals = v > 0 && v < 1 ? int(std::ceil(-std::log10(v) - 1e-9)) : 0;
  return QString::number(v, 'f', std::clamp(decimals, 0, 9));
}

HistogramChart::HistogramChart(QWidget* parent) : QWidget(parent) {
  setMinimumSize(240, 150);
  setObjectName(QStringLiteral("rangeHistogram"));
}

void HistogramChart::setHistogram(const QString& title, const QVector<qint64>& counts, qint64 lo_ns, qint64 hi_ns) {
  title_ = title;
  counts_ = counts;
  lo_ms_ = double(std::max<qint64>(1, lo_ns)) / 1e6;
  hi_ms_ = std::max(lo_ms_, double(hi_ns) / 1e6);
  axis_lo_ = round_125(lo_ms_, false);
  axis_hi_ = round_125(hi_ms_, true);
  if (axis_hi_ <= axis_lo_) axis_hi_ = round_125(axis_lo_ * 1.5, true);
  update();
}

QRectF HistogramChart::plotRect() const {
  const QFontMetrics fm = fontMetrics();
  const double left = fm.horizontalAdvance(QStringLiteral("00000")) + fm.height() + 10;
  const double top = fm.height() + 8, bottom = 2 * fm.height() + 12;
  return QRectF(left, top, std::max(10.0, width() - left - 12), std::max(10.0, height() - top - bottom));
}

double HistogramChart::xOf(double ms) const {
  const QRectF r = plotRect();
  if (axis_hi_ <= axis_lo_) return r.left() + r.width() / 2;
  return r.left() + r.width() * std::log(ms / axis_lo_) / std::log(axis_hi_ / axis_lo_);
}

int64_t HistogramChart::yTop() const {
  qint64 top = 1;
  for (qint64 c : counts_) top = std::max(top, c);
  return count_ticks_125(top).back();
}

double HistogramChart::yOf(double count) const {
  const QRectF r = plotRect();
  return r.bottom() - r.height() * count / double(yTop());
}

QRectF HistogramChart::barRect(int k) const {
  const int n = int(counts_.size());
  if (k < 0 || k >= n) return {};
  const QRectF r = plotRect();
  // Bucket k holds [lo (hi/lo)^(k/n), lo (hi/lo)^((k+1)/n)) (log_histogram); one bucket when hi = lo.
  const double ratio = hi_ms_ > lo_ms_ ? hi_ms_ / lo_ms_ : 1.0;
  double x0 = xOf(lo_ms_ * std::pow(ratio, double(k) / n)), x1 = xOf(lo_ms_ * std::pow(ratio, double(k + 1) / n));
  if (x1 - x0 < 2) x1 = x0 + 2;
  return QRectF(QPointF(x0 + 0.5, yOf(double(counts_[k]))), QPointF(x1 - 0.5, r.bottom()));
}

QVector<HistogramChart::Tick> HistogramChart::xTicks() const {
  QVector<Tick> out;
  if (counts_.isEmpty()) return out;
  const std::vector<double> v = log_ticks_125(axis_lo_, axis_hi_);
  const size_t every = v.size() > 9 ? (v.size() + 8) / 9 : 1;  // at most about nine labels
  for (size_t i = 0; i < v.size(); i += every) out.push_back({v[i], tick_label(v[i]), xOf(v[i])});
  if (!v.empty() && (v.size() - 1) % every != 0) out.push_back({v.back(), tick_label(v.back()), xOf(v.back())});
  return out;
}

QVector<HistogramChart::Tick> HistogramChart::yTicks() const {
  QVector<Tick> out;
  if (counts_.isEmpty()) return out;
  for (int64_t v : count_ticks_125(yTop())) out.push_back({double(v), QString::number(v), yOf(double(v))});
  return out;
}

void HistogramChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette pal = palette();
  p.fillRect(rect(), pal.color(QPalette::Base));
  const QColor ink = pal.color(QPalette::Text);
  const QFontMetrics fm = fontMetrics();
  if (counts_.isEmpty()) {
    p.setPen(ink);
    p.drawText(rect(), Qt::AlignCenter, tr("Select a row of the statistics for its histogram"));
    return;
  }
  const QRectF r = plotRect();
  p.setPen(ink);
  p.drawText(QRectF(0, 2, width(), fm.height() + 4), Qt::AlignHCenter | Qt::AlignTop,
             fm.elidedText(title_, Qt::ElideMiddle, width() - 8));
  for (int k = 0; k < counts_.size(); ++k)
    if (counts_[k] > 0) p.fillRect(barRect(k), QColor(0x1E, 0x88, 0xE5));
  p.setPen(ink);
  p.drawLine(r.bottomLeft(), r.bottomRight());
  p.drawLine(r.bottomLeft(), r.topLeft());
  for (const Tick& t : xTicks()) {
    p.drawLine(QPointF(t.pos, r.bottom()), QPointF(t.pos, r.bottom() + 4));
    p.drawText(QRectF(t.pos - 40, r.bottom() + 5, 80, fm.height()), Qt::AlignHCenter | Qt::AlignTop, t.label);
  }
  for (const Tick& t : yTicks()) {
    p.drawLine(QPointF(r.left() - 4, t.pos), QPointF(r.left(), t.pos));
    p.drawText(QRectF(0, t.pos - fm.height() / 2.0, r.left() - 6, fm.height()), Qt::AlignRight | Qt::AlignVCenter,
               t.label);
  }
  p.drawText(QRectF(r.left(), r.bottom() + fm.height() + 6, r.width(), fm.height() + 4), Qt::AlignHCenter, xTitle());
  p.save();
  p.translate(fm.height() / 2.0 + 2, r.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-r.height() / 2, -fm.height() / 2.0, r.height(), fm.height() + 2), Qt::AlignCenter, yTitle());
  p.restore();
}

}  // namespace ulysses::ui
