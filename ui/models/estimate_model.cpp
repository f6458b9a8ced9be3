// Estimates vs measured figures as a table model.
#include "estimate_model.hpp"

#include <QJsonDocument>
#include <QJsonObject>
#include <cmath>
#include <limits>

namespace ulysses::ui {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
QString bytes(double b) { return QString::fromStdString(cost::format_bytes(b)); }
QString secs(double s) { return QString::fromStdString(cost::format_seconds(s)); }
}  // namespace

std::optional<PlanFigures> PlanFigures::fromJson(const QByteArray& text, QString* error) {
  QJsonParseError pe{};
  const auto doc = QJsonDocument::fromJson(text.trimmed(), &pe);
  if (!doc.isObject()) {
    if (error) *error = QStringLiteral("plan output is not a JSON object: %1").arg(pe.errorString());
    return std::nullopt;
  }
  const auto o = doc.object();
  for (const char* k : {"peak_bytes", "activation_bytes", "static_bytes"})
    if (!o.value(QLatin1String(k)).isDouble()) {
      if (error) *error = QStringLiteral("plan output has no %1").arg(QLatin1String(k));
      return std::nullopt;
    }
  auto i64 = [&](const char* k, qint64 dflt) {
    return o.contains(QLatin1String(k)) ? qint64(o.value(QLatin1String(k)).toDouble()) : dflt;
  };
  PlanFigures p;
  p.device = o.value(QStringLiteral("device")).toString();
  p.dtype = o.value(QStringLiteral("dtype")).toString();
  p.attention = o.value(QStringLiteral("attention")).toString();
  p.seqLength = i64("seq_length", 0);
  p.staticBytes = i64("static_bytes", 0);
  p.activationBytes = i64("activation_bytes", 0);
  p.lossPeakBytes = i64("loss_peak_bytes", -1);
  p.transientBytes = i64("transient_bytes", 0);
  p.peakBytes = i64("peak_bytes", 0);
  return p;
}

EstimateModel::EstimateModel(QObject* parent) : QAbstractTableModel(parent) {}

