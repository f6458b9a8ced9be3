// Run monitor page.
#include "monitor_page.hpp"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QTextCursor>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cost_model.hpp"
#include "axis_ticks.hpp"
#include "metric_chart.hpp"
#include "native_path.hpp"
#include "rank_status_model.hpp"
#include "run_lineage.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::ui {

MonitorPage::MonitorPage(RunController* controller, QWidget* parent) : QWidget(parent), ctl_(controller) {
  diskRanks_ = new RankStatusModel(this);
  title_ = new QLabel(QStringLiteral("No run yet: fill the launcher and press Launch (Ctrl+R)"), this);
  title_->setObjectName(QStringLiteral("monitorTitle"));
  // Wraps, and never widens the window past the screen (presentation mode on a 1280x720
  // projector asked for 1802 px when a long text sat on one line).
  title_->setWordWrap(true);
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  title_->setMinimumWidth(1);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  start_ = new QPushButton(QStringLiteral("Start"), this);
  start_->setObjectName(QStringLiteral("start"));
  stop_ = new QPushButton(QStringLiteral("Stop"), this);
  stop_->setObjectName(QStringLiteral("stop"));
  stop_->setEnabled(false);
  stop_->setToolTip(QStringLiteral("Stop every rank; the trace stays readable (Ctrl+.)"));
  connect(start_, &QPushButton::clicked, this, &MonitorPage::startRequested);
  connect(stop_, &QPushButton::clicked, this, [this] { ctl_->stop(); });
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat(QStringLiteral("step %v / %m"));
  timeLeft_ = new QLabel(this);
  timeLeft_->setMinimumWidth(160);
  banner_ = new QLabel(this);
  banner_->setObjectName(QStringLiteral("banner"));
  banner_->setWordWrap(true);
  // A word longer than the window (a path, a message without spaces) is clipped, not allowed to
  // widen the window past its size.
  banner_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  banner_->setMinimumWidth(1);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->setVisible(false);

  loss_ = new MetricChart(QStringLiteral("Loss"), QStringLiteral("loss"), this);
  tps_ = new MetricChart(QStringLiteral("Throughput"), QStringLiteral("tokens/s"), this);
  mem_ = new MetricChart(QStringLiteral("Memory (max over ranks)"), QStringLiteral("GiB"), this);

  ranksView_ = new QTableView(this);
  ranksView_->setObjectName(QStringLiteral("ranks"));
  ranksView_->setModel(ctl_->ranks());
  ranksView_->verticalHeader()->hide();
  ranksView_->horizontalHeader()->setStretchLastSection(true);
  ranksView_->setSelectionBehavior(QAbstractItemView::SelectRows);
  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("log"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(20000);
  log_->setLineWrapMode(QPlainTextEdit::NoWrap);
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::Monospace);
  log_->setFont(mono);

  // Replay of the run shown from disk: 1x, 10x or step by step, no training.
  replay1_ = new QPushButton(QStringLiteral("Replay 1×"), this);
  replay10_ = new QPushButton(QStringLiteral("Replay 10×"), this);
  replayStep_ = new QPushButton(QStringLiteral("Step ▶"), this);
  replay1_->setObjectName(QStringLiteral("replay1"));
  replay10_->setObjectName(QStringLiteral("replay10"));
  replayStep_->setObjectName(QStringLiteral("replayStep"));
  for (auto* b : {replay1_, replay10_, replayStep_}) {
    b->setToolTip(QStringLiteral("Play the recorded run back (charts grow as they did, no training runs)"));
    b->setEnabled(false);
  }
  replayTimer_ = new QTimer(this);
  replayTimer_->setInterval(40);
  connect(replayTimer_, &QTimer::timeout, this, &MonitorPage::replayTick);
  follow_ = new QTimer(this);
  follow_->setInterval(1000);
  connect(follow_, &QTimer::timeout, this, &MonitorPage::followTick);
  connect(replay1_, &QPushButton::clicked, this, [this] { replayRun(runDir_, 1.0); });
  connect(replay10_, &QPushButton::clicked, this, [this] { replayRun(runDir_, 10.0); });
  connect(replayStep_, &QPushButton::clicked, this, [this] {
    if (!replay_ || replaySpeed_ > 0 || replay_->finished()) replayRun(runDir_, 0.0);
    replayStep();
  });
  auto* bar = new QHBoxLayout;
  bar->addWidget(start_);
  bar->addWidget(stop_);
  bar->addWidget(replay1_);
  bar->addWidget(replay10_);
  bar->addWidget(replayStep_);
  bar->addWidget(progress_, 1);
  bar->addWidget(timeLeft_);
  auto* charts = new QWidget(this);
  auto* grid = new QHBoxLayout(charts);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->addWidget(loss_);
  grid->addWidget(tps_);
  grid->addWidget(mem_);
  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->addWidget(ranksView_);
  bottom->addWidget(log_);
  bottom->setStretchFactor(0, 1);
  bottom->setStretchFactor(1, 2);
  auto* vsplit = new QSplitter(Qt::Vertical, this);
  vsplit->addWidget(charts);
  vsplit->addWidget(bottom);
  auto* col = new QVBoxLayout(this);
  col->addWidget(title_);
  col->addLayout(bar);
  col->addWidget(banner_);
  col->addWidget(vsplit, 1);

  connect(ctl_, &RunController::started, this, &MonitorPage::onStarted);
  connect(ctl_, &RunController::metric, this, &MonitorPage::onMetric);
  connect(ctl_, &RunController::logLine, this, &MonitorPage::onLog);
  connect(ctl_, &RunController::finished, this, &MonitorPage::onFinished);
}

