// TraceView: pages (message / loading / content), the four views and their synchronisation.
#include "trace/trace_view.hpp"

#include <QAction>
#include <QApplication>
#include <QButtonGroup>
#include <QComboBox>
#include <QEventLoop>
#include <QFileDialog>
#include <QMenu>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <cstdlib>
#include <optional>
#include <utility>

#include "models/native_path.hpp"
#include "simulated_run.hpp"
#include "trace/head_map.hpp"
#include "trace/histogram_chart.hpp"
#include "trace/histogram_delegate.hpp"
#include "trace/memory_view.hpp"
#include "trace/qt_text.hpp"
#include "trace/report_view.hpp"
#include "trace/shortcuts.hpp"
#include "trace/timeline_widget.hpp"
#include "trace/trace_loader.hpp"
#include "trace/trace_models.hpp"

namespace ulysses::ui {

namespace {

// " — SIMULATED on h200-x8" after the name of a simulated run folder (engine/sim), else "".
QString simulated_suffix(const QString& path) {
  const std::string b = sim::simulated_banner(native_path(path));
  return b.empty() ? QString() : QStringLiteral(" — ") + QString::fromStdString(b.substr(0, b.find(':')));
}

QTableView* make_table(QAbstractItemModel* m, QWidget* parent, bool sortable = true) {
  auto* v = new QTableView(parent);
  if (sortable) {
    auto* proxy = new QSortFilterProxyModel(parent);
    proxy->setSourceModel(m);
    proxy->setSortRole(TableModel::SortRole);
    v->setModel(proxy);
    v->setSortingEnabled(true);
    v->sortByColumn(0, Qt::AscendingOrder);
  } else {
    v->setModel(m);
  }
  v->setSelectionBehavior(QAbstractItemView::SelectRows);
  v->setSelectionMode(QAbstractItemView::SingleSelection);
  v->horizontalHeader()->setStretchLastSection(true);
  v->verticalHeader()->setVisible(false);
  v->verticalHeader()->setDefaultSectionSize(20);
  return v;
}
// What the importer of a foreign trace could not read or read another way (TraceModel::notes),
// one line each, where the user sees them (not a tooltip that one must hover to find).
QListWidget* make_notes_list(QWidget* parent) {
  auto* notes = new QListWidget(parent);
  notes->setObjectName(QStringLiteral("importNotes"));
  notes->setWordWrap(true);
  notes->setSelectionMode(QAbstractItemView::ExtendedSelection);
  return notes;
}
qint64 key_of(QTableView* v, const QModelIndex& ix) { return v->model()->data(ix, TableModel::KeyRole).toLongLong(); }
}  // namespace

class TraceViewPrivate {
 public:
  TraceView* q;
  QStackedWidget* pages = nullptr;
  QLabel* message = nullptr;
  QLabel* loading_label = nullptr;
  QProgressBar* bar = nullptr;
  ReportView* loading_report = nullptr;        // the cached summary's report while the ranges load
  TimelineWidget* loading_timeline = nullptr;  // the cached overview while the ranges load
  QString early_notes[2];                      // what the loading label says of them (overview, report)
  std::pair<int64_t, int64_t> overview_fit;    // the overview's time range as first shown
  QString loading_path;
  QStackedWidget* views = nullptr;
  QButtonGroup* view_buttons = nullptr;
  QLabel* status = nullptr;
  QLineEdit* filter = nullptr;
  QTimer* filter_timer = nullptr;
  TimelineWidget* timeline = nullptr;
  TableModel *details = nullptr, *kernels = nullptr, *steps = nullptr, *search = nullptr, *stats = nullptr;
  QTableView *steps_view = nullptr, *search_view = nullptr, *kernels_view = nullptr;
  QTabWidget* bottom = nullptr;
  QListWidget* notes = nullptr;  // the importer's notes of a foreign trace (tab hidden when none)
  int notes_tab = -1, stats_tab = -1;
  QComboBox* stats_group = nullptr;  // range statistics per name / per phase, or a pivot
  QTableView* stats_view = nullptr;
  HistogramChart* stats_hist = nullptr;  // the selected (else first) row's histogram, with axes
  QLabel* stats_label = nullptr;
  qint64 stats_t0 = 0, stats_t1 = -1;  // the last dragged range (-1: none yet)
  HeadMapView* headmap = nullptr;
  MemoryView* memory = nullptr;
  ReportView* report = nullptr;
  TraceLoader* loader = nullptr;
  TraceLoader* compare_loader = nullptr;
  LoadedTrace current, compare;
  QString message_text;
  QString view = QStringLiteral("timeline");
  bool loading = false, syncing = false;

