#include "axis_ticks.hpp"

#include <algorithm>
#include <cmath>

namespace ulysses::ui {

AxisTicks nice_axis_ticks(double lo, double hi, int max_ticks, bool integers) {
  AxisTicks t;
  const double span = hi - lo;
  max_ticks = std::max(2, max_ticks);
  if (std::isfinite(lo) && std::isfinite(hi) && std::isfinite(span) && span > 0) {
    // The smallest 1, 2 or 5 x 10^k that puts at most max_ticks ticks in the range.
    const double raw = span / (max_ticks - 1);
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    t.interval = 10 * p;
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * p >= raw * (1 - 1e-12)) {
        t.interval = m * p;
        break;
      }
    }
    if (!(t.interval > 0) || !std::isfinite(t.interval)) t.interval = 1;
  }
  if (integers) t.interval = std::max(1.0, std::round(t.interval));
  t.decimals = t.interval >= 1 ? 0 : std::clamp(static_cast<int>(std::ceil(-std::log10(t.interval) - 1e-9)), 0, 15);
  t.anchor = std::isfinite(lo) ? std::floor(lo / t.interval) * t.interval : 0;
  if (!std::isfinite(t.anchor)) t.anchor = 0;
  t.format = QStringLiteral("%.") + QString::number(t.decimals) + QStringLiteral("f");
  // Huge values in the shortest form: a loss of 1e308 would get 309-digit tick labels.
  if (std::isfinite(lo) && std::isfinite(hi) && std::max(std::fabs(lo), std::fabs(hi)) >= 1e9)
    t.format = QStringLiteral("%.4g");
  return t;
}

QStringList axis_tick_labels(const AxisTicks& t, double lo, double hi) {
  QStringList out;
  if (!(t.interval > 0) || !std::isfinite(lo) || !std::isfinite(hi) || hi < lo) return out;
  const double first = std::ceil((lo - t.anchor) / t.interval - 1e-9);
  for (double k = first; out.size() < 1000; ++k) {
    double v = t.anchor + k * t.interval;
    if (std::fabs(v) < t.interval * 1e-9) v = 0;  // not "-0.000"

    if (v > hi + t.interval * 1e-9) break;
    out << QString::asprintf(t.format.toLatin1().constData(), v);
  }
  return out;
}

QList<QPointF> decimate_line(const QList<QPointF>& pts, int buckets) {
  buckets = std::max(1, buckets);
  const qsizetype n = pts.size();
  if (n <= 2 * qsizetype(buckets)) return pts;
  QList<QPointF> out;
  out.reserve(2 * buckets + 2);
  out.append(pts.front());
  for (int b = 0; b < buckets; ++b) {
    const qsizetype lo = std::max<qsizetype>(1, n * b / buckets),
                    hi = std::min<qsizetype>(n - 1, n * (b + 1) / buckets);
    if (lo >= hi) continue;
    qsizetype imin = lo, imax = lo;
    for (qsizetype i = lo + 1; i < hi; ++i) {
      if (pts[i].y() < pts[imin].y()) imin = i;
      if (pts[i].y() > pts[imax].y()) imax = i;
    }
    out.append(pts[std::min(imin, imax)]);
    if (imin != imax) out.append(pts[std::max(imin, imax)]);
  }
  out.append(pts.back());
  return out;
}

QString format_metric(double v) {
  if (std::isfinite(v) && std::fabs(v) < 1e6) return QString::number(v, 'f', 4);
  return QString::number(v, 'g', 6);
}

QString label_safe(const QString& text, int max_chars) {
  if (text.size() <= max_chars) return text;
  return text.left(max_chars) + QStringLiteral("... (%1 more characters)").arg(text.size() - max_chars);
}

}  // namespace ulysses::ui
