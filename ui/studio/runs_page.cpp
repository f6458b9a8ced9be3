// Runs list page.
#include "runs_page.hpp"

#include "run_data.hpp"

#include <QDir>
#include <QFileInfo>
#include <QCheckBox>
#include <QFileSystemWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QMetaObject>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "compare_model.hpp"
#include "native_path.hpp"
#include "runs_model.hpp"

namespace ulysses::ui {

RunsPage::RunsPage(QWidget* parent) : QWidget(parent) {
  model_ = new RunsModel(this);
  compare_ = new CompareModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(RunsModel::SortRole);
  buildRunsTable();
  QHBoxLayout* top = buildFolderRow();
  QHBoxLayout* buttons = buildRunButtons();
  QWidget* lower = buildComparePane();
  auto* split = new QSplitter(Qt::Vertical, this);
  auto* upper = new QWidget(this);
  auto* upperCol = new QVBoxLayout(upper);
  upperCol->setContentsMargins(0, 0, 0, 0);
  upperCol->addWidget(view_);
  upperCol->addLayout(buttons);
  split->addWidget(upper);
  split->addWidget(lower);
  auto* col = new QVBoxLayout(this);
  col->addLayout(top);
  col->addWidget(split, 1);

  watcher_ = new QFileSystemWatcher(this);
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(500);
  connect(debounce_, &QTimer::timeout, this, &RunsPage::refresh);
  connect(watcher_, &QFileSystemWatcher::directoryChanged, debounce_, qOverload<>(&QTimer::start));
  updateButtons();
}

// The runs, sortable, several selectable.
void RunsPage::buildRunsTable() {
  view_ = new QTableView(this);
  view_->setObjectName(QStringLiteral("runs"));
  view_->setModel(proxy_);
  view_->setSortingEnabled(true);
  view_->sortByColumn(RunsModel::Started, Qt::DescendingOrder);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  view_->verticalHeader()->hide();
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  // A double-click opens the run; on its "Resumed from" cell, it goes to the run it resumed.
  connect(view_, &QTableView::doubleClicked, this, [this](const QModelIndex& i) {
    const QString from = i.data(RunsModel::ResumedFromRole).toString();
    if (i.column() == RunsModel::ResumedFrom && !from.isEmpty())
      selectDir(from);
    else
      emit openRequested(i.data(RunsModel::DirRole).toString());
  });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunsPage::updateButtons);
}

// The runs folder, with Change… and Refresh.
QHBoxLayout* RunsPage::buildFolderRow() {
  folder_ = new QLabel(this);
  folder_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // a long path must not widen the window
  folder_->setMinimumWidth(1);
  folder_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* change = new QPushButton(QStringLiteral("Change…"), this);
  connect(change, &QPushButton::clicked, this, &RunsPage::changeRunsDirRequested);
  auto* refreshBtn = new QPushButton(QStringLiteral("Refresh"), this);
  connect(refreshBtn, &QPushButton::clicked, this, &RunsPage::refresh);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(QStringLiteral("Runs folder:"), this));
  top->addWidget(folder_, 1);
  top->addWidget(change);
  top->addWidget(refreshBtn);
  return top;
}

// Open, Launch again, Resume, Compare and Delete… of the selected runs.
QHBoxLayout* RunsPage::buildRunButtons() {
  open_ = new QPushButton(QStringLiteral("Open"), this);
  relaunch_ = new QPushButton(QStringLiteral("Launch again"), this);
  resume_ = new QPushButton(QStringLiteral("Resume"), this);
  resume_->setObjectName(QStringLiteral("resume"));
  delete_ = new QPushButton(QStringLiteral("Delete…"), this);
  compareBtn_ = new QPushButton(QStringLiteral("Compare"), this);
  compareBtn_->setToolTip(QStringLiteral("Select two runs"));
  connect(open_, &QPushButton::clicked, this, [this] {
    const auto d = selectedDirs();
    if (!d.isEmpty()) emit openRequested(d.front());
  });
  connect(relaunch_, &QPushButton::clicked, this, [this] {
    const auto d = selectedDirs();
    if (!d.isEmpty()) emit relaunchRequested(d.front());
  });
  connect(resume_, &QPushButton::clicked, this, [this] {
    const auto d = selectedDirs();
    if (d.size() != 1) return;
    const QString folder = resumeFolderOf(d.front());
    if (!folder.isEmpty()) emit resumeRequested(d.front(), folder);
  });
  connect(delete_, &QPushButton::clicked, this, [this] {
    const auto dirs = selectedDirs();
    if (dirs.isEmpty()) return;
    // No by default: Enter does not delete.
    if (QMessageBox::question(this, QStringLiteral("Delete runs"),
                              QStringLiteral("Delete %1 run folder(s) and everything in them?\n%2")
                                  .arg(dirs.size())
                                  .arg(dirs.join(QLatin1Char('\n'))),
                              QMessageBox::Yes | QMessageBox::No, QMessageBox::No) != QMessageBox::Yes)
      return;
    for (const auto& d : dirs) {
      QString err;
      if (!deleteRun(d, &err)) QMessageBox::warning(this, QStringLiteral("Delete"), err);
    }
  });
  connect(compareBtn_, &QPushButton::clicked, this, [this] {
    const auto d = selectedDirs();
    if (d.size() == 2) compare(d[0], d[1]);
  });
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(open_);
  buttons->addWidget(relaunch_);
  buttons->addWidget(resume_);
  buttons->addWidget(compareBtn_);
  buttons->addWidget(delete_);
  buttons->addStretch(1);
  return buttons;
}

