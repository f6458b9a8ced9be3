// The duration histogram of one range-statistics row, drawn large with its axes: durations on
// a log axis (the buckets are log-spaced, log_histogram) with ticks at 1, 2 and 5 x 10^k ms and
// the unit in the axis title, counts on a linear axis with 1-2-5 ticks. The table's cells keep
// their sparklines; this chart shows the selected row's (else the first row's).
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>
#include <cstdint>
#include <utility>
#include <vector>

namespace ulysses::ui {

// 1, 2 and 5 x 10^k inside [lo, hi] (lo > 0), ascending; empty when none falls inside.
std::vector<double> log_ticks_125(double lo, double hi);
// The largest 1, 2 or 5 x 10^k <= v (down) or the smallest >= v (up); v > 0.
double round_125(double v, bool up);
// 0 and 1, 2 or 5 x 10^k apart up to the first tick >= top (top > 0), at most max_ticks + 1.
std::vector<int64_t> count_ticks_125(int64_t top, int max_ticks = 5);
// A tick's label with the digits it needs: 0.05, 0.2, 1, 20.
QString tick_label(double v);

class HistogramChart : public QWidget {
  Q_OBJECT
 public:
  explicit HistogramChart(QWidget* parent = nullptr);
  // Bucket counts over [lo_ns, hi_ns] (log-spaced); an empty `counts` clears the chart.
  void setHistogram(const QString& title, const QVector<qint64>& counts, qint64 lo_ns, qint64 hi_ns);
  QString title() const { return title_; }
  // What the axes show (for tests): tick values, their labels and pixel positions.
  struct Tick {
    double value = 0;
    QString label;
    double pos = 0;  // x (duration axis) or y (count axis), widget pixels
  };
  QVector<Tick> xTicks() const;
  QVector<Tick> yTicks() const;
  QString xTitle() const { return QStringLiteral("duration (ms, log scale)"); }
  QString yTitle() const { return QStringLiteral("ranges"); }
  // The duration axis: [round_125(min, down), round_125(max, up)] ms (a wider step when they
  // meet), so both ends carry a tick whatever the span.
  std::pair<double, double> axisSpanMs() const { return {axis_lo_, axis_hi_}; }
  // The plot area (widget pixels) and the bar of bucket k (its log-spaced span of durations).
  QRectF plotRect() const;
  QRectF barRect(int k) const;
  QSize sizeHint() const override { return {360, 200}; }

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  double xOf(double ms) const;  // duration (ms) -> widget x
  double yOf(double count) const;
  int64_t yTop() const;
  QString title_;
  QVector<qint64> counts_;
  double lo_ms_ = 0, hi_ms_ = 0, axis_lo_ = 0, axis_hi_ = 0;
};

}  // namespace ulysses::ui
