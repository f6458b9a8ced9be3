// Run monitor: Start/Stop, progress with time left, live charts of loss, tokens/s and
// memory, per-rank status, the log, and a clear message when a rank fails. Also shows a
// finished run opened from disk (metrics.jsonl, logs/rank*.log, run.json).
#pragma once

#include <QWidget>

#include "run_controller.hpp"

class QLabel;
class QProgressBar;
class QPushButton;
class QPlainTextEdit;
class QTableView;

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
  QPushButton* startButton() const { return start_; }
  QPushButton* stopButton() const { return stop_; }
  int progressValue() const;
  int chartPoints() const;  // points in the loss chart

 signals:
  void startRequested();

 private:
  void onStarted();
  void onMetric(const MetricPoint& p);
  void onLog(int rank, const QString& text);
  void onFinished(const RunOutcome& o);
  void clearCharts();
  void addPoint(const MetricPoint& p);
  void setBanner(const QString& text, bool error);

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
};

}  // namespace ulysses::ui
