// Resume lineage of a run folder (see run_lineage.hpp).
#include "run_lineage.hpp"

#include <QDir>
#include <QFileInfo>
#include <QJsonObject>
#include <QRegularExpression>
#include <algorithm>

#include "ulysses/common/run_layout.hpp"

namespace ulysses::ui {

namespace {

QString lineage_train_path(const RunSummary& s, const char* key) {
  const QString p = s.config.value(QStringLiteral("train")).toObject().value(QLatin1String(key)).toString();
  return p.isEmpty() ? QString() : QDir::cleanPath(p);
}

// The folder a resume_from names as a save_to: SAVE_TO/step-N -> SAVE_TO.
QString lineage_save_folder(const QString& resumeFrom, int* step = nullptr) {
  static const QRegularExpression stepDir(QStringLiteral("^step-(\\d+)$"));
  const QFileInfo fi(resumeFrom);
  const auto m = stepDir.match(fi.fileName());
  if (step) *step = m.hasMatch() ? m.captured(1).toInt() : -1;
  return m.hasMatch() ? QDir::cleanPath(fi.path()) : resumeFrom;
}

}  // namespace

int resumeStepOf(const RunSummary& resumed, const QVector<MetricPoint>& resumedPoints) {
  if (!resumedPoints.isEmpty()) return resumedPoints.front().step;
  int step = -1;
  lineage_save_folder(lineage_train_path(resumed, "resume_from"), &step);
  return step;
}

int resumedFromIndex(const QVector<RunSummary>& runs, int i) {
  if (i < 0 || i >= runs.size()) return -1;
  const QString from = lineage_train_path(runs[i], "resume_from");
  if (from.isEmpty()) return -1;
  const QString folder = lineage_save_folder(from);
  int best = -1;
  for (int k = 0; k < runs.size(); ++k) {
    if (k == i || lineage_train_path(runs[k], "save_to") != folder) continue;
    // Started before the resumed run (ISO 8601 times compare as text); the latest such.
    if (!runs[i].startedAt.isEmpty() && !runs[k].startedAt.isEmpty() && runs[k].startedAt >= runs[i].startedAt)
      continue;
    if (best < 0 || runs[k].startedAt > runs[best].startedAt) best = k;
  }
  return best;
}

QString resumedFromRun(const QString& runDir, QString* why) {
  const QString dir = QFileInfo(runDir).absoluteFilePath();
  const QVector<RunSummary> runs = scanRunsDir(QFileInfo(dir).path());
  int self = -1;
  for (int i = 0; i < runs.size(); ++i)
    if (QFileInfo(runs[i].dir).absoluteFilePath() == dir) self = i;
  if (self < 0) {
    if (why) *why = QStringLiteral("%1 is not a run folder").arg(dir);
    return {};
  }
  if (lineage_train_path(runs[self], "resume_from").isEmpty()) {
    if (why) *why = QStringLiteral("not resumed (no train.resume_from)");
    return {};
  }
  const int k = resumedFromIndex(runs, self);
  if (k < 0) {
    if (why)
      *why = QStringLiteral("resumed from %1, which no run beside it saved to")
                 .arg(lineage_train_path(runs[self], "resume_from"));
    return {};
  }
  return runs[k].dir;
}

RunLineage runLineage(const QString& runDir) {
  RunLineage out;
  const QString dir = QFileInfo(runDir).absoluteFilePath();
  const QVector<RunSummary> runs = scanRunsDir(QFileInfo(dir).path());
  int cur = -1;
  for (int i = 0; i < runs.size(); ++i)
    if (QFileInfo(runs[i].dir).absoluteFilePath() == dir) cur = i;
  auto metrics = [](const QString& d) {
    return readMetricsFile(QDir(d).filePath(QString::fromLatin1(run_layout::kMetrics)));
  };
  out.points = metrics(dir);
  out.runs << dir;
  if (cur < 0) return out;
  // Walk back: each earlier run contributes its steps before the resume that followed it.
  QVector<int> seen{cur};
  RunSummary later = runs[cur];
  QVector<MetricPoint> laterPoints = out.points;
  for (int depth = 0; depth < 16; ++depth) {
    const int prev = resumedFromIndex(runs, cur);
    if (prev < 0 || seen.contains(prev)) break;
    const int at = resumeStepOf(later, laterPoints);
    const QVector<MetricPoint> prevPoints = metrics(runs[prev].dir);
    QVector<MetricPoint> merged;
    for (const auto& p : prevPoints)
      if (at < 0 || p.step < at) merged.push_back(p);
    merged += out.points;
    out.points = merged;
    if (at >= 0) out.resumeSteps.prepend(at);
    out.runs.prepend(runs[prev].dir);
    seen.push_back(prev);
    cur = prev;
    later = runs[prev];
    laterPoints = prevPoints;
  }
  return out;
}

}  // namespace ulysses::ui