  void showMessage(const QString& text) {
    message_text = text;
    message->setText(text);
    pages->setCurrentIndex(0);
  }
  // Ranks hidden in the timeline: the range statistics leave them out (it counted them).
  std::vector<int32_t> hiddenRanks() const {
    std::vector<int32_t> out;
    if (!current.model) return out;
    for (int32_t r : current.model->rank_set())
      if (timeline->rankFlags(r) & kRankHidden) out.push_back(r);
    return out;
  }
  void apply(const LoadedTrace& t);
  void updateCompare();
  void onSelected(qint64 r);
  void onViewport();
  void applyFilter();
  // The range statistics of the selected window (stats_t0, stats_t1), or none; the label says
  // what is counted.
  // The Range statistics tab: group-by choice, the table and the selected row's histogram.
  QWidget* buildStatsPage(QWidget* parent) {
    stats = new TableModel(q);
    auto* stats_page = new QWidget(parent);
    auto* stats_lay = new QVBoxLayout(stats_page);
    stats_lay->setContentsMargins(0, 0, 0, 0);
    auto* stats_bar = new QHBoxLayout;
    stats_label =
        new QLabel(QObject::tr("Drag with the right button (or shift) over the timeline; group by"), stats_page);
    stats_bar->addWidget(stats_label);
    stats_group = new QComboBox(stats_page);
    stats_group->setObjectName(QStringLiteral("statsGroup"));
    stats_group->addItems({QObject::tr("name"), QObject::tr("phase"), QObject::tr("pivot: name, phase, rank"),
                           QObject::tr("pivot: phase, rank"), QObject::tr("pivot: name, rank")});
    stats_bar->addWidget(stats_group);
    stats_bar->addStretch(1);
    stats_lay->addLayout(stats_bar);
    auto* stats_split = new QSplitter(Qt::Horizontal, stats_page);
    stats_view = make_table(stats, stats_split);
    stats_view->setObjectName(QStringLiteral("rangeStats"));
    stats_view->setItemDelegateForColumn(8, new HistogramDelegate(stats_view));  // range_stats_table's histogram
    stats_view->sortByColumn(3, Qt::DescendingOrder);                            // longest total first
    stats_view->horizontalHeader()->setToolTip(QObject::tr(
        "Every range that overlaps the selected window, each with the part of it inside the window (ranges cut "
        "at its edges count their clipped duration); head-lane copies and hidden ranks are left out"));
    stats_split->addWidget(stats_view);
    stats_hist = new HistogramChart(stats_split);
    stats_split->addWidget(stats_hist);
    stats_split->setStretchFactor(0, 3);
    stats_split->setStretchFactor(1, 2);
    stats_lay->addWidget(stats_split);
    QObject::connect(stats_view->selectionModel(), &QItemSelectionModel::currentRowChanged, q,
                     [this] { showHistogram(); });
    return stats_page;
  }
  // The histogram of the statistics' current row (else its first row in the shown order).
  void showHistogram() {
    const QAbstractItemModel* shown = stats_view->model();
    QModelIndex at = stats_view->currentIndex();
    if (!at.isValid() && shown->rowCount() > 0) at = shown->index(0, 0);
    const auto* proxy = qobject_cast<const QSortFilterProxyModel*>(shown);
    const int row = at.isValid() ? (proxy ? proxy->mapToSource(at).row() : at.row()) : -1;
    const TableData& t = stats->table();
    if (row < 0 || row >= t.histograms.size() || row >= t.histogram_spans.size()) {
      stats_hist->setHistogram({}, {}, 0, 0);
      return;
    }
    stats_hist->setHistogram(
        t.rows[row][0].toString() + QStringLiteral(" (") + t.rows[row][1].toString() + QStringLiteral(")"),
        t.histograms[row], t.histogram_spans[row].first, t.histogram_spans[row].second);
  }
  void updateStats() {
    if (!current.model || stats_t1 < 0) {
      stats->setTable({});
      showHistogram();
      stats_label->setText(QObject::tr("Drag with the right button (or shift) over the timeline; group by"));
      return;
    }
    int64_t clipped = 0;
    const int g = stats_group->currentIndex();
    if (g <= 1) {
      stats->setTable(range_stats_table(*current.model, stats_t0, stats_t1,
                                        g == 1 ? StatsGroup::Phase : StatsGroup::Name, hiddenRanks(), &clipped));
    } else {  // pivots: name, phase, rank / phase, rank / name, rank
      PivotKeys k;
      k.name = g != 3;
      k.phase = g != 4;
      stats->setTable(range_pivot_table(*current.model, stats_t0, stats_t1, k, hiddenRanks(), &clipped));
    }
    // Longest total first, whichever columns the table has.
    stats_view->sortByColumn(int(stats->table().headers.indexOf(QStringLiteral("total ms"))), Qt::DescendingOrder);
    showHistogram();
    stats_label->setText(QObject::tr("Window of %1: every range overlapping it, with the part inside it (%n cut at "
                                     "its edges); group by",
                                     nullptr, int(clipped))
                             .arg(duration_qs(double(stats_t1 - stats_t0))));
  }
};

struct TraceView::ToolButtons {
  QToolButton *prev_m, *next_m, *prev_s, *next_s, *fit, *flows;
  QMenu* cmp_menu;
};

TraceView::TraceView(QWidget* parent) : QWidget(parent), d(std::make_unique<TraceViewPrivate>()) {
  d->q = this;
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  d->pages = new QStackedWidget(this);
  lay->addWidget(d->pages);

  // page 0: message
  d->message = new QLabel(this);
  d->message->setAlignment(Qt::AlignCenter);
  d->message->setWordWrap(true);
  d->message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  d->pages->addWidget(d->message);
  buildLoadingPage();                            // page 1
  const ToolButtons tools = buildContentPage();  // page 2

  d->loader = new TraceLoader(this);
  d->compare_loader = new TraceLoader(this);
  d->filter_timer = new QTimer(this);
  d->filter_timer->setSingleShot(true);
  d->filter_timer->setInterval(250);

  connectLoaders(tools.cmp_menu);
  connectViews(tools);
  addShortcutActions();
  d->showMessage(tr("Open a run directory or a trace (.sqlite) to see its timeline."));
}

// page 1: loading
void TraceView::buildLoadingPage() {
  auto* lp = new QWidget(this);
  auto* ll = new QVBoxLayout(lp);
  ll->addStretch();
  d->loading_label = new QLabel(lp);
  d->loading_label->setAlignment(Qt::AlignCenter);
  d->bar = new QProgressBar(lp);
  d->bar->setRange(0, 100);
  ll->addWidget(d->loading_label);
  ll->addWidget(d->bar);
  // The overview can be zoomed and panned while the ranges load (folds say how many ranges
  // they hold); the loaded timeline then opens on the same time range.
  d->loading_timeline = new TimelineWidget(lp);
  d->loading_timeline->setFocusPolicy(Qt::ClickFocus);
  d->loading_timeline->setMinimumHeight(240);
  d->loading_timeline->hide();
  ll->addWidget(d->loading_timeline, 3);
  d->loading_report = new ReportView(lp);
  d->loading_report->hide();
  ll->addWidget(d->loading_report, 2);
  ll->addStretch();
  d->pages->addWidget(lp);
}

// page 2: content
TraceView::ToolButtons TraceView::buildContentPage() {
  auto* content = new QWidget(this);
  auto* cl = new QVBoxLayout(content);
  cl->setContentsMargins(4, 4, 4, 4);
  const ToolButtons tools = buildToolBar(content, cl);

  d->views = new QStackedWidget(content);
  d->views->addWidget(buildTimelinePage(content));
  d->headmap = new HeadMapView(content);
  d->views->addWidget(d->headmap);
  d->memory = new MemoryView(content);
  d->views->addWidget(d->memory);
  d->report = new ReportView(content);
  d->views->addWidget(d->report);
  cl->addWidget(d->views, 1);
  d->status = new QLabel(content);
  // Wraps, and never widens the window past the screen (presentation mode on a 1280x720
  // projector asked for 1802 px when a long text sat on one line).
  d->status->setWordWrap(true);
  d->status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  d->status->setMinimumWidth(1);
  cl->addWidget(d->status);
  d->pages->addWidget(content);
  return tools;
}

// The tool bar over the views: view buttons, filter, match / step / fit buttons, all arrows
// and Compare.
TraceView::ToolButtons TraceView::buildToolBar(QWidget* content, QVBoxLayout* cl) {
  auto* bar = new QHBoxLayout;
  d->view_buttons = new QButtonGroup(this);
  d->view_buttons->setExclusive(true);
  const QStringList labels = {tr("Timeline"), tr("Head map"), tr("Memory"), tr("Report")};
  for (int i = 0; i < 4; ++i) {
    auto* b = new QToolButton(content);
    b->setText(labels[i]);
    b->setCheckable(true);
    b->setChecked(i == 0);
    d->view_buttons->addButton(b, i);
    bar->addWidget(b);
  }
  bar->addSpacing(12);
  d->filter = new QLineEdit(content);
  d->filter->setPlaceholderText(tr("Filter: name or phase (e.g. a2a, attention, nccl)"));
  d->filter->setClearButtonEnabled(true);
  d->filter->setMinimumWidth(160);
  bar->addWidget(d->filter, 1);
  auto* prev_m = new QToolButton(content);
  prev_m->setText(tr("< match"));
  auto* next_m = new QToolButton(content);
  next_m->setText(tr("match >"));
  auto* prev_s = new QToolButton(content);
  prev_s->setText(tr("< step"));
  auto* next_s = new QToolButton(content);
  next_s->setText(tr("step >"));
  auto* fit = new QToolButton(content);
  fit->setText(tr("Fit all"));
  auto* cmp = new QToolButton(content);
  cmp->setText(tr("Compare..."));
  cmp->setToolTip(tr("Load a second run and show its report side by side with differences"));
  cmp->setPopupMode(QToolButton::InstantPopup);
  auto* cmp_menu = new QMenu(cmp);
  cmp->setMenu(cmp_menu);
  // Flow arrows of every collective in view, beside the selected one's.
  auto* flows = new QToolButton(content);
  flows->setObjectName(QStringLiteral("allFlows"));
  flows->setText(tr("All arrows"));
  flows->setCheckable(true);
  flows->setToolTip(
      tr("Arrows for every collective in view: from each rank's arrival to the last one (the straggler)"));
  // The buttons sit in a tool bar: on a narrow window (a 1280x720 projector in presentation
  // mode) the ones that do not fit go to its » menu instead of widening the window.
  auto* tools = new QToolBar(content);
  tools->setObjectName(QStringLiteral("traceTools"));
  tools->setToolButtonStyle(Qt::ToolButtonTextOnly);
  for (auto* b : {prev_m, next_m, prev_s, next_s, fit, flows, cmp}) tools->addWidget(b);
  bar->addWidget(tools);
  cl->addLayout(bar);
  return {prev_m, next_m, prev_s, next_s, fit, flows, cmp_menu};
}

// timeline page: the timeline over the bottom tabs (selected range, steps, matches, range
// statistics, import notes).
QWidget* TraceView::buildTimelinePage(QWidget* content) {
  auto* tsplit = new QSplitter(Qt::Vertical, content);
  d->timeline = new TimelineWidget(tsplit);
  tsplit->addWidget(d->timeline);
  d->bottom = new QTabWidget(tsplit);
  d->details = new TableModel(this);
  d->kernels = new TableModel(this);
  d->steps = new TableModel(this);
  d->search = new TableModel(this);
  auto* dsplit = new QSplitter(Qt::Horizontal, d->bottom);
  QTableView* details_view = make_table(d->details, dsplit, false);
  details_view->setObjectName(QStringLiteral("rangeDetails"));
  dsplit->addWidget(details_view);
  d->kernels_view = make_table(d->kernels, dsplit);
  dsplit->addWidget(d->kernels_view);
  d->bottom->addTab(dsplit, tr("Selected range"));
  d->steps_view = make_table(d->steps, d->bottom, false);
  d->bottom->addTab(d->steps_view, tr("Steps"));
  d->search_view = make_table(d->search, d->bottom, false);
  d->bottom->addTab(d->search_view, tr("Matches"));
  QWidget* stats_page = d->buildStatsPage(d->bottom);
  d->stats_tab = d->bottom->addTab(stats_page, tr("Range statistics"));
  d->notes = make_notes_list(d->bottom);
  d->notes_tab = d->bottom->addTab(d->notes, tr("Import notes"));
  d->bottom->setTabVisible(d->notes_tab, false);
  tsplit->addWidget(d->bottom);
  tsplit->setStretchFactor(0, 3);
  tsplit->setStretchFactor(1, 1);
  return tsplit;
}

// The comparison menu, the view buttons and the loaders.
void TraceView::connectLoaders(QMenu* cmp_menu) {
  connect(cmp_menu->addAction(tr("Run directory...")), &QAction::triggered, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Run directory to compare with"));
    if (!dir.isEmpty()) d->compare_loader->start(dir);
  });
  connect(cmp_menu->addAction(tr("Trace file (.sqlite)...")), &QAction::triggered, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Trace to compare with"), QString(),
                                                   tr("Traces (*.sqlite);;All files (*)"));
    if (!f.isEmpty()) d->compare_loader->start(f);
  });
  connect(cmp_menu->addAction(tr("Clear comparison")), &QAction::triggered, this, [this] { setCompareModel(nullptr); });
  connect(d->view_buttons, &QButtonGroup::idClicked, this, [this](int id) { setView(viewNames().value(id)); });
  connect(d->loader, &TraceLoader::progress, this, [this](int pct, const QString& what) {
    // The profiler's reader reports no progress: busy indicator until indexing starts.
    if (pct == 0)
      d->bar->setRange(0, 0);
    else
      d->bar->setRange(0, 100);
    d->bar->setValue(pct);
    d->loading_label->setText(what);
    emit loadProgress(pct, what);
  });
  connect(d->loader, &TraceLoader::earlyReady, this, [this](const LoadedTrace& t) {
    if (!d->loading) return;
    if (t.overview) {
      d->loading_timeline->setIndex(t.overview);
      d->loading_timeline->show();
      d->overview_fit = {d->loading_timeline->viewport().t0_ns, d->loading_timeline->viewport().t1_ns()};
      d->early_notes[0] = tr("overview of %L1 ranges as %L2 (%3 s)")
                              .arg(t.overview_full_ranges)
                              .arg(qlonglong(t.overview->model().ranges.size()))
                              .arg(t.overview_s, 0, 'f', 2);
    }
    if (t.summary) {
      d->loading_report->setSummary(t.summary, QFileInfo(t.path).fileName() + simulated_suffix(t.path));
      d->loading_report->show();
      d->early_notes[1] = tr("report from the summary cache (%1 s)").arg(t.summary_s, 0, 'f', 2);
    }
    QStringList parts;
    for (const QString& n : d->early_notes)
      if (!n.isEmpty()) parts << n;
    d->loading_label->setText(tr("%1: %2 from the caches beside the trace; reading the ranges for the "
                                 "timeline...")
                                  .arg(d->loading_path, parts.join(QStringLiteral(", "))));
    if (t.overview) emit overviewShown(t.path);
    if (t.summary) emit summaryShown(t.path);
  });
  connect(d->loader, &TraceLoader::finished, this, [this](const LoadedTrace& t) { d->apply(t); });
  connect(d->compare_loader, &TraceLoader::finished, this, [this](const LoadedTrace& t) {
    if (!t.error.isEmpty()) {
      d->status->setText(tr("Comparison run not loaded: %1").arg(t.error));
      return;
    }
    d->compare = t;
    d->updateCompare();
    setView(QStringLiteral("report"));
  });
}

