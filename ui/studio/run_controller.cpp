// ulysses-run as a child process of the studio.
#include "run_controller.hpp"

#include <QDir>
#include <QFileInfo>
#include <QPointer>
#include <QTimer>

#include "rank_status_model.hpp"
#include "ulysses/common/run_layout.hpp"

namespace ulysses::ui {

RunController::RunController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<ulysses::ui::MetricPoint>();
  qRegisterMetaType<ulysses::ui::RunOutcome>();
  ranks_ = new RankStatusModel(this);
}

RunController::~RunController() {
  if (proc_ && proc_->state() != QProcess::NotRunning) {
    disconnect(proc_, nullptr, this, nullptr);
    proc_->terminate();  // ulysses-run stops its workers on SIGTERM
    if (!proc_->waitForFinished(10000)) {
      proc_->kill();
      proc_->waitForFinished(2000);
    }
  }
}

bool RunController::isRunning() const { return proc_ && proc_->state() != QProcess::NotRunning; }
qint64 RunController::pid() const { return proc_ ? proc_->processId() : 0; }
double RunController::elapsedS() const { return clock_.isValid() ? clock_.elapsed() / 1e3 : 0.0; }

bool RunController::start(const QString& program, const QString& configPath, const QString& runDir, int worldSize,
                          int steps, QString* error) {
  if (isRunning()) {
    if (error) *error = QStringLiteral("a run is already in progress (%1); stop it first").arg(runDir_);
    return false;
  }
  if (program.isEmpty() || !QFileInfo(program).isExecutable()) {
    if (error)
      *error =
          QStringLiteral(
              "ulysses-run was not found%1; build it (cmake --build build --target ulysses-run) or set ULYSSES_RUN")
              .arg(program.isEmpty() ? QString() : QStringLiteral(" at ") + program);
    return false;
  }
  if (proc_) proc_->deleteLater();
  proc_ = new QProcess(this);
  outBuf_.clear();
  errBuf_.clear();
  metrics_.clear();
  launcherTail_.clear();
  runDir_ = QFileInfo(runDir).absoluteFilePath();
  steps_ = steps;
  stopRequested_ = false;
  done_ = false;
  ranks_->reset(worldSize);
  connect(proc_, &QProcess::readyReadStandardOutput, this, &RunController::readStdout);
  connect(proc_, &QProcess::readyReadStandardError, this, &RunController::readStderr);
  connect(proc_, &QProcess::finished, this, &RunController::onFinished);
  connect(proc_, &QProcess::errorOccurred, this, &RunController::onError);
  clock_.start();
  proc_->start(program, {configPath, QStringLiteral("--json"), QStringLiteral("--out"), runDir_});
  if (!proc_->waitForStarted(10000)) {
    if (error) *error = QStringLiteral("cannot start %1: %2").arg(program, proc_->errorString());
    done_ = true;
    return false;
  }
  emit started();
  return true;
}

void RunController::stop(int graceMs) {
  if (!isRunning()) return;
  stopRequested_ = true;
  proc_->terminate();
  QPointer<QProcess> p = proc_;
  QTimer::singleShot(graceMs, this, [p] {
    if (p && p->state() != QProcess::NotRunning) p->kill();
  });
}

void RunController::readStdout() {
  outBuf_ += proc_->readAllStandardOutput();
  int nl;
  while ((nl = outBuf_.indexOf('\n')) >= 0) {
    const QByteArray line = outBuf_.left(nl);
    outBuf_.remove(0, nl + 1);
    MetricPoint p;
    if (parseMetricLine(line, &p)) {
      metrics_.push_back(p);
      if (p.steps > 0) steps_ = p.steps;
      emit metric(p);
    } else if (!line.trimmed().isEmpty()) {
      emit logLine(-1, QString::fromUtf8(line));
    }
  }
}

