// "What if" in the studio (docs/STUDIO.md): the simulated step of a config on hardware the user
// picks (`ulysses-run CONFIG --simulate HW --out DIR --json`, engine/sim; the studio never links
// libtorch), beside the memory planner's figures and the cost model's estimate, and beside what a
// measured run took when the simulation changes that run (sp, ring, head chunks, ZeRO stage) on
// hardware calibrated from it (`--calibrate RUN`). Widget-free: the parsing of ulysses-run's
// outputs, the --set arguments of a change, and the table the What-if page shows.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <optional>

#include <nlohmann/json.hpp>

#include "estimate_model.hpp"

namespace ulysses::ui {

// The shipped names in `ulysses-run --simulate list`'s output (lines "  NAME  description").
QStringList parseHardwareList(const QString& text);

// One simulated step, from `ulysses-run ... --simulate HW --json`.
struct SimFigures {
  QString hardware, out;
  qint64 worldSize = 0;
  double stepMs = 0, tokensPerS = 0, computeMs = 0, commMs = 0;
  // nullopt (and *error) unless one JSON object with hardware, step_ms > 0 and out.
  static std::optional<SimFigures> fromJson(const QByteArray& text, QString* error);
};

// What the user changes before simulating; -1 leaves the base config's value.
struct WhatIfChanges {
  int spSize = -1, ringSize = -1, headChunks = -1, zeroStage = -1;
  // `--set KEY=VALUE` pairs for the values that differ from `base` (a run-config JSON object).
  QStringList setArguments(const nlohmann::json& base) const;
};

// The last line of a failed process's stderr worth showing ("ulysses-worker --simulate: ...").
QString lastErrorLine(const QString& stderrText, int exitCode);

// Rows: step time, tokens/s, compute, collectives, planned peak per rank; columns: the cost
// model's estimate, the memory plan, the simulated step, the measured run, simulated/measured.
class WhatIfModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Quantity, Estimate, Plan, Simulated, Measured, Ratio, ColumnCount };
  enum RowId { StepTime, TokensPerS, Compute, Collectives, PeakMemory, RowCount };

  explicit WhatIfModel(QObject* parent = nullptr);
  void setEstimate(const std::optional<cost::CostEstimate>& e);
  void setPlan(const std::optional<PlanFigures>& p);
  void setSimulated(const std::optional<SimFigures>& s);
  void setMeasured(const std::optional<MeasuredStats>& m);
  bool hasSimulated() const { return sim_.has_value(); }
  const SimFigures& simulated() const { return *sim_; }
  // simulated / measured step time; NaN without both.
  double stepRatio() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  double value(int row, int column) const;  // NaN when none
  std::optional<cost::CostEstimate> est_;
  std::optional<PlanFigures> plan_;
  std::optional<SimFigures> sim_;
  std::optional<MeasuredStats> meas_;
};

}  // namespace ulysses::ui