// The timeline, the tool bar's buttons, the filter, the tables and the report.
void TraceView::connectViews(const ToolButtons& tools) {
  connect(d->timeline, &TimelineWidget::rangeSelected, this, [this](qint64 r) { d->onSelected(r); });
  connect(d->timeline, &TimelineWidget::timeRangeSelected, this, [this](qint64 t0, qint64 t1) {
    if (!d->current.model) return;
    d->stats_t0 = t0;
    d->stats_t1 = t1;
    d->updateStats();
    d->bottom->setCurrentIndex(d->stats_tab);
  });
  connect(d->stats_group, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int i) {
    Q_UNUSED(i);
    d->updateStats();
  });
  connect(d->timeline, &TimelineWidget::viewportChanged, this, [this](const TimelineViewport&) { d->onViewport(); });
  connect(d->memory, &MemoryView::viewportChanged, d->timeline, &TimelineWidget::setViewport);
  connect(d->headmap, &HeadMapView::memoryRequested, this, [this] { setView(QStringLiteral("memory")); });
  connect(d->filter, &QLineEdit::textChanged, d->filter_timer, qOverload<>(&QTimer::start));
  connect(d->filter_timer, &QTimer::timeout, this, [this] { d->applyFilter(); });
  connect(d->filter, &QLineEdit::returnPressed, this, [this] {
    d->filter_timer->stop();
    d->applyFilter();
    d->timeline->jumpToMatch(true);
  });
  connect(tools.prev_m, &QToolButton::clicked, this, [this] { d->timeline->jumpToMatch(false); });
  connect(tools.next_m, &QToolButton::clicked, this, [this] { d->timeline->jumpToMatch(true); });
  connect(tools.prev_s, &QToolButton::clicked, d->timeline, &TimelineWidget::prevStep);
  connect(tools.next_s, &QToolButton::clicked, d->timeline, &TimelineWidget::nextStep);
  connect(tools.fit, &QToolButton::clicked, d->timeline, &TimelineWidget::fitAll);
  connect(tools.flows, &QToolButton::toggled, d->timeline, &TimelineWidget::setAllFlowsInView);
  // After a click on a tool button the keys are the timeline's again (W/A/S/D after "Fit all").
  auto keys_to_timeline = [this] {
    if (d->timeline->isVisible()) d->timeline->setFocus(Qt::OtherFocusReason);
  };
  for (QToolButton* b : {tools.prev_m, tools.next_m, tools.prev_s, tools.next_s, tools.fit, tools.flows})
    connect(b, &QToolButton::clicked, this, keys_to_timeline);
  connect(d->view_buttons, &QButtonGroup::idClicked, this, keys_to_timeline);
  connect(d->steps_view, &QTableView::clicked, this, [this](const QModelIndex& ix) {
    if (!d->syncing) d->timeline->fitStep(int(key_of(d->steps_view, ix)));
  });
  connect(d->search_view, &QTableView::clicked, this,
          [this](const QModelIndex& ix) { d->timeline->fitRange(key_of(d->search_view, ix)); });
  connect(d->kernels_view, &QTableView::clicked, this, [this](const QModelIndex& ix) {
    const qint64 k = key_of(d->kernels_view, ix);
    const qint64 keep = d->timeline->selectedRange();  // stays selected: the list is its kernels
    d->timeline->fitRange(k);
    d->timeline->selectRange(keep);
  });
  connect(d->report, &ReportView::stepActivated, this, [this](qint64 step) {
    if (!d->current.index) return;
    const auto& st = d->current.index->steps();
    for (size_t i = 0; i < st.size(); ++i)
      if (st[i].step == step) {
        setView(QStringLiteral("timeline"));
        d->timeline->fitStep(int(i));
      }
  });
  // A Stragglers row jumps to its collective instance on the timeline.
  connect(d->report, &ReportView::collectiveActivated, this, [this](int pg, qint64 seq, int rank) {
    if (!d->current.model) return;
    const int64_t r = collective_range(*d->current.model, pg, seq, rank);
    if (r < 0) return;
    setView(QStringLiteral("timeline"));
    d->timeline->fitCollective(r);
  });
}

