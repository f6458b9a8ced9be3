// Per-rank status of a live run: state, number of log lines and the last line, with the
// last lines of each rank kept for failure messages. The state follows the workers'
// heartbeats as ulysses-run reports them ("ulysses-run: rank R: PHASE" lines, see
// docs/CONTRACTS.md "Heartbeat"): a rank that logs nothing still moves from "starting" to
// "running: rendezvous", "running: training (step 0)", or "unresponsive" when it goes quiet.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <QVector>

namespace ulysses::ui {

class RankStatusModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum class State { Starting, Running, Finished, Failed, Stopped, Unresponsive };
  enum Column { Rank, StateColumn, StepTime, Lines, LastLine, ColumnCount };
  static constexpr int kKeepLines = 20;

  explicit RankStatusModel(QObject* parent = nullptr);
  void reset(int worldSize);                       // every rank Starting
  void appendLine(int rank, const QString& text);  // grows the table for unknown ranks
  void setState(int rank, State s);
  void setAllRunning(State s);  // every rank still Starting/Running/Unresponsive -> s
  // A line of ulysses-run's own stderr: its liveness lines update the rank's state and phase
  // (true when the line was one of them; other lines are left alone).
  bool applyLauncherLine(const QString& line);
  QString phase(int rank) const;  // last phase reported, e.g. "model build"
  // The rank's last step time ("ulysses-run: rank R: step K took X ms", with --json), -1 if none
  // yet; and that step.
  double stepMs(int rank) const;
  qint64 timedStep(int rank) const;
  State state(int rank) const;
  QStringList lastLines(int rank, int n) const;
  static QString stateName(State s);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  struct RankRow {
    State state = State::Starting;
    QString phase;  // from the liveness lines
    double step_ms = -1;
    qint64 timed_step = -1;
    int lines = 0;
    QStringList tail;
  };
  void ensure(int rank);
  QVector<RankRow> ranks_;
};

}  // namespace ulysses::ui
