// Cost-model estimates of a config next to the memory planner's dry run (`ulysses-run
// CONFIG --plan --json`, which execs `ulysses-worker --plan`) and what a run measured
// (step time, memory, tokens/s), with the measured/predicted ratio.
#pragma once

#include <QAbstractTableModel>
#include <QVector>
#include <optional>

#include "cost_model.hpp"
#include "run_data.hpp"

namespace ulysses::ui {

// The planner's figures per rank, read from its JSON (the studio never links libtorch).
struct PlanFigures {
  QString device, dtype, attention;
  qint64 seqLength = 0;
  qint64 staticBytes = 0, activationBytes = 0, lossPeakBytes = -1, transientBytes = 0, peakBytes = 0;
  // Parses one JSON object with at least peak_bytes, activation_bytes and static_bytes;
  // nullopt (and *error) otherwise.
  static std::optional<PlanFigures> fromJson(const QByteArray& text, QString* error);
};

class EstimateModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Quantity, Estimate, Plan, Measured, Ratio, ColumnCount };
  enum RowId {
    Params,
    StateMem,
    ActMem,
    TotalMem,
    A2ALayer,
    A2AStep,
    AllReduce,
    Flops,
    StepTime,
    TokensPerS,
    RunTime,
    RowCount
  };

  explicit EstimateModel(QObject* parent = nullptr);
  void setEstimate(const cost::CostEstimate& e, int steps);
  void clearEstimate(const QString& why);  // invalid config: every estimate shows `why`
  void setPlan(const PlanFigures& p);
  void clearPlan(const QString& why);  // no plan (yet): the Plan column shows `why`
  bool hasPlan() const { return plan_.has_value(); }
  const PlanFigures& plan() const { return *plan_; }
  // `residentMemory`: the run's memory figure is the process's peak resident memory (a CPU
  // run), not tensor bytes: shown as "... RSS", with no ratio against the plan's tensor bytes.
  void setMeasured(const MeasuredStats& m, bool residentMemory = false);
  void clearMeasured();
  bool hasEstimate() const { return est_.has_value(); }
  const cost::CostEstimate& estimate() const { return *est_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  double predicted(int row) const;  // numeric predicted value, NaN when none
  double measured(int row) const;   // numeric measured value, NaN when none
  std::optional<cost::CostEstimate> est_;
  std::optional<MeasuredStats> meas_;
  bool resident_ = false;
  std::optional<PlanFigures> plan_;
  QString planWhy_;
  int steps_ = 0;
  QString why_;
};

}  // namespace ulysses::ui
