// Two runs side by side: summary rows (status, duration, loss, throughput, memory; each
// numeric row with B - A and B / A) and every config key of every section (`faults` too,
// nested keys flattened, numeric ones with B - A and B / A), with rows that differ marked; when both runs have traces,
// the profiler's run comparison (profiler/compare.hpp: headline, per phase, per layer, with B - A and B / A) is
// appended, rows whose B / A is off 1 by more than the threshold marked.
#pragma once

#include <QAbstractTableModel>
#include <QVector>
#include <optional>

#include "run_data.hpp"
#include "ulysses/profiler/compare.hpp"

namespace ulysses::ui {

class CompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Field, RunA, RunB, Diff, Ratio, ColumnCount };
  static constexpr int DiffersRole = Qt::UserRole + 1;  // bool
  static constexpr int SectionRole = Qt::UserRole + 2;  // "run", "config", "headline", "phase", "layer"
  static constexpr int ValueRole = Qt::UserRole + 3;    // double in the profiler's unit (ns, ...) or invalid

  explicit CompareModel(QObject* parent = nullptr);
  // Measured stats come from each run's metrics.jsonl.
  void setRuns(const RunSummary& a, const RunSummary& b);
  void clear();
  // Appends the trace comparison's rows ("trace: ...", "phase: ...", "layer: ...") after the
  // run and config rows, replacing earlier ones. Times in ms.
  void setTraceComparison(const prof::Comparison& c);
  int traceRows() const;
  // Loads both runs' traces (RUN/trace/rank*.sqlite) and compares them; blocking (call it off
  // the GUI thread). std::nullopt with *error set when either trace cannot be read.
  static std::optional<prof::Comparison> compareTraces(const QString& dirA, const QString& dirB, QString* error,
                                                       double threshold = 0.10);
  int rowOfField(const QString& field) const;  // -1 when absent
  int differingRows() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 public:  // the file's helpers fill rows
  struct Row {
    QString field, a, b, diff, ratio;
    bool differs = false;
    QString section;
    QVariant va, vb;
  };

 private:
  QVector<Row> rows_;
  QString nameA_, nameB_;
};

}  // namespace ulysses::ui