// Trace-page keys from the binding table (shortcuts.hpp): Ctrl+F focuses the filter, Esc
// clears the selection, then the filter.
void TraceView::addShortcutActions() {
  auto* focus_filter = new QAction(tr("Focus the filter"), this);
  focus_filter->setObjectName(QStringLiteral("focusFilter"));
  focus_filter->setShortcuts(key_sequences(Command::FocusFilter));
  focus_filter->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  connect(focus_filter, &QAction::triggered, this, [this] {
    d->filter->setFocus(Qt::ShortcutFocusReason);
    d->filter->selectAll();
  });
  addAction(focus_filter);
  auto* clear = new QAction(tr("Clear the selection, then the filter"), this);
  clear->setObjectName(QStringLiteral("clearSelection"));
  clear->setShortcuts(key_sequences(Command::ClearSelection));
  clear->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  connect(clear, &QAction::triggered, this, [this] { clearSelectionOrFilter(); });
  addAction(clear);
}

bool TraceView::clearSelectionOrFilter() {
  if (d->timeline->clearSelection()) {
    d->stats_t1 = -1;
    d->updateStats();
    return true;
  }
  if (!d->filter->text().isEmpty()) {
    d->filter->clear();
    d->filter_timer->stop();
    d->applyFilter();
    d->timeline->setFocus(Qt::ShortcutFocusReason);
    return true;
  }
  return false;
}

