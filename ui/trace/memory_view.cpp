// Memory view (Qt Charts).
#include "trace/memory_view.hpp"

#include <QAreaSeries>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QSplitter>
#include <QTableView>
#include <QLabel>
#include <QLegend>
#include <QLineSeries>
#include <QScatterSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "trace/chart_fonts.hpp"
#include "trace/peak_tensor_table.hpp"
#include "trace/phase_style.hpp"
#include "ulysses/profiler/analysis.hpp"

namespace ulysses::ui {

std::vector<MemorySeriesPoint> memory_points(const prof::TraceModel& m, int32_t rank, int64_t t0, int64_t t1,
                                             int columns) {
  std::vector<MemorySeriesPoint> out;
  const auto& mem = m.memory;
  auto lo = std::partition_point(mem.begin(), mem.end(), [&](const prof::MemoryPoint& p) {
    return p.rank < rank || (p.rank == rank && p.t_ns < t0);
  });
  auto hi = std::partition_point(
      lo, mem.end(), [&](const prof::MemoryPoint& p) { return p.rank < rank || (p.rank == rank && p.t_ns < t1); });
  // One point before and after the window so lines reach the edges.
  if (lo != mem.begin() && std::prev(lo)->rank == rank) --lo;
  if (hi != mem.end() && hi->rank == rank) ++hi;
  const int64_t n = hi - lo;
  columns = std::max(1, columns);
  auto to_pt = [](const prof::MemoryPoint& p) {
    return MemorySeriesPoint{p.t_ns, p.allocated, p.reserved, p.peak, p.label_id};
  };
  if (n <= 2 * columns) {
    for (auto it = lo; it != hi; ++it) out.push_back(to_pt(*it));
    return out;
  }
  // Per column: the sample with the largest allocation (peaks must stay visible).
  const double span = double(std::max<int64_t>(1, t1 - t0)) / columns;
  auto it = lo;
  out.push_back(to_pt(*it));
  ++it;
  while (it != hi) {
    const int64_t col = int64_t(std::floor(double(it->t_ns - t0) / span));
    const int64_t col_end = t0 + int64_t(std::ceil(double(col + 1) * span));
    auto best = it;
    auto e = std::partition_point(it, hi, [&](const prof::MemoryPoint& p) { return p.t_ns < col_end; });
    if (e == it) e = std::next(it);
    for (auto k = it; k != e; ++k)
      if (k->allocated > best->allocated) best = k;
    out.push_back(to_pt(*best));
    it = e;
  }
  return out;
}

namespace {
// Combo box data of a "by category" entry: this offset plus the rank.
constexpr int kCategoryItem = 1 << 20;
// One colour per category (memory_categories.hpp order), distinct on the dark and light themes.
const QColor kCategoryColours[prof::kMemCategories] = {
    QColor(0x42, 0x85, 0xf4), QColor(0xab, 0x47, 0xbc), QColor(0xff, 0xa7, 0x26), QColor(0x66, 0xbb, 0x6a),
    QColor(0xef, 0x53, 0x50), QColor(0x26, 0xc6, 0xda), QColor(0x9e, 0x9e, 0x9e)};
}  // namespace

PlannedCurve planned_curve(const prof::TraceModel& m) {
  PlannedCurve planned;  // totals in the dry run's order
  for (const auto& c : m.memory_categories)
    if (c.edge == prof::MemEdge::PlannedBegin || c.edge == prof::MemEdge::PlannedEnd)
      planned[{c.phase, c.layer, c.edge == prof::MemEdge::PlannedBegin}].push_back(c.c.total());
  return planned;
}

std::vector<std::pair<int64_t, int64_t>> planned_curve_points(const prof::TraceModel& m, int32_t rank, int64_t t0,
                                                              int64_t t1) {
  return planned_curve_points(m, planned_curve(m), rank, t0, t1);
}

std::vector<std::pair<int64_t, int64_t>> planned_curve_points(const prof::TraceModel& m, const PlannedCurve& planned,
                                                              int32_t rank, int64_t t0, int64_t t1, int columns) {
  using Key = PlannedCurve::key_type;  // phase, layer, begin
  std::vector<std::pair<int64_t, int64_t>> out;
  if (planned.empty()) return out;
  const auto& all = m.memory_categories;
  auto edge_sample = [&](const prof::MemoryCategorySample& c) {
    return c.rank == rank && c.step >= 0 && (c.edge == prof::MemEdge::Begin || c.edge == prof::MemEdge::End);
  };
  auto lo = std::partition_point(all.begin(), all.end(),
                                 [&](const auto& c) { return c.rank < rank || (c.rank == rank && c.t_ns < t0); });
  // Back to the first sample of the step the window starts in, so occurrences count from there.
  int64_t first_step = -1;
  for (auto it = lo; it != all.end() && it->rank == rank; ++it)
    if (edge_sample(*it)) {
      first_step = it->step;
      break;
    }
  while (lo != all.begin()) {
    auto prev = std::prev(lo);
    if (prev->rank != rank || (edge_sample(*prev) && prev->step != first_step)) break;
    lo = prev;
  }
  std::map<Key, size_t> seen;
  int64_t step = first_step;
  for (auto it = lo; it != all.end() && it->rank == rank && it->t_ns < t1; ++it) {
    if (!edge_sample(*it)) continue;
    if (it->step != step) {
      step = it->step;
      seen.clear();
    }
    const Key k{it->phase, it->layer, it->edge == prof::MemEdge::Begin};
    const size_t n = seen[k]++;
    const auto p = planned.find(k);
    if (p == planned.end() || n >= p->second.size() || it->t_ns < t0) continue;
    out.emplace_back(it->t_ns, p->second[n]);
  }
  if (columns <= 0 || out.size() <= 2 * static_cast<size_t>(columns)) return out;
  // Folded in place to one point per pixel column, the column's largest (time order kept).
  const double span = double(std::max<int64_t>(1, t1 - t0)) / columns;
  size_t kept = 0;
  int64_t col = std::numeric_limits<int64_t>::min();
  for (const auto& pt : out) {
    const int64_t c = int64_t(std::floor(double(pt.first - t0) / span));
    if (kept == 0 || c != col) {
      out[kept++] = pt;
      col = c;
    } else if (pt.second > out[kept - 1].second) {
      out[kept - 1] = pt;
    }
  }
  out.resize(kept);
  return out;
}

std::vector<prof::MemoryCategorySample> category_points(const prof::TraceModel& m, int32_t rank, int64_t t0, int64_t t1,
                                                        int columns) {
  // The samples are sorted by (rank, time): the window is found by search, not by copying the
  // rank's samples on every zoom. The planner's row (no place in time) is skipped.
  const auto& all = m.memory_categories;
  auto lo = std::partition_point(all.begin(), all.end(),
                                 [&](const auto& c) { return c.rank < rank || (c.rank == rank && c.t_ns < t0); });
  auto hi = std::partition_point(lo, all.end(),
                                 [&](const auto& c) { return c.rank < rank || (c.rank == rank && c.t_ns < t1); });
  auto drawn = [](const prof::MemoryCategorySample& c) { return prof::is_curve_sample(c.edge); };
  // One drawn sample of the rank before and after the window so the areas reach the edges.
  for (auto it = lo; it != all.begin();) {
    --it;
    if (it->rank != rank) break;
    if (drawn(*it)) {
      lo = it;
      break;
    }
  }
  for (auto it = hi; it != all.end() && it->rank == rank; ++it)
    if (drawn(*it)) {
      hi = std::next(it);
      break;
    }
  std::vector<prof::MemoryCategorySample> out;
  columns = std::max(1, columns);
  if (std::count_if(lo, hi, drawn) <= 2 * columns) {
    std::copy_if(lo, hi, std::back_inserter(out), drawn);
    return out;
  }
  const double span = double(std::max<int64_t>(1, t1 - t0)) / columns;
  int64_t col = std::numeric_limits<int64_t>::min();
  for (auto it = lo; it != hi; ++it) {
    if (!drawn(*it)) continue;
    const int64_t c = int64_t(std::floor(double(it->t_ns - t0) / span));
    if (c != col || out.empty()) {
      out.push_back(*it);
      col = c;
    } else if (it->c.total() > out.back().c.total()) {
      out.back() = *it;  // the column's largest total: peaks stay visible
    }
  }
  return out;
}

// Under the activations row: each decoder layer's activations at the peak, largest first (at most
// 8 rows; the rest summed in one).
static QString layer_rows_html(const prof::RankMemoryRow& r) {
  auto layers = r.at_peak_layers;
  std::stable_sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  QString h;
  int64_t rest = 0;
  size_t rest_n = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i >= 8) {
      rest += layers[i].second;
      ++rest_n;
      continue;
    }
    h += QStringLiteral("<tr><td>&nbsp;&nbsp;&nbsp;%1</td><td align='right'>%2</td><td align='right'>%3%</td></tr>")
             .arg(QObject::tr("layer %1").arg(layers[i].first),
                  QString::fromStdString(format_bytes(double(layers[i].second))))
             .arg(100.0 * double(layers[i].second) / double(r.peak_bytes), 0, 'f', 1);
  }
  if (rest_n > 0)
    h += QStringLiteral("<tr><td>&nbsp;&nbsp;&nbsp;%1</td><td align='right'>%2</td><td align='right'>%3%</td></tr>")
             .arg(QObject::tr("%1 other layers").arg(rest_n), QString::fromStdString(format_bytes(double(rest))))
             .arg(100.0 * double(rest) / double(r.peak_bytes), 0, 'f', 1);
  return h;
}