QString MonitorPage::bannerText() const { return banner_->isHidden() ? QString() : banner_->text(); }
int MonitorPage::progressValue() const { return progress_->value(); }
int MonitorPage::chartPoints() const { return loss_->count(); }
QList<QPointF> MonitorPage::chartValues(int which) const {
  return (which == 0 ? loss_ : which == 1 ? tps_ : mem_)->points();
}

bool MonitorPage::replayRun(const QString& runDir, double speed, QString* error) {
  if (ctl_->isRunning() && QFileInfo(runDir).absoluteFilePath() == ctl_->runDir()) {
    if (error) *error = QStringLiteral("this run is live; replay it when it has finished");
    return false;
  }
  const auto pts = readMetricsFile(QDir(runDir).filePath(QString::fromLatin1(run_layout::kMetrics)));
  if (pts.isEmpty()) {
    if (error) *error = QStringLiteral("%1 has no recorded steps (metrics.jsonl)").arg(runDir);
    return false;
  }
  if (QFileInfo(runDir).absoluteFilePath() != runDir_) showRun(runDir);
  follow_->stop();  // a replay of the steps so far is not overwritten by the live files
  replay_ = std::make_unique<ReplayModel>(std::vector<MetricPoint>(pts.begin(), pts.end()));
  replaySpeed_ = speed;
  clearCharts();
  progress_->setValue(0);
  title_->setText(speed > 0 ? QStringLiteral("Replay %1×: %2").arg(speed).arg(runDir_)
                            : QStringLiteral("Replay, step by step: %1").arg(runDir_));
  timeLeft_->setText(QStringLiteral("replay 0:00"));
  replayWall_.start();
  if (speed > 0)
    replayTimer_->start();
  else
    replayTimer_->stop();
  return true;
}

void MonitorPage::showReplayed(const MetricPoint& p) {
  addPoint(p);
  timeLeft_->setText(QStringLiteral("replay %1 / %2")
                         .arg(QString::fromStdString(cost::format_seconds(replay_->clockS())),
                              QString::fromStdString(cost::format_seconds(replay_->durationS()))));
}