QLineEdit* TraceView::filterEdit() const { return d->filter; }

TraceView::~TraceView() {
  d->loader->wait();
  d->compare_loader->wait();
}

QStringList TraceView::viewNames() { return {"timeline", "headmap", "memory", "report"}; }

bool TraceView::openTrace(const QString& path, QString* error) {
  if (!path_exists(path)) {  // byte for byte: a name that is not UTF-8 exists too
    const QString msg =
        tr("%1 does not exist. Give a run directory (RUN/trace/rank*.sqlite), a rank trace or an nsys SQLite export.")
            .arg(display_path(path));
    if (error) *error = msg;
    d->showMessage(msg);
    emit loadFailed(msg);
    return false;
  }
  d->loading = true;
  d->loading_path = path;
  d->loading_report->hide();
  d->loading_timeline->hide();
  d->loading_timeline->setIndex(nullptr);
  d->early_notes[0].clear();
  d->early_notes[1].clear();
  d->bar->setValue(0);
  d->loading_label->setText(tr("Loading %1").arg(path));
  d->pages->setCurrentIndex(1);
  d->loader->start(path);
  return true;
}

bool TraceView::openTraceAndWait(const QString& path, QString* error, int timeout_ms) {
  // A load of this path already under way (a run folder opened a moment before) is waited
  // for, not started a second time beside it.
  const bool under_way = d->loading && d->loading_path == path;
  if (!under_way && !openTrace(path, error)) return false;
  QEventLoop loop;
  QString fail;
  bool ok = false;
  auto c1 = connect(this, &TraceView::loaded, &loop, [&] {
    ok = true;
    loop.quit();
  });
  auto c2 = connect(this, &TraceView::loadFailed, &loop, [&](const QString& m) {
    fail = m;
    loop.quit();
  });
  QTimer::singleShot(timeout_ms, &loop, [&] {
    fail = tr("Loading %1 took longer than %2 s.").arg(path).arg(timeout_ms / 1000);
    loop.quit();
  });
  if (d->loading) loop.exec();
  disconnect(c1);
  disconnect(c2);
  if (!ok && error) *error = fail.isEmpty() ? d->message_text : fail;
  return ok;
}

