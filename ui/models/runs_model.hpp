// Table of the run directories under a runs folder: name, config, status, start, duration,
// steps, final loss, ranks, and the run a resumed run continued. Reads run.json/config.json/metrics.jsonl through
// run_data.hpp.
#pragma once

#include <QAbstractTableModel>
#include <QVector>

#include "run_data.hpp"

namespace ulysses::ui {

class RunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // ResumedFrom: the run a resumed run continued (run_lineage.hpp), by name.
  enum Column { Name, Config, Status, Started, Duration, Steps, FinalLoss, World, ResumedFrom, ColumnCount };
  static constexpr int DirRole = Qt::UserRole + 1;          // absolute run directory
  static constexpr int SortRole = Qt::UserRole + 2;         // numeric value for sorting
  static constexpr int ResumedFromRole = Qt::UserRole + 3;  // folder of the run it resumed ("" none)

  explicit RunsModel(QObject* parent = nullptr);

  void setRunsDir(const QString& dir);  // and refresh()
  QString runsDir() const { return runsDir_; }
  // Re-reads the folder; keeps rows of runs that did not change.
  void refresh();
  const RunSummary& run(int row) const { return runs_.at(row); }
  int rowOfDir(const QString& dir) const;  // -1 when absent

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  QString runsDir_;
  QVector<RunSummary> runs_;
  QVector<QString> resumedFrom_;  // per row: the folder of the run it resumed, or ""
};

}  // namespace ulysses::ui
