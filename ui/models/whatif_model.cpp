// "What if" figures (see whatif_model.hpp).
#include "whatif_model.hpp"

#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <cmath>
#include <limits>

namespace ulysses::ui {

QStringList parseHardwareList(const QString& text) {
  // "  h200-x8  8 x H200 141 GB ..." under the "Shipped hardware descriptions" line.
  static const QRegularExpression row(QStringLiteral("^  ([A-Za-z0-9][A-Za-z0-9._-]*)(\\s|$)"));
  QStringList names;
  for (const QString& line : text.split(QLatin1Char('\n'))) {
    const auto m = row.match(line);
    if (m.hasMatch() && !names.contains(m.captured(1))) names << m.captured(1);
  }
  return names;
}

std::optional<SimFigures> SimFigures::fromJson(const QByteArray& text, QString* error) {
  QJsonParseError pe{};
  const QJsonDocument d = QJsonDocument::fromJson(text.trimmed(), &pe);
  auto fail = [&](const QString& why) -> std::optional<SimFigures> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (pe.error != QJsonParseError::NoError || !d.isObject())
    return fail(QStringLiteral("the simulator's output is not one JSON object (%1)").arg(pe.errorString()));
  const QJsonObject o = d.object();
  SimFigures s;
  s.hardware = o.value(QStringLiteral("hardware")).toString();
  s.out = o.value(QStringLiteral("out")).toString();
  s.worldSize = o.value(QStringLiteral("world_size")).toInteger();
  s.stepMs = o.value(QStringLiteral("step_ms")).toDouble(-1);
  s.tokensPerS = o.value(QStringLiteral("tokens_per_s")).toDouble();
  s.computeMs = o.value(QStringLiteral("compute_ms")).toDouble();
  s.commMs = o.value(QStringLiteral("comm_ms")).toDouble();
  if (s.hardware.isEmpty() || s.out.isEmpty() || !(s.stepMs > 0) || !std::isfinite(s.stepMs))
    return fail(QStringLiteral("the simulator's output has no hardware, out or positive step_ms"));
  return s;
}

QStringList WhatIfChanges::setArguments(const nlohmann::json& base) const {
  auto current = [&](const char* section, const char* key, int64_t dflt) -> int64_t {
    const auto s = base.find(section);
    if (s == base.end() || !s->is_object()) return dflt;
    const auto v = s->find(key);
    return v != s->end() && v->is_number_integer() ? v->get<int64_t>() : dflt;
  };
  QStringList out;
  auto add = [&](int v, const char* section, const char* key, int64_t dflt) {
    if (v < 0 || v == current(section, key, dflt)) return;
    out << QStringLiteral("--set") << QStringLiteral("%1.%2=%3").arg(QLatin1String(section), QLatin1String(key)).arg(v);
  };
  // RunConfig's defaults: sp 1, ring 1, head chunks 1, ZeRO stage 0.
  add(spSize, "parallel", "sp_size", 1);
  add(ringSize, "parallel", "ring_size", 1);
  add(headChunks, "parallel", "head_chunks", 1);
  add(zeroStage, "train", "zero_stage", 0);
  return out;
}

QString lastErrorLine(const QString& stderrText, int exitCode) {
  const QStringList lines = stderrText.trimmed().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  for (auto it = lines.crbegin(); it != lines.crend(); ++it) {
    const QString l = it->trimmed();
    if (!l.isEmpty()) return l;
  }
  return QStringLiteral("ulysses-run exited with code %1 and said nothing").arg(exitCode);
}

WhatIfModel::WhatIfModel(QObject* parent) : QAbstractTableModel(parent) {}

void WhatIfModel::setEstimate(const std::optional<cost::CostEstimate>& e) {
  est_ = e;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}
void WhatIfModel::setPlan(const std::optional<PlanFigures>& p) {
  plan_ = p;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}
void WhatIfModel::setSimulated(const std::optional<SimFigures>& s) {
  sim_ = s;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}
void WhatIfModel::setMeasured(const std::optional<MeasuredStats>& m) {
  meas_ = m;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

int WhatIfModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : RowCount; }
int WhatIfModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

double WhatIfModel::value(int row, int column) const {
  const double none = std::numeric_limits<double>::quiet_NaN();
  switch (column) {
    case Estimate:
      if (!est_) return none;
      if (row == StepTime) return est_->step_s;
      if (row == TokensPerS) return est_->tokens_per_s;
      if (row == Compute) return est_->compute_s;
      if (row == Collectives) return est_->comm_s;
      if (row == PeakMemory) return double(est_->total_bytes());
      return none;
    case Plan:
      return plan_ && row == PeakMemory ? double(plan_->peakBytes) : none;
    case Simulated:
      if (!sim_) return none;
      if (row == StepTime) return sim_->stepMs / 1e3;
      if (row == TokensPerS) return sim_->tokensPerS;
      if (row == Compute) return sim_->computeMs / 1e3;
      if (row == Collectives) return sim_->commMs / 1e3;
      return none;
    case Measured:
      if (!meas_ || meas_->steps <= 0) return none;
      if (row == StepTime) return meas_->medianStepMs / 1e3;
      if (row == TokensPerS) return meas_->tokensPerS;
      return none;
    case Ratio: {
      const double s = value(row, Simulated), m = value(row, Measured);
      return std::isnan(s) || std::isnan(m) || m <= 0 ? none : s / m;
    }
    default:
      return none;
  }
}

double WhatIfModel::stepRatio() const { return value(StepTime, Ratio); }

QVariant WhatIfModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= RowCount || index.column() >= ColumnCount) return {};
  const int row = index.row(), col = index.column();
  if (role == Qt::TextAlignmentRole)
    return col == Quantity ? QVariant(Qt::AlignLeft | Qt::AlignVCenter) : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && col == Simulated && sim_)
    return QStringLiteral("Simulated on %1 (%2 ranks): %3").arg(sim_->hardware).arg(sim_->worldSize).arg(sim_->out);
  if (role != Qt::DisplayRole) return {};
  if (col == Quantity) {
    static const char* names[] = {"Step time", "Tokens / s", "Compute / rank", "Collectives (before overlap)",
                                  "Peak memory / rank"};
    return QString::fromLatin1(names[row]);
  }
  const double v = value(row, col);
  if (std::isnan(v)) return QString();
  if (col == Ratio) return QStringLiteral("%1x").arg(v, 0, 'f', 2);
  if (row == TokensPerS) return QString::number(v, 'f', 0);
  if (row == PeakMemory) return QString::fromStdString(cost::format_bytes(v));
  return QString::fromStdString(cost::format_seconds(v));
}

QVariant WhatIfModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, o, role);
  static const char* names[] = {"Quantity", "Estimate", "Plan (dry run)", "Simulated", "Measured", "Sim. / meas."};
  return section >= 0 && section < ColumnCount ? QString::fromLatin1(names[section]) : QVariant();
}

}  // namespace ulysses::ui