bool TraceView::openCompareTraceAndWait(const QString& path, QString* error, int timeout_ms) {
  LoadedTrace t;
  QEventLoop loop;
  auto c = connect(d->compare_loader, &TraceLoader::finished, &loop, [&](const LoadedTrace& r) {
    t = r;
    loop.quit();
  });
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  d->compare_loader->start(path);
  loop.exec();
  disconnect(c);
  if (!t.error.isEmpty() || !t.summary) {
    if (error) *error = t.error.isEmpty() ? tr("Loading %1 timed out.").arg(path) : t.error;
    return false;
  }
  return true;
}

void TraceView::setModel(std::shared_ptr<const prof::TraceModel> model) {
  LoadedTrace t = prepare_trace(std::move(model));
  d->apply(t);
}

void TraceView::setCompareModel(std::shared_ptr<const prof::TraceModel> model) {
  if (!model) {
    d->compare = {};
    d->updateCompare();
    return;
  }
  d->compare = prepare_trace(std::move(model));
  d->updateCompare();
}

// The report's comparison tab: the profiler's run comparison (profiler/compare.hpp) of the
// shown trace (A) with the comparison run (B); cleared when either is missing.
void TraceViewPrivate::updateCompare() {
  if (!current.model || !current.summary || !compare.model || !compare.summary) {
    report->setCompare(nullptr, {});
    return;
  }
  auto c = std::make_shared<const prof::Comparison>(
      prof::compare_summaries(*current.model, *current.summary, *compare.model, *compare.summary));
  report->setCompare(std::move(c), compare.path.isEmpty() ? QObject::tr("run B") : QFileInfo(compare.path).fileName());
}

