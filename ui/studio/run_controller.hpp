// Runs `ulysses-run CONFIG --json --out RUN` in a QProcess: METRIC lines from stdout,
// "[rank r] ..." lines from stderr, Stop = SIGTERM to ulysses-run (which stops every rank),
// and the outcome from RUN/run.json when the launcher exits.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QProcess>
#include <QStringList>
#include <QVector>

#include "run_data.hpp"

namespace ulysses::ui {

class RankStatusModel;

struct RunOutcome {
  QString runDir;
  QString status;  // finished | failed | stopped
  int exitCode = 0;
  int failedRank = -1;
  QString message;     // a sentence for the user, with the failing rank's last lines
  RunSummary summary;  // RUN/run.json as written by ulysses-run
};

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  // Starts the launcher; false with *error when it is already running or cannot start.
  bool start(const QString& program, const QString& configPath, const QString& runDir, int worldSize, int steps,
             QString* error);
  // Asks ulysses-run to stop (SIGTERM); kills it if it has not exited after graceMs.
  void stop(int graceMs = 20000);
  bool isRunning() const;
  qint64 pid() const;
  QString runDir() const { return runDir_; }
  int steps() const { return steps_; }
  const QVector<MetricPoint>& metrics() const { return metrics_; }
  RankStatusModel* ranks() const { return ranks_; }
  QStringList launcherLines() const { return launcherTail_; }  // stderr lines without a rank prefix
  double elapsedS() const;

 signals:
  void started();
  void metric(const ulysses::ui::MetricPoint& p);
  void logLine(int rank, const QString& text);  // rank -1: ulysses-run itself
  void finished(const ulysses::ui::RunOutcome& outcome);

 private:
  void readStdout();
  void readStderr();
  void onFinished(int exitCode, QProcess::ExitStatus st);
  void onError(QProcess::ProcessError e);

  QProcess* proc_ = nullptr;
  RankStatusModel* ranks_ = nullptr;
  QByteArray outBuf_, errBuf_;
  QVector<MetricPoint> metrics_;
  QStringList launcherTail_;
  QString runDir_;
  int steps_ = 0;
  bool stopRequested_ = false;
  bool done_ = true;
  QElapsedTimer clock_;
};

}  // namespace ulysses::ui

Q_DECLARE_METATYPE(ulysses::ui::RunOutcome)