// Two runs' configs and figures side by side, optionally only where they differ.
QWidget* RunsPage::buildComparePane() {
  compareTitle_ = new QLabel(QStringLiteral("Select two runs and press Compare"), this);
  compareTitle_->setWordWrap(true);
  compareTitle_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  compareTitle_->setMinimumWidth(1);
  compareView_ = new QTableView(this);
  compareView_->setObjectName(QStringLiteral("compare"));
  // "Differences only" filters the rows through a proxy (CompareModel::DiffersRole); columns are
  // sized to their contents, long fields elided in the middle (the tooltip has all of it).
  auto* compareProxy = new QSortFilterProxyModel(this);
  compareProxy->setSourceModel(compare_);
  compareProxy->setFilterRole(CompareModel::DiffersRole);
  compareProxy->setFilterKeyColumn(CompareModel::Field);
  compareView_->setModel(compareProxy);
  compareView_->verticalHeader()->hide();
  compareView_->setTextElideMode(Qt::ElideMiddle);
  compareView_->horizontalHeader()->setStretchLastSection(false);
  auto fitCompare = [this] {
    compareView_->resizeColumnsToContents();
    for (int c = 0; c < CompareModel::ColumnCount; ++c)
      compareView_->setColumnWidth(c, std::min(compareView_->columnWidth(c), 360));
  };
  connect(compare_, &QAbstractItemModel::modelReset, this, fitCompare);
  differencesOnly_ = new QCheckBox(QStringLiteral("Differences only"), this);
  differencesOnly_->setObjectName(QStringLiteral("differencesOnly"));
  connect(differencesOnly_, &QCheckBox::toggled, compareProxy,
          [compareProxy](bool on) { compareProxy->setFilterFixedString(on ? QStringLiteral("true") : QString()); });
  auto* lower = new QWidget(this);
  auto* lowerCol = new QVBoxLayout(lower);
  lowerCol->setContentsMargins(0, 0, 0, 0);
  auto* compareHead = new QHBoxLayout;
  compareHead->addWidget(compareTitle_, 1);
  compareHead->addWidget(differencesOnly_);
  lowerCol->addLayout(compareHead);
  lowerCol->addWidget(compareView_);
  return lower;
}

RunsPage::~RunsPage() {
  for (const auto& t : traceThreads_)
    if (t) t->wait();
}

void RunsPage::setRunsDir(const QString& dir) {
  if (!watcher_->directories().isEmpty()) watcher_->removePaths(watcher_->directories());
  const QString abs = QFileInfo(dir).absoluteFilePath();
  folder_->setText(abs);
  model_->setRunsDir(abs);
  if (path_is_dir(abs)) watcher_->addPath(abs);
  watchLiveRuns();
  updateButtons();
}

QString RunsPage::runsDir() const { return model_->runsDir(); }

void RunsPage::refresh() {
  if (watcher_->directories().isEmpty() && path_is_dir(model_->runsDir())) watcher_->addPath(model_->runsDir());
  model_->refresh();
  watchLiveRuns();
  updateButtons();
}

// The folders of runs still running are watched too: their run.json is replaced when they end,
// and the list then says how (it kept "running" until Refresh).
void RunsPage::watchLiveRuns() {
  const QString top = QFileInfo(model_->runsDir()).absoluteFilePath();
  QStringList stale;
  for (const auto& d : watcher_->directories())
    if (QFileInfo(d).absoluteFilePath() != top) stale << d;
  if (!stale.isEmpty()) watcher_->removePaths(stale);
  QStringList live;
  for (int i = 0; i < model_->rowCount(); ++i)
    if (model_->run(i).status == QLatin1String("running")) live << model_->run(i).dir;
  if (!live.isEmpty()) watcher_->addPaths(live);
}

