// Two runs side by side: summary rows (status, duration, loss, throughput, memory) and
// every config key, with rows that differ marked.
#pragma once

#include <QAbstractTableModel>
#include <QVector>

#include "run_data.hpp"

namespace ulysses::ui {

class CompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Field, RunA, RunB, ColumnCount };
  static constexpr int DiffersRole = Qt::UserRole + 1;  // bool

  explicit CompareModel(QObject* parent = nullptr);
  // Measured stats come from each run's metrics.jsonl.
  void setRuns(const RunSummary& a, const RunSummary& b);
  void clear();
  int rowOfField(const QString& field) const;  // -1 when absent
  int differingRows() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  struct Row {
    QString field, a, b;
    bool differs = false;
  };
  QVector<Row> rows_;
  QString nameA_, nameB_;
};

}  // namespace ulysses::ui