void MonitorPage::replayTick() {
  if (!replay_) return;
  const double wall = static_cast<double>(replayWall_.restart()) / 1000.0;
  for (const auto& p : replay_->advance(wall, replaySpeed_)) showReplayed(p);
  emit replayCursor(replay_->cursorStep(), replay_->clockS());
  if (replay_->finished()) {
    replayTimer_->stop();
    emit replayFinished();
  }
}

void MonitorPage::replayStep() {
  if (!replay_) return;
  MetricPoint p;
  if (!replay_->step(&p)) return;
  showReplayed(p);
  emit replayCursor(replay_->cursorStep(), replay_->clockS());
  if (replay_->finished()) emit replayFinished();
}

void MonitorPage::stopReplay() {
  replayTimer_->stop();
  replay_.reset();
}

QString MonitorPage::followStampNow() const {
  QString out;
  for (const char* f : {run_layout::kMetrics, run_layout::kRunRecord}) {
    const std::filesystem::path p = native_path(QDir(runDir_).filePath(QLatin1String(f)));
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    const auto mtime = std::filesystem::last_write_time(p, ec).time_since_epoch().count();
    out += QStringLiteral("%1:%2;").arg(ec ? -1 : qint64(size)).arg(qint64(mtime));
  }
  return out;
}

void MonitorPage::followTick() {
  if (ctl_->isRunning() && runDir_ == ctl_->runDir()) {  // this window's own run now: live already
    follow_->stop();
    return;
  }
  if (followStampNow() != followStamp_) showRun(runDir_);
}

bool MonitorPage::replaying() const { return replay_ && !replay_->finished(); }

void MonitorPage::setBanner(const QString& text, bool error, bool stopped) {
  banner_->setText(label_safe(text));
  banner_->setToolTip(text.size() > 600 ? text.left(4000) : QString());
  // Red: failed or unknown; amber: stopped before its last step (not the finished run's green).
  bannerTone_ = error ? 2 : stopped ? 1 : 0;
  banner_->setStyleSheet(error ? QStringLiteral("background:#5a1d1d; color:#ffdede; padding:6px; border-radius:4px;")
                         : stopped
                             ? QStringLiteral("background:#5a4a12; color:#fff4d6; padding:6px; border-radius:4px;")
                             : QStringLiteral("background:#1d4a2a; color:#e0ffe6; padding:6px; border-radius:4px;"));
  banner_->setVisible(!text.isEmpty());
}

void MonitorPage::clearCharts() {
  loss_->clear();
  tps_->clear();
  mem_->clear();
}

void MonitorPage::addPoint(const MetricPoint& p) { addPoints({p}); }

void MonitorPage::addPoints(const QList<MetricPoint>& pts) {
  if (pts.isEmpty()) return;
  QList<QPointF> loss, tps, mem;
  for (const auto& p : pts) {
    loss.append(QPointF(p.step, p.loss));
    tps.append(QPointF(p.step, p.tokens_per_s));
    mem.append(QPointF(p.step, double(p.max_mem_bytes) / (1024.0 * 1024.0 * 1024.0)));
  }
  loss_->appendMany(loss);
  tps_->appendMany(tps);
  mem_->appendMany(mem);
  if (pts.back().steps > 0) progress_->setMaximum(pts.back().steps);
  progress_->setValue(pts.back().step + 1);
}

void MonitorPage::onStarted() {
  follow_->stop();
  stopReplay();
  for (auto* b : {replay1_, replay10_, replayStep_}) b->setEnabled(false);
  runDir_ = ctl_->runDir();
  ranksView_->setModel(ctl_->ranks());
  clearCharts();
  log_->clear();
  setBanner(QString(), false);
  title_->setText(QStringLiteral("Running: %1").arg(runDir_));
  progress_->setMaximum(std::max(1, ctl_->steps()));
  progress_->setValue(0);
  timeLeft_->setText(QStringLiteral("starting…"));
  start_->setEnabled(false);
  stop_->setEnabled(true);
}

