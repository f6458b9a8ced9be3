// Report view: analysis tables, per-rank bar chart, run comparison.
#include "trace/report_view.hpp"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QValueAxis>
#include <QVBoxLayout>

#include "trace/chart_fonts.hpp"
#include "trace/documents_view.hpp"
#include "trace/phase_style.hpp"
#include "trace/qt_text.hpp"

namespace ulysses::ui {

namespace {
// The GPU's figures of a trace with kernels (an Nsight or PyTorch profiler trace, or our GPU
// ranks): how busy the GPUs were over the ranks' wall time, and NCCL's share of that.
QString gpu_headline(const prof::Summary& s) {
  int64_t wall = 0;
  for (const auto& b : s.steps)
    if (b.gpu) wall += b.wall_ns;
  if (s.num_kernels == 0 || wall <= 0) return {};
  const auto& o = s.overall;
  return QObject::tr(" GPU busy %1 of %2 (%3%); NCCL kernels %4 (%5% of the busy time).")
      .arg(duration_qs(double(o.busy_ns)), duration_qs(double(wall)))
      .arg(100.0 * double(o.busy_ns) / double(wall), 0, 'f', 1)
      .arg(duration_qs(double(o.comm_ns)))
      .arg(o.busy_ns > 0 ? 100.0 * double(o.comm_ns) / double(o.busy_ns) : 0.0, 0, 'f', 1);
}
}  // namespace

QString summary_headline(const prof::Summary& s) {
  QString text = QObject::tr("%1 ranks, %2 ranges, %3 kernels.").arg(s.world_size).arg(s.num_ranges).arg(s.num_kernels);
  if (s.overall.comm_ns > 0)  // overlap means something only where there is communication
    text += QObject::tr(" Overlap %1% of %2 communication; compute %3, overlapped %4.")
                .arg(s.overall.ratio * 100.0, 0, 'f', 1)
                .arg(duration_qs(double(s.overall.comm_ns)), duration_qs(double(s.overall.compute_ns)),
                     duration_qs(double(s.overall.overlap_ns)));
  else
    text += QObject::tr(" No communication traced (no overlap to measure); compute %1.")
                .arg(duration_qs(double(s.overall.compute_ns)));
  text += gpu_headline(s);
  const auto& w = s.waiting;
  if (!w.instances.empty()) {
    int32_t worst = -1;
    int64_t caused = -1;
    for (const auto& r : w.ranks)
      if (r.wait_caused_ns > caused) {
        caused = r.wait_caused_ns;
        worst = r.rank;
      }
    text += QObject::tr(
                "\n%1 collectives paired across ranks: median arrival skew %2; rank %3 caused the most waiting (%4).")
                .arg(qint64(w.instances.size()))
                .arg(duration_qs(w.median_skew_ns))
                .arg(worst)
                .arg(duration_qs(double(caused)));
  }
  int64_t idle = 0, wall = 0;
  const prof::RankTotals* worst_idle = nullptr;
  auto idle_share = [](const prof::RankTotals& t) {
    return t.wall_ns > 0 ? double(t.idle_ns) / double(t.wall_ns) : 0.0;
  };
  for (const auto& t : s.ranks) {
    idle += t.idle_ns;
    wall += t.wall_ns;
    if (!worst_idle || idle_share(t) > idle_share(*worst_idle)) worst_idle = &t;
  }
  if (worst_idle && wall > 0)  // summary's "Untraced" line: time of the steps in no range
    text += QObject::tr("\nUntraced (in no range): %1, %2% of the ranks' wall time (most: rank %3, %4%).")
                .arg(duration_qs(double(idle)))
                .arg(100.0 * double(idle) / double(wall), 0, 'f', 1)
                .arg(worst_idle->rank)
                .arg(100.0 * idle_share(*worst_idle), 0, 'f', 1);
  if (s.clock_error_ns >= 0)
    text += QObject::tr("\nClocks aligned to rank 0 by measured offsets, error bound \u00b1%1.")
                .arg(duration_qs(double(s.clock_error_ns)));
  const auto& g = s.allgather;
  if (g.comm_ns > 0)  // ZeRO's parameter all-gathers: the figures of summary --json's "allgather"
    text += QObject::tr("\nParameter all-gathers (ZeRO): %1, %2% hidden behind compute (%3 hidden, %4 exposed).")
                .arg(duration_qs(double(g.comm_ns)))
                .arg(g.ratio * 100.0, 0, 'f', 1)
                .arg(duration_qs(double(g.overlap_ns)), duration_qs(double(g.comm_ns - g.overlap_ns)));
  const auto& h = s.headline;
  if (h.steps > 0)
    text += QObject::tr(
                "\nPer step (median of %1): %2 tokens/s, %3; per rank all-to-all %4 and all-reduce %5 sent; peak "
                "memory %6.")
                .arg(h.steps)
                .arg(h.tokens_per_s, 0, 'f', 0)
                .arg(duration_qs(h.step_ms * 1e6))
                .arg(QString::fromStdString(format_bytes(h.a2a_bytes_per_step)),
                     QString::fromStdString(format_bytes(h.allreduce_bytes_per_step)),
                     QString::fromStdString(format_bytes(h.peak_memory_bytes)));
  return text;
}

ReportView::ReportView(QWidget* parent) : QWidget(parent) {
  auto* lay = new QVBoxLayout(this);
  headline_ = new QLabel(this);
  headline_->setObjectName(QStringLiteral("headline"));
  headline_->setWordWrap(true);
  headline_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  lay->addWidget(headline_);
  auto* split = new QSplitter(Qt::Vertical, this);
  chart_ = new QChartView(new QChart, this);
  chart_->setMinimumHeight(240);
  follow_widget_font(chart_);  // presentation mode's font enlarges the chart too
  tabs_ = new QTabWidget(this);
  ranks_ = new TableModel(this);
  steps_ = new TableModel(this);
  layers_ = new TableModel(this);
  heads_ = new TableModel(this);
  skew_ = new TableModel(this);
  stragglers_ = new TableModel(this);
  memory_ = new TableModel(this);
  names_ = new TableModel(this);
  compare_ = new TableModel(this);
  tabs_->addTab(make_sorted_table(ranks_, this), tr("Per rank"));
  auto* steps_view = make_sorted_table(steps_, this);
  tabs_->addTab(steps_view, tr("Per step"));
  tabs_->addTab(make_sorted_table(layers_, this), tr("Per layer"));
  tabs_->addTab(make_sorted_table(heads_, this), tr("Head ranges"));
  tabs_->addTab(make_sorted_table(skew_, this), tr("Rank skew"));
  stragglers_view_ = make_sorted_table(stragglers_, this);
  stragglers_view_->setObjectName(QStringLiteral("stragglers"));
  stragglers_view_->setToolTip(
      tr("Click a rank: jump to the collective where it arrived last by the most (else "
         "where it waited longest)"));
  tabs_->addTab(stragglers_view_, tr("Stragglers"));
  connect(stragglers_view_, &QTableView::clicked, this, [this](const QModelIndex& ix) {
    if (!s_) return;
    const auto rank = int32_t(stragglers_view_->model()->data(ix, TableModel::KeyRole).toLongLong());
    const int64_t i = straggler_instance(s_->waiting, rank);
    if (i < 0) return;
    const auto& c = s_->waiting.instances[size_t(i)];
    emit collectiveActivated(c.pg, c.seq, rank);
  });
  tabs_->addTab(make_sorted_table(memory_, this), tr("Memory per phase"));
  tabs_->addTab(make_sorted_table(names_, this), tr("Top names"));
  connect(steps_view, &QTableView::activated, this, [this, steps_view](const QModelIndex& ix) {
    emit stepActivated(steps_view->model()->data(ix, TableModel::KeyRole).toLongLong());
  });
  split->addWidget(chart_);
  split->addWidget(tabs_);
  split->setStretchFactor(1, 2);
  lay->addWidget(split, 1);
}

void ReportView::setSummary(std::shared_ptr<const prof::Summary> s, const QString& title) {
  s_ = std::move(s);
  title_ = title;
  static const prof::Summary empty;
  const prof::Summary& S = s_ ? *s_ : empty;
  headline_->setText(s_ ? QStringLiteral("<b>%1</b><br>%2").arg(title.toHtmlEscaped(), summary_headline(S))
                        : QString());
  ranks_->setTable(rank_totals_table(S));
  steps_->setTable(step_table(S));
  layers_->setTable(layer_table_data(S));
  heads_->setTable(head_range_table_data(S));
  skew_->setTable(skew_table(S));
  stragglers_->setTable(straggler_table(S));
  memory_->setTable(memory_phase_table(S));
  names_->setTable(names_table(S));
  rebuildChart();
  rebuildCompare();
}

void ReportView::setCompare(std::shared_ptr<const prof::Comparison> c, const QString& title) {
  compare_data_ = std::move(c);
  other_title_ = title;
  rebuildCompare();
}

void ReportView::setDocuments(std::vector<prof::DocumentShard> d) {
  if (d.empty() && documents_) {
    tabs_->removeTab(tabs_->indexOf(documents_));
    documents_->deleteLater();
    documents_ = nullptr;
  } else if (!d.empty() && !documents_) {
    documents_ = new DocumentsView(this);
    tabs_->insertTab(1, documents_, tr("Documents"));  // beside Per rank: it is about the ranks
  }
  if (compare_tab_ >= 0 && compare_view_) compare_tab_ = tabs_->indexOf(compare_view_->parentWidget());
  if (documents_) documents_->setDocuments(std::move(d));
}

void ReportView::rebuildCompare() {
  if (!s_ || !compare_data_) {
    compare_->setTable({});
    if (compare_tab_ >= 0) {
      QWidget* page = tabs_->widget(compare_tab_);
      tabs_->removeTab(compare_tab_);
      if (page) page->deleteLater();
      compare_view_ = nullptr;
      differences_only_ = nullptr;
      compare_tab_ = -1;
    }
    return;
  }
  if (compare_tab_ < 0) {
    // The table and a "differences only" box: the rows flagged (B / A off 1 by more than the
    // threshold) or present on one side only.
    auto* page = new QWidget(this);
    auto* v = new QVBoxLayout(page);
    v->setContentsMargins(0, 0, 0, 0);
    differences_only_ = new QCheckBox(tr("Differences only"), page);
    differences_only_->setObjectName(QStringLiteral("differencesOnly"));
    differences_only_->setToolTip(
        tr("Show only the rows whose B / A is off 1 by more than the threshold (*) or "
           "that one run lacks"));
    compare_view_ = make_sorted_table(compare_, page);
    compare_view_->setObjectName(QStringLiteral("compare"));
    v->addWidget(differences_only_);
    v->addWidget(compare_view_, 1);
    auto* proxy = qobject_cast<QSortFilterProxyModel*>(compare_view_->model());
    proxy->setFilterRole(TableModel::DiffersRole);
    proxy->setFilterKeyColumn(0);
    connect(differences_only_, &QCheckBox::toggled, proxy,
            [proxy](bool on) { proxy->setFilterFixedString(on ? QStringLiteral("true") : QString()); });
    compare_tab_ = tabs_->addTab(page, QString());
  }
  compare_->setTable(compare_table(*compare_data_));
  tabs_->setTabText(compare_tab_, tr("Compare: A = %1, B = %2").arg(title_, other_title_));
  tabs_->setCurrentIndex(compare_tab_);
}

void ReportView::rebuildChart() {
  QChart* c = chart_->chart();
  c->removeAllSeries();
  for (auto* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  if (!s_ || s_->ranks.empty()) return;
  c->setTitle(tr("Per rank, per step (ms): computation, overlapped communication, exposed communication, idle"));
  auto* series = new QHorizontalStackedBarSeries;
  auto* comp = new QBarSet(tr("compute only"));
  auto* ovl = new QBarSet(tr("overlapped comm"));
  auto* exp = new QBarSet(tr("exposed comm"));
  auto* idle = new QBarSet(tr("idle"));
  comp->setColor(QColor::fromRgba(phase_argb(prof::Phase::Attention)));
  ovl->setColor(QColor(0x00, 0xC8, 0x53));
  exp->setColor(QColor::fromRgba(phase_argb(prof::Phase::A2ASeqToHead)));
  idle->setColor(QColor(0xBD, 0xBD, 0xBD));
  QStringList cats;
  for (const auto& r : s_->ranks) {
    const double n = double(std::max<int64_t>(1, r.steps)) * 1e6;
    *comp << double(r.compute_ns - r.overlap_ns) / n;
    *ovl << double(r.overlap_ns) / n;
    *exp << double(r.comm_ns - r.overlap_ns) / n;
    *idle << double(r.idle_ns) / n;
    cats << tr("rank %1").arg(r.rank);
  }
  series->append({comp, ovl, exp, idle});
  c->addSeries(series);
  auto* ay = new QBarCategoryAxis;
  ay->append(cats);
  auto* ax = new QValueAxis;
  ax->setTitleText(tr("ms per step"));
  ax->setLabelFormat(QStringLiteral("%.1f"));
  ax->setTickCount(6);
  c->addAxis(ay, Qt::AlignLeft);
  c->addAxis(ax, Qt::AlignBottom);
  series->attachAxis(ay);
  series->attachAxis(ax);
}

}  // namespace ulysses::ui