void EstimateModel::setPlan(const PlanFigures& p) {
  plan_ = p;
  planWhy_.clear();
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

void EstimateModel::clearPlan(const QString& why) {
  plan_.reset();
  planWhy_ = why;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

void EstimateModel::setEstimate(const cost::CostEstimate& e, int steps) {
  est_ = e;
  steps_ = steps;
  why_.clear();
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

void EstimateModel::clearEstimate(const QString& why) {
  est_.reset();
  why_ = why;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

void EstimateModel::setMeasured(const MeasuredStats& m, bool residentMemory) {
  meas_ = m;
  resident_ = residentMemory;
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

void EstimateModel::clearMeasured() {
  meas_.reset();
  emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
}

double EstimateModel::predicted(int row) const {
  if (!est_) return kNaN;
  const auto& e = *est_;
  switch (row) {
    case TotalMem:
      return double(e.total_bytes());
    case StepTime:
      return e.step_s;
    case TokensPerS:
      return e.tokens_per_s;
    case RunTime:
      return e.step_s * steps_;
    default:
      return kNaN;
  }
}

double EstimateModel::measured(int row) const {
  if (!meas_ || meas_->steps == 0) return kNaN;
  switch (row) {
    case TotalMem:
      return meas_->maxMemBytes > 0 ? double(meas_->maxMemBytes) : kNaN;
    case StepTime:
      return meas_->medianStepMs / 1e3;
    case TokensPerS:
      return meas_->tokensPerS;
    case RunTime:
      return meas_->elapsedS;
    default:
      return kNaN;
  }
}

int EstimateModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : RowCount; }
int EstimateModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant EstimateModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= RowCount || index.column() >= ColumnCount) return {};
  const int row = index.row();
  if (role == Qt::TextAlignmentRole && index.column() != Quantity)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && index.column() == Quantity) {
    switch (row) {
      case StateMem:
        return QStringLiteral("weights + gradients (+ fp32 master for bfloat16) + AdamW m and v: 16 B per parameter");
      case ActMem: {
        QString t = QStringLiteral(
            "per layer and local token 8d + 4d_kv + 3f elements, plus logits; math attention adds the N x N scores");
        if (est_)  // the attention kind follows the device the workers will decide on
          t += est_->flash_attention ? QStringLiteral(" (here: flash attention on %1, no scores kept)")
                                           .arg(QString::fromStdString(est_->device))
                                     : QStringLiteral(" (here: math attention on %1, scores included)")
                                           .arg(QString::fromStdString(est_->device));
        return t;
      }
      case TotalMem:
        return QStringLiteral(
            "Estimate: static + activations. Plan: peak of a meta-device dry run of the real step (activations, "
            "transients, loss/logits)");
      case A2ALayer:
        return QStringLiteral("elements sent per rank: b*N*(2d + 2d_kv)*(P-1)/P^2 (q, k, v seq->head and o head->seq)");
      case Flops:
        return QStringLiteral("6 x matmul params x tokens + 12 x L x N^2 x d (halved for causal)");
      default:
        return {};
    }
  }
  if (row == TotalMem && resident_ && meas_ && role == Qt::ToolTipRole && index.column() >= Measured)
    return QStringLiteral(
        "Peak resident memory of the rank's process (CPU run): the whole process (libtorch, allocator, buffers), "
        "not the tensor bytes the estimate and the plan count, so no ratio is given");
  if (role != Qt::DisplayRole) return {};
  if (index.column() == Quantity) {
    static const char* names[] = {"Parameters",
                                  "Weights, grads, AdamW / rank",
                                  "Activations / rank",
                                  "Total memory / rank",
                                  "All-to-all / layer (fwd)",
                                  "All-to-all / step",
                                  "Grad all-reduce / step",
                                  "FLOPs / step",
                                  "Step time",
                                  "Tokens / s",
                                  "Run time"};
    return QString::fromLatin1(names[row]);
  }
  if (index.column() == Plan) {
    if (!plan_) return row == 0 ? planWhy_ : QString();
    switch (row) {
      case StateMem:
        return bytes(double(plan_->staticBytes));
      case ActMem:
        return bytes(double(plan_->activationBytes));
      case TotalMem:
        return bytes(double(plan_->peakBytes)) + QStringLiteral(" peak");
      default:
        return QString();
    }
  }
  if (index.column() == Estimate) {
    if (!est_) return row == 0 ? why_ : QString();
    const auto& e = *est_;
    switch (row) {
      case Params:
        return QStringLiteral("%1 M").arg(double(e.params) / 1e6, 0, 'f', 2);
      case StateMem:
        return bytes(double(e.param_bytes + e.grad_bytes + e.master_bytes + e.optimizer_bytes));
      case ActMem:
        return bytes(double(e.activation_bytes));
      case TotalMem:
        return bytes(double(e.total_bytes()));
      case A2ALayer:
        return bytes(double(e.a2a_bytes_per_layer_fwd));
      case A2AStep:
        return bytes(double(e.a2a_bytes_per_step));
      case AllReduce:
        return bytes(double(e.allreduce_bytes_per_step));
      case Flops:
        return QString::fromStdString(cost::format_flops(e.flops_per_step()));
      case StepTime:
        return secs(e.step_s);
      case TokensPerS:
        return QString::number(e.tokens_per_s, 'f', 0);
      case RunTime:
        return secs(e.step_s * steps_);
      default:
        return {};
    }
  }
  const double m = measured(row);
  if (std::isnan(m)) return QString();
  if (index.column() == Measured) {
    switch (row) {
      case TotalMem:
        return resident_ ? bytes(m) + QStringLiteral(" RSS") : bytes(m);
      case StepTime:
      case RunTime:
        return secs(m);
      case TokensPerS:
        return QString::number(m, 'f', 0);
      default:
        return {};
    }
  }
  const double p = predicted(row);
  if (std::isnan(p) || p <= 0) return QString();
  if (row == TotalMem && resident_) return QStringLiteral("(RSS)");
  return QStringLiteral("%1x").arg(m / p, 0, 'f', 2);
}

QVariant EstimateModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, o, role);
  static const char* names[] = {"Quantity", "Estimate", "Plan (dry run)", "Measured", "Measured / est."};
  return section >= 0 && section < ColumnCount ? QString::fromLatin1(names[section]) : QVariant();
}

}  // namespace ulysses::ui