void MonitorPage::onMetric(const MetricPoint& p) {
  addPoint(p);
  const int done = p.step + 1;
  const int total = p.steps > 0 ? p.steps : ctl_->steps();
  const double elapsed = p.elapsed_s > 0 ? p.elapsed_s : ctl_->elapsedS();
  if (done > 0 && total >= done) {
    const double left = elapsed / done * (total - done);
    timeLeft_->setText(QStringLiteral("%1 left").arg(QString::fromStdString(cost::format_seconds(left))));
  }
}

void MonitorPage::onLog(int rank, const QString& text) {
  if (text.startsWith(QLatin1String("METRIC "))) return;  // charted, not logged
  appendLog(rank >= 0 ? QStringLiteral("[rank %1] %2").arg(rank).arg(text) : text);
}

// A line at the end of the log, the view staying at the column the reader is at: appending
// scrolls a no-wrap log to the end of its longest line, so a finished run opened from disk
// showed every line from its middle.
void MonitorPage::appendLog(const QString& line) {
  QScrollBar* h = log_->horizontalScrollBar();
  const int x = h->value();
  log_->appendPlainText(line);
  h->setValue(x);
}

void MonitorPage::onFinished(const RunOutcome& o) {
  for (auto* b : {replay1_, replay10_, replayStep_}) b->setEnabled(true);  // the run is on disk now
  start_->setEnabled(true);
  stop_->setEnabled(false);
  timeLeft_->setText(o.status);
  title_->setText(QStringLiteral("%1: %2").arg(o.status, o.runDir));
  setBanner(o.message, o.status == QLatin1String("failed"), o.status == QLatin1String("stopped"));
}