void RunController::readStderr() {
  errBuf_ += proc_->readAllStandardError();
  int nl;
  while ((nl = errBuf_.indexOf('\n')) >= 0) {
    const QString line = QString::fromUtf8(errBuf_.left(nl));
    errBuf_.remove(0, nl + 1);
    int rank = -1;
    QString text;
    if (parseRankLine(line, &rank, &text)) {
      if (text.startsWith(QLatin1String("METRIC "))) continue;  // rank 0's metrics come on stdout
      ranks_->appendLine(rank, text);
      emit logLine(rank, text);
    } else {
      // liveness: "ulysses-run: rank R: PHASE"; a step time goes to the rank table only (one a
      // rank and step would flood the log)
      if (ranks_->applyLauncherLine(line) && line.endsWith(QLatin1String(" ms")) &&
          line.contains(QLatin1String(" took ")))
        continue;
      launcherTail_.push_back(line);
      while (launcherTail_.size() > 40) launcherTail_.pop_front();
      emit logLine(-1, line);
    }
  }
}

void RunController::onError(QProcess::ProcessError e) {
  if (e == QProcess::FailedToStart && !done_) {
    done_ = true;
    RunOutcome o;
    o.runDir = runDir_;
    o.status = QStringLiteral("failed");
    o.exitCode = -1;
    o.message = QStringLiteral("ulysses-run failed to start: %1").arg(proc_->errorString());
    emit finished(o);
  }
}

void RunController::onFinished(int exitCode, QProcess::ExitStatus st) {
  if (done_) return;
  done_ = true;
  readStdout();
  readStderr();
  RunOutcome o;
  o.runDir = runDir_;
  o.exitCode = st == QProcess::NormalExit ? exitCode : -1;
  o.summary = loadRunSummary(runDir_);
  const bool haveRunJson = QFileInfo::exists(QDir(runDir_).filePath(QString::fromLatin1(run_layout::kRunRecord)));
  if (haveRunJson && o.summary.status != QLatin1String("running") && o.summary.status != QLatin1String("unknown"))
    o.status = o.summary.status;
  else if (stopRequested_)
    o.status = QStringLiteral("stopped");
  else
    o.status = exitCode == 0 && st == QProcess::NormalExit ? QStringLiteral("finished") : QStringLiteral("failed");
  o.failedRank = o.summary.failedRank;
  if (o.status == QLatin1String("failed")) {
    QString msg;
    if (o.failedRank >= 0) {
      msg = QStringLiteral("Rank %1 failed").arg(o.failedRank);
      if (!o.summary.message.isEmpty()) msg += QStringLiteral(": ") + o.summary.message;
      const auto tail = ranks_->lastLines(o.failedRank, 8);
      if (!tail.isEmpty())
        msg += QStringLiteral("\nLast lines of rank %1:\n  ").arg(o.failedRank) + tail.join(QStringLiteral("\n  "));
    } else if (exitCode == 2) {
      msg = QStringLiteral("ulysses-run refused the config (exit 2): ") + launcherTail_.join(QLatin1Char('\n'));
    } else {
      msg = QStringLiteral("ulysses-run failed (exit %1)").arg(o.exitCode);
      if (!o.summary.message.isEmpty()) msg += QStringLiteral(": ") + o.summary.message;
      const auto tail = launcherTail_.mid(std::max(0, static_cast<int>(launcherTail_.size()) - 8));
      if (!tail.isEmpty()) msg += QStringLiteral("\n  ") + tail.join(QStringLiteral("\n  "));
    }
    o.message = msg;
    if (o.failedRank >= 0) ranks_->setState(o.failedRank, RankStatusModel::State::Failed);
    ranks_->setAllRunning(RankStatusModel::State::Stopped);
  } else if (o.status == QLatin1String("stopped")) {
    o.message = QStringLiteral("Stopped after %1 step(s)").arg(metrics_.size());
    ranks_->setAllRunning(RankStatusModel::State::Stopped);
  } else {
    o.message = QStringLiteral("Finished %1 step(s)").arg(metrics_.size());
    if (!metrics_.isEmpty()) o.message += QStringLiteral(", final loss %1").arg(metrics_.back().loss, 0, 'f', 4);
    ranks_->setAllRunning(RankStatusModel::State::Finished);
  }
  emit finished(o);
}

}  // namespace ulysses::ui
