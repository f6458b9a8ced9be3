// Side-by-side comparison of two runs.
#include "axis_ticks.hpp"
#include "compare_model.hpp"

#include <QBrush>
#include <QColor>
#include <QDir>
#include <QFont>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonValue>
#include <QMap>
#include <QSet>
#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>

#include "cost_model.hpp"
#include "run_config.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/common/run_layout.hpp"

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
    default:  // arrays (objects are flattened before)
      return QString::fromUtf8(QJsonDocument(v.isArray() ? v.toArray() : QJsonArray{v}).toJson(QJsonDocument::Compact));
  }
}

// Leaves of a config value under `prefix`: {"faults.slow_rank": 1, "faults.delay_ms": 50}.
void flatten(const QJsonValue& v, const QString& prefix, QMap<QString, QJsonValue>* out) {
  if (v.isUndefined() || v.isNull()) return;
  if (!v.isObject()) {
    out->insert(prefix, v);
    return;
  }
  const QJsonObject o = v.toObject();
  for (auto it = o.begin(); it != o.end(); ++it) flatten(it.value(), prefix + QLatin1Char('.') + it.key(), out);
}

// Whether a field holds a rank's number (faults.slow_rank): an identity, not a quantity, so it
// has no B - A or B / A ("ranks", a count, has both).
bool names_a_rank(const QString& field) { return field.endsWith(QLatin1String("_rank")); }

// B - A and B / A of a row whose sides are both numbers (B / A when A != 0).
void fill_diff(CompareModel::Row& r, const std::function<QString(double)>& fmt) {
  if (!r.va.isValid() || !r.vb.isValid() || names_a_rank(r.field)) return;
  const double a = r.va.toDouble(), b = r.vb.toDouble(), d = b - a;
  r.diff = fmt ? (d > 0 ? QStringLiteral("+") : QString()) + fmt(d)
               : (d > 0 ? QStringLiteral("+") : QString()) + QString::number(d, 'g', 6);
  if (a != 0) r.ratio = QString::number(b / a, 'f', 3);
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
  QString section = QStringLiteral("run");
  // A row; with both sides numeric (va, vb valid) it also gets B - A and B / A, in the
  // row's unit (`fmt` writes a value and a difference).
  auto add = [&](const QString& field, const QString& x, const QString& y, QVariant va = {}, QVariant vb = {},
                 const std::function<QString(double)>& fmt = {}) {
    Row r;
    r.field = field;
    r.a = x;
    r.b = y;
    r.differs = x != y;
    r.section = section;
    r.va = va;
    r.vb = vb;
    fill_diff(r, fmt);
    rows_.push_back(r);
  };
  const auto ma = measure(readMetricsFile(QDir(a.dir).filePath(QString::fromLatin1(run_layout::kMetrics))));
  const auto mb = measure(readMetricsFile(QDir(b.dir).filePath(QString::fromLatin1(run_layout::kMetrics))));
  auto secs = [](double s) { return s >= 0 ? QString::fromStdString(cost::format_seconds(s)) : QString(); };
  auto num = [](bool ok, double v) { return ok ? QVariant(v) : QVariant(); };
  auto ms = [](double v) { return QStringLiteral("%1 ms").arg(v, 0, 'f', 1); };
  auto bytes = [](double v) {
    return (v < 0 ? QStringLiteral("-") : QString()) + QString::fromStdString(cost::format_bytes(std::fabs(v)));
  };
  auto secsd = [](double v) {
    return (v < 0 ? QStringLiteral("-") : QString()) + QString::fromStdString(cost::format_seconds(std::fabs(v)));
  };
  add(QStringLiteral("status"), a.status, b.status);
  add(QStringLiteral("config"), a.configName, b.configName);
  add(QStringLiteral("duration"), secs(a.durationS), secs(b.durationS), num(a.durationS >= 0, a.durationS),
      num(b.durationS >= 0, b.durationS), secsd);
  add(QStringLiteral("steps done"), QString::number(a.stepsDone), QString::number(b.stepsDone),
      num(a.stepsDone >= 0, a.stepsDone), num(b.stepsDone >= 0, b.stepsDone));
  add(QStringLiteral("final loss"), a.hasFinalLoss ? format_metric(a.finalLoss) : QString(),
      b.hasFinalLoss ? format_metric(b.finalLoss) : QString(), num(a.hasFinalLoss, a.finalLoss),
      num(b.hasFinalLoss, b.finalLoss), [](double v) { return format_metric(v); });
  add(QStringLiteral("median step"), ma.steps ? ms(ma.medianStepMs) : QString(),
      mb.steps ? ms(mb.medianStepMs) : QString(), num(ma.steps, ma.medianStepMs), num(mb.steps, mb.medianStepMs), ms);
  add(QStringLiteral("tokens/s"), ma.steps ? QString::number(ma.tokensPerS, 'f', 0) : QString(),
      mb.steps ? QString::number(mb.tokensPerS, 'f', 0) : QString(), num(ma.steps, ma.tokensPerS),
      num(mb.steps, mb.tokensPerS), [](double v) { return QString::number(v, 'f', 0); });
  add(QStringLiteral("max memory / rank"), ma.steps ? bytes(double(ma.maxMemBytes)) : QString(),
      mb.steps ? bytes(double(mb.maxMemBytes)) : QString(), num(ma.steps, double(ma.maxMemBytes)),
      num(mb.steps, double(mb.maxMemBytes)), bytes);
  add(QStringLiteral("ranks"), QString::number(a.worldSize), QString::number(b.worldSize), num(true, a.worldSize),
      num(true, b.worldSize));
  // Every config key of either run, section by section: the sections a run config has
  // (kRunConfigSections, `faults` included), then any other section either file holds; nested
  // objects flattened ("faults.slow_rank"), lists as JSON.
  section = QStringLiteral("config");
  QStringList sections;
  for (const char* sec : kRunConfigSections) sections << QString::fromLatin1(sec);
  for (const auto& cfg : {a.config, b.config})
    for (const auto& k : cfg.keys())
      if (!sections.contains(k)) sections << k;
  for (const auto& sec : sections) {
    QMap<QString, QJsonValue> fa, fb;
    flatten(a.config.value(sec), sec, &fa);
    flatten(b.config.value(sec), sec, &fb);
    QStringList keys = fa.keys();
    for (const auto& k : fb.keys())
      if (!keys.contains(k)) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) {
      const QJsonValue x = fa.value(k), y = fb.value(k);
      add(k, jsonText(x), jsonText(y), x.isDouble() ? QVariant(x.toDouble()) : QVariant(),
          y.isDouble() ? QVariant(y.toDouble()) : QVariant());
    }
  }
  endResetModel();
}