void TraceViewPrivate::apply(const LoadedTrace& t) {
  loading = false;
  loading_report->hide();
  // The time range the user zoomed or panned the overview to, if any (a resize keeps it).
  std::optional<std::pair<int64_t, int64_t>> overview_range;
  if (loading_timeline->index()) {
    const auto& v = loading_timeline->viewport();
    const int64_t a = v.t0_ns, b = v.t1_ns(),
                  tol = std::max<int64_t>(1, (overview_fit.second - overview_fit.first) / 200);
    if (std::llabs(a - overview_fit.first) > tol || std::llabs(b - overview_fit.second) > tol) overview_range = {a, b};
  }
  loading_timeline->hide();
  loading_timeline->setIndex(nullptr);  // frees the overview
  if (!t.error.isEmpty()) {
    current = {};
    timeline->setIndex(nullptr);
    notes->clear();
    bottom->setTabVisible(notes_tab, false);
    showMessage(QObject::tr("Could not open the trace.\n\n%1").arg(t.error));
    emit q->loadFailed(t.error);
    return;
  }
  current = t;
  // Nothing of the previous trace stays: range statistics, details, kernels, matches and the
  // comparison (a comparison run was chosen against the previous trace) are reset.
  stats_t1 = -1;
  updateStats();
  compare = {};
  bottom->setTabText(2, QObject::tr("Matches"));
  message_text.clear();
  syncing = true;
  timeline->setIndex(t.index);
  if (overview_range) {
    TimelineViewport v = timeline->viewport();
    v.fit(overview_range->first, overview_range->second);
    timeline->setViewport(v);
  }
  memory->setIndex(t.index);
  memory->setViewport(timeline->viewport());
  headmap->setTrace(t.model, t.summary);
  const QString title =
      t.path.isEmpty() ? QObject::tr("run A") : QFileInfo(t.path).fileName() + simulated_suffix(t.path);
  report->setSummary(t.summary, title);
  report->setDocuments(t.model->documents);
  updateCompare();  // clears the report's comparison tab
  steps->setTable(steps_table(*t.model, t.index->steps()));
  details->setTable(range_details_table(*t.model, -1));
  kernels->setTable(range_kernels_table(*t.model, -1));
  search->setTable({});
  syncing = false;
  const auto& m = *t.model;
  // Ranges and kernels counted as the report counts them (Summary::num_ranges / num_kernels: the
  // head-range rows' copies left out), so the status bar and the report say the same number.
  int64_t ranges = 0, kernels = 0;
  if (t.summary) {
    ranges = t.summary->num_ranges;
    kernels = t.summary->num_kernels;
  } else {
    for (const auto& r : m.ranges) ++(r.is_kernel ? kernels : ranges);
  }
  status->setText(QObject::tr("%1%2: %3 ranks, %4 lanes, %5, %6 memory samples; read %7 s, index %8 s, %9")
                      .arg(t.path.isEmpty() ? QObject::tr("(generated)") : t.path,
                           m.format == "nsys"     ? QObject::tr(" (Nsight Systems export)")
                           : m.format == "kineto" ? QObject::tr(" (PyTorch profiler trace)")
                                                  : QString())
                      .arg(m.ranks.size())
                      .arg(m.lanes.size())
                      .arg(kernels > 0 ? QObject::tr("%1 ranges and %2 kernels").arg(ranges).arg(kernels)
                                       : QObject::tr("%1 ranges").arg(ranges))
                      .arg(m.memory.size())
                      .arg(t.load_s, 0, 'f', 2)
                      .arg(t.index_s, 0, 'f', 2)
                      .arg(t.summary_from_cache
                               ? QObject::tr("summary from the cache (%1 s)").arg(t.summary_s, 0, 'f', 2)
                               : QObject::tr("analysis %1 s").arg(t.analyze_s, 0, 'f', 2)));
  if (t.overview_written)
    status->setText(status->text() +
                    QObject::tr("; overview written for the next open (%1 s)").arg(t.overview_build_s, 0, 'f', 2));
  if (t.rank_files_from_cache > 0)
    status->setText(status->text() +
                    QObject::tr("; %n rank file(s) read from their caches", "", t.rank_files_from_cache));
  if (t.rank_file_caches_written > 0)
    status->setText(status->text() +
                    QObject::tr("; %n rank-file cache(s) written for the next open", "", t.rank_file_caches_written));
  // Foreign traces: what the file lacked and how it was read, in the Import notes tab (shown
  // first when there are any), counted in the status line.
  QStringList note_lines;
  for (const auto& n : m.notes) note_lines << QString::fromStdString(n);
  notes->clear();
  notes->addItems(note_lines);
  bottom->setTabText(notes_tab, QObject::tr("Import notes (%1)").arg(note_lines.size()));
  bottom->setTabVisible(notes_tab, !note_lines.isEmpty());
  if (!note_lines.isEmpty()) {
    status->setText(status->text() + QObject::tr("; %n import note(s), see the Import notes tab", nullptr,
                                                 static_cast<int>(note_lines.size())));
    bottom->setCurrentIndex(notes_tab);
  }
  status->setToolTip(note_lines.join(QLatin1Char('\n')));
  pages->setCurrentIndex(2);
  if (!filter->text().isEmpty()) applyFilter();
  emit q->loaded(t.path);
}