QString peak_table_html(const prof::TraceModel& m, int32_t rank) {
  for (const auto& r : prof::memory_by_category(m)) {
    if (r.rank != rank || r.peak_bytes <= 0) continue;
    QString h = QObject::tr("<b>Rank %1 at its peak</b> (step %2): %3")
                    .arg(rank)
                    .arg(r.peak_step)
                    .arg(QString::fromStdString(format_bytes(double(r.peak_bytes))));
    if (r.planned_peak_bytes >= 0)
      h += QObject::tr(", planned %1").arg(QString::fromStdString(format_bytes(double(r.planned_peak_bytes))));
    h += QStringLiteral(
             "<table cellspacing='6'><tr><th align='left'>%1</th><th align='right'>%2</th>"
             "<th align='right'>%3</th>%4</tr>")
             .arg(QObject::tr("category"), QObject::tr("bytes"), QObject::tr("share"),
                  r.planned_peak_bytes >= 0 ? QObject::tr("<th align='right'>planned</th>") : QString());
    for (int k = 0; k < prof::kMemCategories; ++k) {
      const int64_t b = r.at_peak.bytes[k];
      h += QStringLiteral(
               "<tr><td><span style='color:%1'>&#9632;</span> %2</td><td align='right'>%3</td>"
               "<td align='right'>%4%</td>%5</tr>")
               .arg(kCategoryColours[k].name(), QString::fromLatin1(prof::kMemCategoryNames[k]),
                    QString::fromStdString(format_bytes(double(b))))
               .arg(100.0 * double(b) / double(r.peak_bytes), 0, 'f', 1)
               .arg(r.planned_peak_bytes >= 0
                        ? QStringLiteral("<td align='right'>%1</td>")
                              .arg(QString::fromStdString(format_bytes(double(r.planned.bytes[k]))))
                        : QString());
      if (k == static_cast<int>(prof::MemCategory::Activations)) h += layer_rows_html(r);
    }
    return h + QStringLiteral("</table>");
  }
  return {};
}