QStringList RunsPage::selectedDirs() const {
  QStringList out;
  for (const auto& i : view_->selectionModel()->selectedRows()) out << i.data(RunsModel::DirRole).toString();
  return out;
}

void RunsPage::selectDir(const QString& dir) {
  const int row = model_->rowOfDir(dir);
  if (row < 0) return;
  const auto idx = proxy_->mapFromSource(model_->index(row, 0));
  view_->selectionModel()->select(idx, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  view_->scrollTo(idx);
}

bool RunsPage::compare(const QString& a, const QString& b) {
  if (!isRunDir(a) || !isRunDir(b)) return false;
  const auto sa = loadRunSummary(a), sb = loadRunSummary(b);
  compare_->setRuns(sa, sb);
  compareHead_ = QStringLiteral("%1 vs %2: %3 field(s) differ").arg(sa.name, sb.name).arg(compare_->differingRows());
  const int gen = ++traceGeneration_;  // an older comparison still loading is dropped
  traceStatus_.clear();
  traceBusy_ = sa.hasTrace && sb.hasTrace;
  if (traceBusy_) {
    traceStatus_ = QStringLiteral("loading both traces for the per-phase and per-layer comparison…");
    QPointer<RunsPage> self(this);
    QThread* th = QThread::create([self, gen, a, b] {
      QString err;
      auto c = CompareModel::compareTraces(a, b, &err);
      QMetaObject::invokeMethod(
          self.data(),
          [self, gen, c, err] {
            if (!self || gen != self->traceGeneration_) return;
            self->traceBusy_ = false;
            if (c) {
              self->compare_->setTraceComparison(*c);
              self->traceStatus_ = QStringLiteral("traces: %1 of %2 row(s) with B/A off by more than %3%")
                                       .arg(c->flagged())
                                       .arg(c->rows.size())
                                       .arg(c->threshold * 100.0, 0, 'f', 0);
            } else {
              self->traceStatus_ = QStringLiteral("traces not compared: %1").arg(err);
            }
            self->updateCompareTitle();
            emit self->traceCompareFinished(c.has_value());
          },
          Qt::QueuedConnection);
    });
    connect(th, &QThread::finished, th, &QObject::deleteLater);
    traceThreads_.removeAll(nullptr);
    traceThreads_.push_back(th);
    th->start(QThread::LowPriority);
  } else {
    traceStatus_ = QStringLiteral("no per-phase comparison: %1 has no trace")
                       .arg(!sa.hasTrace && !sb.hasTrace ? QStringLiteral("neither run")
                            : !sa.hasTrace               ? sa.name
                                                         : sb.name);
  }
  updateCompareTitle();
  return true;
}

QString RunsPage::compareTitle() const { return compareTitle_->text(); }

void RunsPage::updateCompareTitle() {
  compareTitle_->setText(traceStatus_.isEmpty() ? compareHead_ : compareHead_ + QStringLiteral("; ") + traceStatus_);
}

bool RunsPage::deleteRun(const QString& dir, QString* error) {
  if (!isRunDir(dir)) {
    if (error)
      *error =
          QStringLiteral("%1 is not a run folder (no run.json, config.json or metrics.jsonl); not deleted").arg(dir);
    return false;
  }
  // A live run (its ulysses-run alive: loadRunSummary says "failed" once it is gone) is never
  // deleted under its ranks: ulysses-run would then report success into no folder.
  if (loadRunSummary(dir).status == QLatin1String("running")) {
    if (error) *error = QStringLiteral("%1 is a run still running; stop it first (not deleted)").arg(dir);
    return false;
  }
  // The folder byte for byte: QDir would ask for a name that is not UTF-8 with other bytes.
  std::error_code ec;
  std::filesystem::remove_all(native_path(dir), ec);
  if (ec) {
    if (error) *error = QStringLiteral("could not delete all of %1 (permissions?)").arg(dir);
    refresh();
    return false;
  }
  refresh();
  return true;
}

void RunsPage::updateButtons() {
  const int n = view_->selectionModel() ? view_->selectionModel()->selectedRows().size() : 0;
  open_->setEnabled(n == 1);
  relaunch_->setEnabled(n == 1);
  QString why = QStringLiteral("select one interrupted run that saved training state (train.save_every)");
  const bool resumable = n == 1 && !resumeFolderOf(selectedDirs().front(), &why).isEmpty();
  resume_->setEnabled(resumable);
  resume_->setToolTip(resumable ? QStringLiteral("Continue from the latest complete checkpoint: the launcher gets the "
                                                 "run's config with train.resume_from set")
                                : QStringLiteral("Cannot resume: %1").arg(why));
  delete_->setEnabled(n >= 1);
  compareBtn_->setEnabled(n == 2);
}

}  // namespace ulysses::ui
