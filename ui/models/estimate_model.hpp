// Cost-model estimates of a config next to what a run measured (step time, memory,
// tokens/s), with the measured/predicted ratio.
#pragma once

#include <QAbstractTableModel>
#include <QVector>
#include <optional>

#include "cost_model.hpp"
#include "run_data.hpp"

namespace ulysses::ui {

class EstimateModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Quantity, Estimate, Measured, Ratio, ColumnCount };
  enum RowId { Params, StateMem, ActMem, TotalMem, A2ALayer, A2AStep, AllReduce, Flops, StepTime, TokensPerS, RunTime, RowCount };

  explicit EstimateModel(QObject* parent = nullptr);
  void setEstimate(const cost::CostEstimate& e, int steps);
  void clearEstimate(const QString& why);  // invalid config: every estimate shows `why`
  void setMeasured(const MeasuredStats& m);
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
  int steps_ = 0;
  QString why_;
};

}  // namespace ulysses::ui