void TraceViewPrivate::onSelected(qint64 r) {
  if (!current.model) return;
  details->setTable(range_details_table(*current.model, r));
  kernels->setTable(range_kernels_table(*current.model, r));
  // Keep the match table's selection on the selected range.
  const int row = search->rowOfKey(r);
  if (row >= 0) search_view->selectRow(row);
  if (r >= 0) bottom->setCurrentIndex(0);
}

void TraceViewPrivate::onViewport() {
  memory->setViewport(timeline->viewport());
  // The step under the view centre is the selected row of the step table.
  const int64_t pos = timeline->currentStep();
  syncing = true;
  if (pos >= 0 && pos < steps->rowCount()) steps_view->selectRow(int(pos));
  syncing = false;
}

void TraceViewPrivate::applyFilter() {
  const QString text = filter->text();
  timeline->setFilter(text);
  if (!current.model) return;
  int64_t total = 0;
  search->setTable(search_table(*current.model, text, 1000, &total));
  bottom->setTabText(2, text.trimmed().isEmpty() ? QObject::tr("Matches") : QObject::tr("Matches (%1)").arg(total));
}

bool TraceView::setView(const QString& name) {
  const int id = int(viewNames().indexOf(name.trimmed().toLower()));
  if (id < 0) return false;
  d->view = viewNames()[id];
  d->views->setCurrentIndex(id);
  if (auto* b = d->view_buttons->button(id)) b->setChecked(true);
  return true;
}

QString TraceView::currentView() const { return d->view; }
QString TraceView::message() const { return d->message_text; }
bool TraceView::isLoading() const { return d->loading; }
std::shared_ptr<const prof::TraceModel> TraceView::model() const { return d->current.model; }
TimelineWidget* TraceView::timeline() const { return d->timeline; }
ReportView* TraceView::reportView() const { return d->report; }
ReportView* TraceView::loadingReport() const { return d->loading_report; }
TimelineWidget* TraceView::loadingTimeline() const { return d->loading_timeline; }
bool TraceView::summaryFromCache() const { return d->current.summary_from_cache; }

QImage TraceView::renderToImage(const QSize& size) {
  const bool was_visible = isVisible();
  const bool top = isWindow();
  if (!was_visible && top) {
    setAttribute(Qt::WA_DontShowOnScreen, true);
    resize(size);
    show();
  } else if (top) {
    resize(size);
  }
  QApplication::processEvents();
  QImage img(this->size(), QImage::Format_ARGB32_Premultiplied);
  img.fill(Qt::white);
  render(&img);
  if (!was_visible && top) {
    hide();
    setAttribute(Qt::WA_DontShowOnScreen, false);
  }
  return img;
}

void TraceView::keyPressEvent(QKeyEvent* e) {
  if (d->timeline && d->timeline->isVisible())
    for (const Binding& b : bindings())
      if (b.scope == BindingScope::Timeline && !b.mouse && key_matches(b.cmd, e) && d->timeline->runCommand(b.cmd)) {
        e->accept();
        return;
      }
  QWidget::keyPressEvent(e);
}

}  // namespace ulysses::ui
