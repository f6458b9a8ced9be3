// Side-by-side comparison of two runs.
#include "compare_model.hpp"

#include <QBrush>
#include <QColor>
#include <QDir>
#include <QFont>
#include <QJsonValue>
#include <QSet>

#include "cost_model.hpp"

namespace ulysses::ui {

namespace {
QString jsonText(const QJsonValue& v) {
  switch (v.type()) {
    case QJsonValue::Bool:
      return v.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    case QJsonValue::Double:
      return QString::number(v.toDouble(), 'g', 10);
    case QJsonValue::String:
      return v.toString();
    case QJsonValue::Undefined:
    case QJsonValue::Null:
      return QString();
    default:
      return QStringLiteral("...");
  }
}
}  // namespace

CompareModel::CompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareModel::clear() {
  beginResetModel();
  rows_.clear();
  nameA_.clear();
  nameB_.clear();
  endResetModel();
}

void CompareModel::setRuns(const RunSummary& a, const RunSummary& b) {
  beginResetModel();
  rows_.clear();
  nameA_ = a.name;
  nameB_ = b.name;
  auto add = [&](const QString& field, const QString& x, const QString& y) { rows_.push_back({field, x, y, x != y}); };
  const auto ma = measure(readMetricsFile(QDir(a.dir).filePath(QStringLiteral("metrics.jsonl"))));
  const auto mb = measure(readMetricsFile(QDir(b.dir).filePath(QStringLiteral("metrics.jsonl"))));
  auto secs = [](double s) { return s >= 0 ? QString::fromStdString(cost::format_seconds(s)) : QString(); };
  add(QStringLiteral("status"), a.status, b.status);
  add(QStringLiteral("config"), a.configName, b.configName);
  add(QStringLiteral("duration"), secs(a.durationS), secs(b.durationS));
  add(QStringLiteral("steps done"), QString::number(a.stepsDone), QString::number(b.stepsDone));
  add(QStringLiteral("final loss"), a.hasFinalLoss ? QString::number(a.finalLoss, 'f', 4) : QString(),
      b.hasFinalLoss ? QString::number(b.finalLoss, 'f', 4) : QString());
  add(QStringLiteral("median step"), ma.steps ? QStringLiteral("%1 ms").arg(ma.medianStepMs, 0, 'f', 1) : QString(),
      mb.steps ? QStringLiteral("%1 ms").arg(mb.medianStepMs, 0, 'f', 1) : QString());
  add(QStringLiteral("tokens/s"), ma.steps ? QString::number(ma.tokensPerS, 'f', 0) : QString(),
      mb.steps ? QString::number(mb.tokensPerS, 'f', 0) : QString());
  add(QStringLiteral("max memory / rank"),
      ma.steps ? QString::fromStdString(cost::format_bytes(double(ma.maxMemBytes))) : QString(),
      mb.steps ? QString::fromStdString(cost::format_bytes(double(mb.maxMemBytes))) : QString());
  add(QStringLiteral("ranks"), QString::number(a.worldSize), QString::number(b.worldSize));
  // Every config key of either run, section by section.
  const QStringList sections = {"model", "parallel", "train", "data", "profile"};
  for (const auto& sec : sections) {
    const auto sa = a.config.value(sec).toObject();
    const auto sb = b.config.value(sec).toObject();
    QStringList keys = sa.keys();
    for (const auto& k : sb.keys())
      if (!keys.contains(k)) keys.push_back(k);
    for (const auto& k : keys) add(sec + QLatin1Char('.') + k, jsonText(sa.value(k)), jsonText(sb.value(k)));
  }
  endResetModel();
}

int CompareModel::rowOfField(const QString& field) const {
  for (int i = 0; i < rows_.size(); ++i)
    if (rows_[i].field == field) return i;
  return -1;
}

int CompareModel::differingRows() const {
  return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.differs; }));
}

int CompareModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : rows_.size(); }
int CompareModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant CompareModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rows_.size() || index.column() >= ColumnCount) return {};
  const auto& r = rows_[index.row()];
  if (role == DiffersRole) return r.differs;
  if (role == Qt::FontRole && r.differs) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == Qt::BackgroundRole && r.differs && index.column() != Field) return QBrush(QColor(255, 200, 0, 60));
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case Field:
      return r.field;
    case RunA:
      return r.a;
    case RunB:
      return r.b;
    default:
      return {};
  }
}

QVariant CompareModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, o, role);
  switch (section) {
    case Field:
      return QStringLiteral("Field");
    case RunA:
      return nameA_.isEmpty() ? QStringLiteral("Run A") : nameA_;
    case RunB:
      return nameB_.isEmpty() ? QStringLiteral("Run B") : nameB_;
    default:
      return {};
  }
}

}  // namespace ulysses::ui
