// Run monitor: Start/Stop, progress with time left, live charts of loss, tokens/s and
// memory, per-rank status, the log, and a clear message when a rank fails. Also shows a
// finished run opened from disk (metrics.jsonl, logs/rank*.log, run.json).
#pragma once

#include <QWidget>

#include <QElapsedTimer>
#include <QList>
#include <QPointF>
#include <memory>

#include "replay_model.hpp"
#include "run_controller.hpp"

class QLabel;
class QProgressBar;
class QPushButton;
class QPlainTextEdit;
class QTableView;
class QTimer;

namespace ulysses::ui {

class MetricChart;

class MonitorPage : public QWidget {
  Q_OBJECT
 public:
  explicit MonitorPage(RunController* controller, QWidget* parent = nullptr);

  // Shows a run directory read from disk (no process).
  void showRun(const QString& runDir);
  QString shownRun() const { return runDir_; }
  QString bannerText() const;
  int bannerTone() const { return bannerTone_; }  // 0 green, 1 amber (stopped), 2 red
  QPushButton* startButton() const { return start_; }
  QPushButton* stopButton() const { return stop_; }
  int progressValue() const;
  int chartPoints() const;  // points in the loss chart
  // Charted values: 0 loss, 1 tokens/s, 2 max memory (GiB); x = step.
  QList<QPointF> chartValues(int which) const;

  // Replay of a recorded run (no training): speed × real time (1, 10, ...), or 0 for step
  // by step (replayStep()). False with *error when the run has no metrics.
  bool replayRun(const QString& runDir, double speed, QString* error = nullptr);
  void replayStep();
  void stopReplay();
  bool replaying() const;
  int replayCursorStep() const { return replay_ ? replay_->cursorStep() : -1; }
  const ReplayModel* replayModel() const { return replay_.get(); }

 signals:
  void startRequested();
  // The replay cursor moved: last shown step and the run time (s since start).
  void replayCursor(int step, double runTimeS);
  void replayFinished();

 private:
  void onStarted();
  void onMetric(const MetricPoint& p);
  void onLog(int rank, const QString& text);
  void appendLog(const QString& line);  // keeps the horizontal scroll where it is
  void onFinished(const RunOutcome& o);
  void clearCharts();
  void addPoint(const MetricPoint& p);
  void addPoints(const QList<MetricPoint>& pts);  // one chart update for all
  void setBanner(const QString& text, bool error, bool stopped = false);
  int bannerTone_ = 0;  // 0 green (finished, running), 1 amber (stopped), 2 red (failed, unknown)

  RunController* ctl_;
  QString runDir_;
  QLabel* title_ = nullptr;
  QLabel* banner_ = nullptr;
  QLabel* timeLeft_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* start_ = nullptr;
  QPushButton* stop_ = nullptr;
  MetricChart* loss_ = nullptr;
  MetricChart* tps_ = nullptr;
  MetricChart* mem_ = nullptr;
  QTableView* ranksView_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  RankStatusModel* diskRanks_ = nullptr;  // ranks of a run opened from disk
  void replayTick();
  void showReplayed(const MetricPoint& p);
  std::unique_ptr<ReplayModel> replay_;
  QTimer* replayTimer_ = nullptr;
  QElapsedTimer replayWall_;
  double replaySpeed_ = 0;
  QPushButton* replay1_ = nullptr;
  QPushButton* replay10_ = nullptr;
  QPushButton* replayStep_ = nullptr;
  // A live run this window did not launch (opened from the Runs list or the command line):
  // its files are read again when they change, until its run.json says how it ended.
  void followTick();
  QTimer* follow_ = nullptr;
  QString followStamp_;  // sizes and times of metrics.jsonl and run.json at the last read
  QString followStampNow() const;
};

}  // namespace ulysses::ui