void CompareModel::setTraceComparison(const prof::Comparison& c) {
  beginResetModel();
  rows_.erase(std::remove_if(rows_.begin(), rows_.end(),
                             [](const Row& r) {
                               return r.section != QLatin1String("run") && r.section != QLatin1String("config");
                             }),
              rows_.end());
  for (const auto& cr : c.rows) {
    Row r;
    r.section = QString::fromUtf8(prof::compare_section_name(cr.section));
    const QString label = QString::fromStdString(prof::compare_row_label(cr));
    r.field = cr.section == prof::CompareSection::Headline ? QStringLiteral("trace ") + label
              : cr.section == prof::CompareSection::Phase  ? QStringLiteral("phase ") + label
                                                           : label;
    if (cr.has_a) {
      r.a = QString::fromStdString(prof::compare_value_text(cr, cr.a));
      r.va = cr.a;
    }
    if (cr.has_b) {
      r.b = QString::fromStdString(prof::compare_value_text(cr, cr.b));
      r.vb = cr.b;
    }
    if (cr.has_a && cr.has_b) r.diff = QString::fromStdString(prof::compare_value_text(cr, cr.diff));
    if (cr.has_ratio) r.ratio = QString::number(cr.ratio, 'f', 3);
    r.differs = cr.flagged;
    rows_.push_back(r);
  }
  endResetModel();
}

int CompareModel::traceRows() const {
  return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const Row& r) {
    return r.section != QLatin1String("run") && r.section != QLatin1String("config");
  }));
}

std::optional<prof::Comparison> CompareModel::compareTraces(const QString& dirA, const QString& dirB, QString* error,
                                                            double threshold) {
  prof::LoadOptions lo;
  lo.head_lanes = false;  // not needed for the analysis
  prof::TraceModel m[2];
  const QString dirs[2] = {dirA, dirB};
  for (int i = 0; i < 2; ++i) {
    try {
      m[i] = prof::load_trace(dirs[i].toStdString(), lo);
    } catch (const std::exception& e) {
      if (error)
        *error = QStringLiteral("trace of run %1: %2")
                     .arg(i == 0 ? QStringLiteral("A") : QStringLiteral("B"), QString::fromUtf8(e.what()));
      return std::nullopt;
    }
  }
  try {
    prof::CompareOptions o;
    o.threshold = threshold;
    return prof::compare_summaries(m[0], prof::analyze(m[0]), m[1], prof::analyze(m[1]), o);
  } catch (const std::exception& e) {
    if (error) *error = QStringLiteral("trace comparison failed: %1").arg(QString::fromUtf8(e.what()));
    return std::nullopt;
  }
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
  if (role == SectionRole) return r.section;
  if (role == ValueRole) return index.column() == RunA ? r.va : index.column() == RunB ? r.vb : QVariant();
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
    case Diff:
      return r.diff;
    case Ratio:
      return r.ratio;
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
    case Diff:
      return QStringLiteral("B − A");
    case Ratio:
      return QStringLiteral("B / A");
    default:
      return {};
  }
}

}  // namespace ulysses::ui
