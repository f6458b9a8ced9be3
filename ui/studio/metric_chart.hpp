// One Qt Charts line chart of a metric over steps, with axes that follow the data.
#pragma once

#include <QChartView>
#include <QList>
#include <QPointF>

class QLineSeries;
class QValueAxis;

namespace ulysses::ui {

class MetricChart : public QChartView {
  Q_OBJECT
 public:
  MetricChart(const QString& title, const QString& unit, QWidget* parent = nullptr);
  void append(double x, double y);
  // Many points at once, the axes set once: a point at a time redraws the whole line each
  // time (10 000 steps would take a minute to open).
  void appendMany(const QList<QPointF>& points);
  void clear();
  int count() const;              // points appended (finite ones)
  QList<QPointF> points() const;  // those points
  int drawnPoints() const;        // points of the drawn line (at most about kMaxDrawn)
  static constexpr int kMaxDrawn = 2048;
  // Vertical marks at these x (steps), each labelled (a resumed run: where it resumed); cleared
  // by clear().
  void setMarkers(const QList<double>& xs, const QString& label);
  QList<double> markers() const { return markers_; }
  // Where the mark at x is drawn, in the view's pixels (x), for tests.
  int markerPixelX(double x) const;
  // The tick labels the axis shows now (Qt::Horizontal: steps), for tests.
  QStringList tickLabels(Qt::Orientation o) const;
  // The fonts the chart draws its axis labels and title in (they follow the widget's font).
  QFont axisLabelFont() const;
  QFont titleFont() const;

 protected:
  void changeEvent(QEvent* e) override;                           // follows the dark/light palette
  void drawForeground(QPainter* p, const QRectF& rect) override;  // the markers

 private:
  void applyPalette();
  void applyFonts();
  void setRanges(double x0, double x1, double y0, double y1);
  QLineSeries* series_;
  QValueAxis* ax_;
  QValueAxis* ay_;
  QList<QPointF> data_;  // every finite point appended
  QList<double> markers_;
  QString markerLabel_;
  double minY_ = 0, maxY_ = 0, maxX_ = 0;
};

}  // namespace ulysses::ui
