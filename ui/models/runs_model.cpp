// Runs folder as a table model.
#include "axis_ticks.hpp"
#include "runs_model.hpp"
#include "run_lineage.hpp"

#include <QBrush>
#include <QColor>
#include <QDateTime>
#include <QFileInfo>

#include "cost_model.hpp"

namespace ulysses::ui {

RunsModel::RunsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsModel::setRunsDir(const QString& dir) {
  runsDir_ = dir;
  beginResetModel();
  runs_.clear();
  endResetModel();
  refresh();
}

int RunsModel::rowOfDir(const QString& dir) const {
  const QString abs = QFileInfo(dir).absoluteFilePath();
  for (int i = 0; i < runs_.size(); ++i)
    if (runs_[i].dir == abs) return i;
  return -1;
}

void RunsModel::refresh() {
  const auto fresh = scanRunsDir(runsDir_);
  // Remove rows that are gone.
  for (int i = runs_.size() - 1; i >= 0; --i) {
    const bool present =
        std::any_of(fresh.begin(), fresh.end(), [&](const RunSummary& s) { return s.dir == runs_[i].dir; });
    if (!present) {
      beginRemoveRows({}, i, i);
      runs_.remove(i);
      endRemoveRows();
    }
  }
  // Update rows that exist, append new ones.
  for (const auto& s : fresh) {
    const int row = rowOfDir(s.dir);
    if (row >= 0) {
      runs_[row] = s;
      emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
    } else {
      const int at = runs_.size();
      beginInsertRows({}, at, at);
      runs_.push_back(s);
      endInsertRows();
    }
  }
  // Resume lineage, over the whole folder (a run and the one it resumed sit side by side).
  resumedFrom_ = QVector<QString>(runs_.size());
  for (int i = 0; i < runs_.size(); ++i) {
    const int k = resumedFromIndex(runs_, i);
    resumedFrom_[i] = k >= 0 ? runs_[k].dir : QString();
  }
  if (!runs_.isEmpty()) emit dataChanged(index(0, ResumedFrom), index(runs_.size() - 1, ResumedFrom));
}

int RunsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : runs_.size(); }
int RunsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= runs_.size() || index.column() >= ColumnCount) return {};
  const auto& r = runs_[index.row()];
  if (role == DirRole) return r.dir;
  const QString from = index.row() < resumedFrom_.size() ? resumedFrom_[index.row()] : QString();
  if (role == ResumedFromRole) return from;
  if (role == Qt::ToolTipRole && index.column() == ResumedFrom && !from.isEmpty())
    return QStringLiteral("Resumed from %1 (its checkpoints in %2); double-click to go to it")
        .arg(from, r.config.value(QStringLiteral("train")).toObject().value(QStringLiteral("resume_from")).toString());
  if (role == Qt::ToolTipRole) return r.message.isEmpty() ? r.dir : r.dir + QStringLiteral("\n") + r.message;
  if (role == Qt::ForegroundRole && index.column() == Status) {
    if (r.status == QLatin1String("failed")) return QBrush(QColor(0xd0, 0x30, 0x30));
    if (r.status == QLatin1String("finished")) return QBrush(QColor(0x20, 0x90, 0x40));
    return {};
  }
  if (role == Qt::TextAlignmentRole && index.column() >= Duration && index.column() != ResumedFrom)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role == SortRole) {
    switch (index.column()) {
      case Duration:
        return r.durationS;
      case Steps:
        return r.stepsDone;
      case FinalLoss:
        return r.hasFinalLoss ? r.finalLoss : 1e300;
      case World:
        return r.worldSize;
      default:
        break;
    }
    return data(index, Qt::DisplayRole);
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name:
      return r.name;
    case Config:
      return r.configName;
    case Status:
      return r.status == QLatin1String("failed") && r.failedRank >= 0
                 ? QStringLiteral("failed (rank %1)").arg(r.failedRank)
                 : r.status;
    case Started: {
      const auto t = QDateTime::fromString(r.startedAt, Qt::ISODate);
      return t.isValid() ? t.toLocalTime().toString(QStringLiteral("yyyy-MM-dd hh:mm:ss")) : r.startedAt;
    }
    case Duration:
      return r.durationS >= 0 ? QString::fromStdString(cost::format_seconds(r.durationS)) : QString();
    case Steps:
      if (r.stepsDone < 0) return QString();
      return r.steps > 0 ? QStringLiteral("%1 / %2").arg(r.stepsDone).arg(r.steps) : QString::number(r.stepsDone);
    case FinalLoss:
      return r.hasFinalLoss ? format_metric(r.finalLoss) : QString();
    case World:
      return r.worldSize > 0 ? QString::number(r.worldSize) : QString();
    case ResumedFrom:
      return from.isEmpty() ? QString() : QFileInfo(from).fileName();
    default:
      return {};
  }
}

QVariant RunsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, o, role);
  static const char* names[] = {"Run",   "Config",     "Status", "Started",     "Duration",
                                "Steps", "Final loss", "Ranks",  "Resumed from"};
  return section >= 0 && section < ColumnCount ? QString::fromLatin1(names[section]) : QVariant();
}

}  // namespace ulysses::ui
