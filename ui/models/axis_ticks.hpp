// Tick placement for the studio's value axes: a "nice" interval (1, 2 or 5 x 10^k) and as
// many decimals as that interval needs, so that no two tick labels read the same. Qt Charts'
// default (a fixed tick count with a fixed label format) labels steps 0..1 "0 0 0 1 1" and
// a loss between 5.527 and 5.535 "5.53" five times.
#pragma once

#include <QList>
#include <QPointF>
#include <QString>
#include <QStringList>

namespace ulysses::ui {

struct AxisTicks {
  double interval = 1;  // between ticks (QValueAxis::setTickInterval)
  double anchor = 0;    // a tick value, a multiple of interval (QValueAxis::setTickAnchor)
  int decimals = 0;     // digits after the point that tell ticks `interval` apart
  QString format;       // QValueAxis::setLabelFormat: "%.<decimals>f"
};

// Ticks for [lo, hi] with at most max_ticks of them inside; integers: the interval is a whole
// number (steps). A range that is empty, reversed or not finite gets interval 1.
AxisTicks nice_axis_ticks(double lo, double hi, int max_ticks, bool integers);

// The labels Qt draws for those ticks over [lo, hi] (for tests and tooltips).
QStringList axis_tick_labels(const AxisTicks& t, double lo, double hi);

// A line of many points as drawn in at most about 2 x buckets: consecutive points in
// `buckets` groups of equal count, each group its lowest and highest point in x order (first
// and last points kept), so every peak and dip still shows. Points at most 2 x buckets: as
// they are. (Qt Charts strokes every point of a line on each paint: a 20 000-step run's
// monitor would take 70 s to open and paint.)
QList<QPointF> decimate_line(const QList<QPointF>& pts, int buckets);

// A loss or other metric for a label: 4 decimals in a sane range, else 6 significant digits
// ("-1e+308", not 309 digits that widened the window past any --size).
QString format_metric(double v);

// Text for a label that must stay short: at most max_chars characters, the rest counted
// ("... (N more characters)"). (A 100 000-character run.json message would make the monitor a
// million pixels wide and the screenshot fail; the label also ignores its text's width, see
// MonitorPage.)
QString label_safe(const QString& text, int max_chars = 600);

}  // namespace ulysses::ui