void MonitorPage::showRun(const QString& runDir) {
  if (ctl_->isRunning() && QFileInfo(runDir).absoluteFilePath() == ctl_->runDir()) return;  // live already
  runDir_ = QFileInfo(runDir).absoluteFilePath();
  stopReplay();
  for (auto* b : {replay1_, replay10_, replayStep_}) b->setEnabled(true);
  followStamp_ = followStampNow();  // before the read: a change during it is read next time
  const RunSummary s = loadRunSummary(runDir_);
  if (s.status == QLatin1String("running"))
    follow_->start();
  else
    follow_->stop();
  clearCharts();
  log_->clear();
  // A resumed run's charts show its whole history: the earlier runs' steps before each resume
  // (run_lineage.hpp), marked where it resumed.
  const RunLineage lineage = runLineage(runDir_);
  const auto& pts = lineage.points;
  progress_->setMaximum(static_cast<int>(
      std::clamp<int64_t>(s.steps > 0 ? s.steps : (pts.isEmpty() ? 1 : pts.back().steps), 1, INT_MAX)));
  progress_->setValue(0);
  addPoints(pts);
  QList<double> resumes;
  for (int step : lineage.resumeSteps) resumes << double(step);
  for (MetricChart* c : {loss_, tps_, mem_}) c->setMarkers(resumes, QStringLiteral("resumed"));
  diskRanks_->reset(std::max(0, s.worldSize));
  // RUN/logs/rank*.log, listed and read byte for byte (a run folder whose name is not UTF-8).
  namespace fs = std::filesystem;
  static const QRegularExpression rankFile(QStringLiteral("^rank(\\d+)\\.log$"));
  std::vector<fs::path> logFiles;
  std::error_code ec;
  for (fs::directory_iterator it(run_layout::logs_dir(native_path(runDir_)), ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) logFiles.push_back(it->path());
  }
  std::sort(logFiles.begin(), logFiles.end());
  for (const auto& lf : logFiles) {
    const auto m = rankFile.match(qs_from_native(lf.filename().native()));
    if (!m.hasMatch()) continue;
    const int r = m.captured(1).toInt();
    std::ifstream f(lf, std::ios::binary);
    if (!f) continue;
    // Only the end of big logs.
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    const std::streamoff from = size > 256 * 1024 ? size - 256 * 1024 : 0;
    f.seekg(from);
    QByteArray tail(int(size - from), '\0');
    f.read(tail.data(), tail.size());
    tail.truncate(int(f.gcount()));
    const auto lines = QString::fromUtf8(tail).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    for (const auto& l : lines) {
      if (l.startsWith(QLatin1String("METRIC "))) continue;  // charted, not logged
      diskRanks_->appendLine(r, l);
      appendLog(QStringLiteral("[rank %1] %2").arg(r).arg(l));
    }
  }
  // The view opens on the last line from its first column (the first show scrolls to the
  // text cursor; left at the end of the longest line it showed every line from its middle).
  QTextCursor end(log_->document());
  end.movePosition(QTextCursor::End);
  end.movePosition(QTextCursor::StartOfBlock);
  log_->setTextCursor(end);
  log_->horizontalScrollBar()->setValue(0);
  using St = RankStatusModel::State;
  const St st = s.status == QLatin1String("finished")  ? St::Finished
                : s.status == QLatin1String("failed")  ? St::Stopped
                : s.status == QLatin1String("stopped") ? St::Stopped
                : s.status == QLatin1String("running") ? St::Running
                                                       : St::Stopped;  // unknown: no record says it runs
  diskRanks_->setAllRunning(st);
  if (s.failedRank >= 0) diskRanks_->setState(s.failedRank, St::Failed);
  ranksView_->setModel(diskRanks_);
  title_->setText(QStringLiteral("%1: %2").arg(s.status, runDir_));
  timeLeft_->setText(s.durationS >= 0 ? QString::fromStdString(cost::format_seconds(s.durationS)) : QString());
  if (s.status == QLatin1String("failed")) {
    QString msg =
        s.failedRank >= 0 ? QStringLiteral("Rank %1 failed").arg(s.failedRank) : QStringLiteral("The run failed");
    if (!s.message.isEmpty()) msg += QStringLiteral(": ") + s.message;
    if (s.failedRank >= 0) {
      const auto tail = diskRanks_->lastLines(s.failedRank, 8);
      if (!tail.isEmpty())
        msg += QStringLiteral("\nLast lines of rank %1:\n  ").arg(s.failedRank) + tail.join(QStringLiteral("\n  "));
    }
    setBanner(msg, true);
  } else if (s.status == QLatin1String("unknown") &&
             path_exists(QDir(runDir_).filePath(QString::fromLatin1(run_layout::kRunRecord)))) {
    // A run.json that is damaged or says something ulysses-run never writes: no green "done".
    QString msg =
        QStringLiteral("The run's state is unknown: ") +
        (s.problems.isEmpty() ? QStringLiteral("run.json holds no status") : s.problems.join(QStringLiteral("; ")));
    if (s.hasFinalLoss)
      msg +=
          QStringLiteral("\nmetrics.jsonl: %1 step(s), last loss %2").arg(s.stepsDone).arg(format_metric(s.finalLoss));
    setBanner(msg, true);
  } else if (s.status == QLatin1String("running")) {
    // Not this window's run: its files are followed (no "final loss" while it trains).
    setBanner(QStringLiteral("Running (started outside this window; its files are read as they grow): %1 step(s) so "
                             "far%2")
                  .arg(std::max(0, s.stepsDone))
                  .arg(pts.isEmpty() ? QString() : QStringLiteral(", loss %1").arg(format_metric(pts.back().loss))),
              false);
  } else if (s.hasFinalLoss) {
    setBanner(QStringLiteral("%1 after %2 step(s), final loss %3")
                  .arg(s.status)
                  .arg(s.stepsDone)
                  .arg(format_metric(s.finalLoss)),
              false, s.status == QLatin1String("stopped"));
  } else {
    setBanner(QString(), false);
  }
}

}  // namespace ulysses::ui