MemoryView::MemoryView(QWidget* parent) : QWidget(parent) {
  auto* lay = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  rank_box_ = new QComboBox(this);
  info_ = new QLabel(this);
  top->addWidget(new QLabel(tr("Show:"), this));
  top->addWidget(rank_box_);
  top->addWidget(info_, 1);
  lay->addLayout(top);
  chart_ = new QChart;
  chart_->legend()->hide();
  legend_ = new QLabel(this);
  legend_->setTextFormat(Qt::RichText);
  legend_->setWordWrap(true);
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->viewport()->installEventFilter(this);
  follow_widget_font(view_);  // presentation mode's font enlarges the chart too
  peak_table_ = new QLabel(this);
  peak_table_->setTextFormat(Qt::RichText);
  auto* chart_row = new QWidget(this);
  auto* below = new QHBoxLayout(chart_row);
  below->setContentsMargins(0, 0, 0, 0);
  below->addWidget(view_, 1);
  below->addWidget(peak_table_);
  // Under the chart: what was alive at the measured peak by name, beside what the plan names
  // (docs/STUDIO.md); shown when the trace has them.
  named_ = new TableModel(this);
  planned_named_ = new TableModel(this);
  named_row_ = new QWidget(this);
  auto* named_lay = new QHBoxLayout(named_row_);
  named_lay->setContentsMargins(0, 0, 0, 0);
  auto table_box = [&](const QString& title, TableModel* model, const char* name) {
    auto* box = new QGroupBox(title, named_row_);
    auto* col = new QVBoxLayout(box);
    auto* view = new QTableView(box);
    view->setObjectName(QString::fromLatin1(name));
    view->setModel(model);
    view->verticalHeader()->hide();
    view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    connect(model, &QAbstractItemModel::modelReset, view, [view] {  // the name takes the room left
      if (view->horizontalHeader()->count() > 0)
        view->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    });
    view->setTextElideMode(Qt::ElideMiddle);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setWordWrap(false);
    col->addWidget(view);
    named_lay->addWidget(box, 1);
    return box;
  };
  named_box_ = table_box(tr("Alive at the measured peak"), named_, "namedPeakTable");
  planned_box_ = table_box(tr("Planned (dry run)"), planned_named_, "plannedPeakTable");
  named_row_->hide();
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(chart_row);
  split->addWidget(named_row_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setChildrenCollapsible(false);
  lay->addWidget(split, 1);
  lay->addWidget(legend_);
  connect(rank_box_, &QComboBox::currentIndexChanged, this, [this](int) {
    rebuild();
    showNamedTables(categoryRank());
  });
}

int MemoryView::seriesCount() const { return int(chart_->series().size()); }

int MemoryView::categoryRank() const {
  const int d = rank_box_->currentData().isValid() ? rank_box_->currentData().toInt() : -1;
  return d >= kCategoryItem ? d - kCategoryItem : -1;
}

QString MemoryView::peakTable() const { return peak_table_->text(); }

void MemoryView::setIndex(std::shared_ptr<const TimelineIndex> index) {
  index_ = std::move(index);
  planned_ = index_ ? planned_curve(index_->model()) : PlannedCurve{};
  named_rank_ = -2;
  rank_box_->blockSignals(true);
  rank_box_->clear();
  if (index_) {
    std::set<int32_t> ranks;
    for (const auto& p : index_->model().memory) ranks.insert(p.rank);
    rank_box_->addItem(tr("all ranks: allocated"), -1);
    for (int32_t r : ranks) rank_box_->addItem(tr("rank %1: allocated, reserved, peak").arg(r), r);
    // Memory by category (docs/STUDIO.md), shown first when the trace has it.
    std::set<int32_t> cat_ranks;
    for (const auto& c : index_->model().memory_categories)
      if (prof::is_curve_sample(c.edge)) cat_ranks.insert(c.rank);
    for (int32_t r : cat_ranks) rank_box_->addItem(tr("rank %1: by category (stacked)").arg(r), kCategoryItem + r);
    if (!cat_ranks.empty()) rank_box_->setCurrentIndex(rank_box_->findData(kCategoryItem + *cat_ranks.begin()));
    vp_.fit(index_->t_min(), index_->t_max(), 0.01);
  }
  rank_box_->blockSignals(false);
  rebuild();
  showNamedTables(categoryRank());
}

void MemoryView::setViewport(const TimelineViewport& vp) {
  if (vp == vp_) return;
  vp_ = vp;
  rebuild();
}

bool MemoryView::eventFilter(QObject* o, QEvent* e) {
  if (o == view_->viewport() && e->type() == QEvent::Wheel && index_) {
    auto* we = static_cast<QWheelEvent*>(e);
    const QRectF pa = chart_->plotArea();
    const double frac = pa.width() > 0 ? (we->position().x() - pa.left()) / pa.width() : 0.5;
    TimelineViewport v = vp_;
    v.zoom_at(frac * v.width_px, std::pow(1.25, we->angleDelta().y() / 120.0));
    v.clamp_to(index_->t_min(), index_->t_max());
    vp_ = v;
    rebuild();
    emit viewportChanged(vp_);
    return true;
  }
  return QWidget::eventFilter(o, e);
}

namespace {
// The time axis over [t0, t1] in ms from the trace's start, with 1-2-5 ticks anchored there (the
// range itself follows the timeline's viewport, so it cannot be rounded as applyNiceNumbers would).
QValueAxis* memory_time_axis(int64_t base, int64_t t0, int64_t t1) {
  auto* ax = new QValueAxis;
  ax->setTitleText(MemoryView::tr("time from trace start (ms)"));
  ax->setRange(double(t0 - base) / 1e6, double(t1 - base) / 1e6);
  const double span = std::max(1e-6, double(t1 - t0) / 1e6), raw = span / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  ax->setTickType(QValueAxis::TicksDynamic);
  ax->setTickAnchor(0);
  ax->setTickInterval(step);
  ax->setLabelFormat(step >= 1     ? QStringLiteral("%.0f")
                     : step >= 0.1 ? QStringLiteral("%.1f")
                                   : QStringLiteral("%.3f"));
  return ax;
}
}  // namespace

// Phase markers: the labelled samples (phase boundaries) of one rank, each naming itself when hovered.
void MemoryView::addPhaseMarkers(const std::vector<MemorySeriesPoint>& pts, int64_t base, QValueAxis* ax,
                                 QValueAxis* ay) {
  auto* mk = new QScatterSeries;
  mk->setName(tr("phase boundaries"));
  mk->setMarkerSize(6);
  for (const auto& p : pts) mk->append(double(p.t_ns - base) / 1e6, double(p.allocated) / (1024.0 * 1024.0));
  chart_->addSeries(mk);
  mk->attachAxis(ax);
  mk->attachAxis(ay);
  connect(mk, &QScatterSeries::hovered, this, [this, pts, base](const QPointF& pt, bool on) {
    if (!on || !index_) return;
    const auto& mm = index_->model();
    for (const auto& p : pts) {
      if (std::fabs(double(p.t_ns - base) / 1e6 - pt.x()) < 1e-9) {
        const QString lab = p.label_id >= 0 && size_t(p.label_id) < mm.strings.size()
                                ? QString::fromStdString(mm.strings[size_t(p.label_id)])
                                : QString();
        info_->setText(tr("%1 at %2 ms: allocated %3, reserved %4, peak %5")
                           .arg(lab)
                           .arg(pt.x(), 0, 'f', 3)
                           .arg(QString::fromStdString(format_bytes(p.allocated)),
                                QString::fromStdString(format_bytes(p.reserved)),
                                QString::fromStdString(format_bytes(p.peak))));
        break;
      }
    }
  });
}

// Step boundaries as vertical markers: one series going up and down at each step start
// (the joins run along the x axis), so the legend has a single entry.
// At most one marker per 4 px: 200 000 steps would draw a solid grey block and take 7.5 s.
void MemoryView::addStepMarkers(int64_t t0, int64_t t1, int cols, int64_t base, double ymax, QValueAxis* ax,
                                QValueAxis* ay) {
  auto* steps = new QLineSeries;
  steps->setName(tr("step start"));
  const double min_gap_ms = double(t1 - t0) / 1e6 / double(cols) * 4;
  double last_x = -std::numeric_limits<double>::infinity();
  std::vector<int64_t> starts;
  for (const auto& st : index_->steps())
    if (st.start_ns >= t0 && st.start_ns <= t1) starts.push_back(st.start_ns);
  std::sort(starts.begin(), starts.end());
  for (const int64_t start : starts) {
    const double x = double(start - base) / 1e6;
    if (x - last_x < min_gap_ms) continue;
    last_x = x;
    steps->append(x, 0);
    steps->append(x, ymax * 1.05);
    steps->append(x, 0);
  }
  if (steps->count() > 0) {
    chart_->addSeries(steps);
    steps->attachAxis(ax);
    steps->attachAxis(ay);
    steps->setPen(QPen(QColor(150, 150, 150), 1, Qt::DashDotLine));
  } else {
    delete steps;
  }
}

// Own legend line (QChart's legend loses its markers after removeAllSeries() here); the
// categories' colours, and the peak table, when a rank's categories are drawn.
void MemoryView::updateLegend(int32_t cat_rank) {
  QString legend;
  for (auto* sr : chart_->series()) {
    auto* ls = qobject_cast<QLineSeries*>(sr);
    if (!ls || ls->name().isEmpty()) continue;
    legend += QStringLiteral("<span style='color:%1'>&#9632;</span> %2&nbsp;&nbsp; ")
                  .arg(ls->pen().color().name(), ls->name().toHtmlEscaped());
  }
  if (cat_rank >= 0) {
    legend.clear();
    for (int k = 0; k < prof::kMemCategories; ++k)
      legend += QStringLiteral("<span style='color:%1'>&#9632;</span> %2&nbsp;&nbsp; ")
                    .arg(kCategoryColours[k].name(), QString::fromLatin1(prof::kMemCategoryNames[k]));
    peak_table_->setText(peak_table_html(index_->model(), cat_rank));
  }
  legend_->setText(legend);
}

void MemoryView::rebuild() {
  chart_->removeAllSeries();
  for (auto* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
  legend_->clear();
  peak_table_->clear();
  if (!index_) return;
  const auto& m = index_->model();
  if (m.memory.empty() && m.memory_categories.empty()) {
    info_->setText(tr("This trace has no memory samples."));
    return;
  }
  const int64_t base = index_->t_min();
  const int64_t t0 = vp_.t0_ns, t1 = vp_.t1_ns();
  const int cols = std::max(100, int(view_->width()));
  QValueAxis* ax = memory_time_axis(base, t0, t1);
  auto* ay = new QValueAxis;
  ay->setTitleText(tr("memory (MiB)"));
  chart_->addAxis(ax, Qt::AlignBottom);
  chart_->addAxis(ay, Qt::AlignLeft);
  double ymax = 1;
  auto add_line = [&](const QString& name, const std::vector<MemorySeriesPoint>& pts, int64_t MemorySeriesPoint::*f,
                      Qt::PenStyle st) {
    auto* s = new QLineSeries;
    s->setName(name);
    QList<QPointF> list;
    list.reserve(qsizetype(pts.size()));
    for (const auto& p : pts) {
      const double y = double(p.*f) / (1024.0 * 1024.0);
      ymax = std::max(ymax, y);
      list.append(QPointF(double(p.t_ns - base) / 1e6, y));
    }
    s->replace(list);
    chart_->addSeries(s);
    s->attachAxis(ax);
    s->attachAxis(ay);
    QPen pen = s->pen();
    pen.setStyle(st);
    pen.setWidthF(1.5);
    s->setPen(pen);
    return s;
  };
  const int32_t cat_rank = categoryRank();
  const int32_t sel = cat_rank >= 0 ? -2 : rank_box_->currentData().isValid() ? rank_box_->currentData().toInt() : -1;
  if (cat_rank >= 0) ymax = addCategoryAreas(cat_rank, t0, t1, cols, base, ax, ay, 1024.0 * 1024.0);
  std::set<int32_t> ranks;
  for (const auto& p : m.memory) ranks.insert(p.rank);
  int64_t peak = 0;
  for (int32_t r : ranks) {
    if ((sel >= 0 && r != sel) || sel == -2) continue;
    auto pts = memory_points(m, r, t0, t1, cols);
    for (const auto& p : pts) peak = std::max(peak, p.peak);
    if (sel < 0) {
      add_line(tr("rank %1 allocated").arg(r), pts, &MemorySeriesPoint::allocated, Qt::SolidLine);
    } else {
      add_line(tr("allocated"), pts, &MemorySeriesPoint::allocated, Qt::SolidLine);
      add_line(tr("reserved / RSS"), pts, &MemorySeriesPoint::reserved, Qt::DashLine);
      add_line(tr("peak"), pts, &MemorySeriesPoint::peak, Qt::DotLine);
      addPhaseMarkers(pts, base, ax, ay);
    }
  }
  addStepMarkers(t0, t1, cols, base, ymax, ax, ay);
  ay->setRange(0, ymax * 1.08);
  ay->applyNiceNumbers();  // 1-2-5 ticks
  updateLegend(cat_rank);
  if (cat_rank < 0) info_->setText(tr("peak in view: %1").arg(QString::fromStdString(format_bytes(peak))));
}

// The named tables of `rank` (-1: none shown), filled when the rank or the trace changed.
void MemoryView::showNamedTables(int32_t rank) {
  if (rank == named_rank_) return;
  named_rank_ = rank;
  named_->setTable({});
  planned_named_->setTable({});
  bool any = false;
  if (index_ && rank >= 0 && !index_->model().peak_tensors.empty()) {
    for (const auto& r : prof::memory_by_category(index_->model())) {
      if (r.rank != rank) continue;
      named_->setTable(peak_tensor_table(r.at_peak_tensors, r.peak_bytes));
      planned_named_->setTable(peak_tensor_table(r.planned_tensors, r.planned_peak_bytes));
      named_box_->setTitle(tr("Alive at rank %1's measured peak (step %2)").arg(rank).arg(r.peak_step));
      planned_box_->setVisible(!r.planned_tensors.empty());
      any = !r.at_peak_tensors.empty() || !r.planned_tensors.empty();
      break;
    }
  }
  named_row_->setVisible(any);
}

// The seven categories of `rank` stacked as areas (parameters at the bottom), and the planner's
// predicted peak as a dashed line; returns the largest stacked total in MiB.
double MemoryView::addCategoryAreas(int32_t rank, int64_t t0, int64_t t1, int cols, int64_t base, QValueAxis* ax,
                                    QValueAxis* ay, double unit) {
  const auto& m = index_->model();
  const auto pts = category_points(m, rank, t0, t1, cols);
  double ymax = 1;
  QLineSeries* lower = nullptr;
  for (int k = 0; k < prof::kMemCategories; ++k) {
    auto* upper = new QLineSeries;
    QList<QPointF> list;
    list.reserve(qsizetype(pts.size()));
    for (const auto& p : pts) {
      double y = 0;
      for (int j = 0; j <= k; ++j) y += double(p.c.bytes[j]);
      ymax = std::max(ymax, y / unit);
      list.append(QPointF(double(p.t_ns - base) / 1e6, y / unit));
    }
    upper->replace(list);
    auto* area = new QAreaSeries(upper, lower);
    area->setName(QString::fromLatin1(prof::kMemCategoryNames[k]));
    area->setColor(kCategoryColours[k]);
    area->setBorderColor(kCategoryColours[k].darker(130));
    chart_->addSeries(area);
    area->attachAxis(ax);
    area->attachAxis(ay);
    lower = upper;
  }
  double planned = -1;
  for (const auto& c : m.memory_categories)
    if (c.edge == prof::MemEdge::Planned) planned = double(c.c.total()) / unit;
  if (planned > 0) {
    auto* line = new QLineSeries;
    line->setName(tr("planned peak"));
    line->append(double(t0 - base) / 1e6, planned);
    line->append(double(t1 - base) / 1e6, planned);
    line->setPen(QPen(QColor(110, 110, 110), 1.5, Qt::DashLine));
    chart_->addSeries(line);
    line->attachAxis(ax);
    line->attachAxis(ay);
    ymax = std::max(ymax, planned);
  }
  // The planner's curve on the same ranges' edges (planned_curve_points).
  const auto curve = planned_curve_points(m, planned_, rank, t0, t1, cols);
  if (!curve.empty()) {
    auto* line = new QLineSeries;
    line->setName(tr("planned (same ranges)"));
    QList<QPointF> list;
    list.reserve(qsizetype(curve.size()));
    for (const auto& [t, b] : curve) {
      list.append(QPointF(double(t - base) / 1e6, double(b) / unit));
      ymax = std::max(ymax, double(b) / unit);
    }
    line->replace(list);
    line->setPen(QPen(QColor(20, 20, 20), 1.5, Qt::DotLine));
    chart_->addSeries(line);
    line->attachAxis(ax);
    line->attachAxis(ay);
  }
  info_->setText(tr("rank %1 by category: %2 points in view%3")
                     .arg(rank)
                     .arg(pts.size())
                     .arg(curve.empty() ? QString() : tr("; dotted: the planner's curve at the same ranges' edges")));
  return ymax;
}

}  // namespace ulysses::ui
