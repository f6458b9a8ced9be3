// Plain data the studio reads from a run directory (docs/CONTRACTS.md): METRIC lines,
// RUN/run.json, RUN/config.json, "[rank r] " log lines, in Qt types. The files are parsed
// by the one Qt-free reader, engine/launch/run_dir_reader (also used by ulysses-run), and
// the medians are the profiler's definition (step_stats.hpp), as in `ulysses-trace summary`.
#pragma once

#include <QJsonObject>
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>

#include "run_dir_reader.hpp"

namespace ulysses::ui {

// What the studio reads from a run directory is bounded (the limits of the one reader,
// engine/launch/run_dir_reader.hpp): claims beyond these are refused (shown as a problem),
// files beyond these are not read.
inline constexpr int kMaxRanks = static_cast<int>(launch::kMaxRunRanks);
inline constexpr qint64 kMaxRunJsonBytes = launch::kMaxRunJsonBytes;
inline constexpr qint64 kMaxMetricsBytes = launch::kMaxMetricsBytes;
inline constexpr int kMaxMetricPoints = static_cast<int>(launch::kMaxMetricPoints);

// One METRIC object (rank 0, one per finished step): the launcher's own type, read by the
// launcher's reader (run_dir_reader.hpp); the studio keeps no copy of it.
using MetricPoint = launch::MetricPoint;

// Parses `{json}` or `METRIC {json}`; false (and *point untouched) for anything else.
bool parseMetricLine(const QByteArray& line, MetricPoint* point);
// Every METRIC object of RUN/metrics.jsonl, skipping lines that do not parse.
QVector<MetricPoint> readMetricsFile(const QString& path);

// Splits "[rank 3] text" into 3 and "text"; false when the line has no rank prefix.
bool parseRankLine(const QString& line, int* rank, QString* text);

// What RUN/run.json (written by ulysses-run) says, plus the config name.
struct RunSummary {
  QString dir;         // absolute path of the run directory
  QString name;        // directory name
  QString configName;  // "name" of the config, else the directory name without its time stamp
  QString status;      // running | finished | failed | stopped | unknown
  QString startedAt, endedAt;
  double durationS = -1;
  bool hasFinalLoss = false;
  double finalLoss = 0;
  int stepsDone = -1;
  int steps = -1;  // train.steps from RUN/config.json
  int worldSize = 0;
  int exitCode = 0;
  int failedRank = -1;
  QString message;
  QJsonObject config;  // RUN/config.json
  bool hasTrace = false;
  bool stale = false;    // run.json said "running" but its ulysses-run is gone (status is then "failed")
  QStringList problems;  // claims that were refused (e.g. an impossible world_size)
};

// True when `dir` looks like a run directory (run.json, config.json or metrics.jsonl).
bool isRunDir(const QString& dir);
// Reads a run directory; fields missing from run.json stay at their defaults. When
// run.json has no final loss but metrics.jsonl has steps, the last METRIC loss is used.
RunSummary loadRunSummary(const QString& dir);
// Every run directory directly under `runsDir`, newest first.
QVector<RunSummary> scanRunsDir(const QString& runsDir);

// Figures measured in a run, for comparison with the cost model.
struct MeasuredStats {
  int steps = 0;
  double medianStepMs = 0;  // true median without step 0 (warm-up) when other steps exist (step_stats.hpp)
  qint64 maxMemBytes = 0;
  double tokensPerS = 0;  // median, same definition
  double finalLoss = 0;
  double elapsedS = 0;
};
MeasuredStats measure(const QVector<MetricPoint>& points);

// Directory-name friendly form of a config name: "tiny CPU demo" -> "tiny-CPU-demo"; never
// starting with '.' (a hidden folder the runs list would not show) and at most 80 characters
// (a longer name can fail at launch with "File name too long").
QString slug(const QString& name);
// Writes `bytes` to `path` whole or not at all (QSaveFile: a temp file renamed over `path`);
// false with the reason in *error ("cannot write X: No space left on device").
bool writeFileWhole(const QString& path, const QByteArray& bytes, QString* error);
// Where a stopped or failed run can be resumed from: its config's train.save_to, when that
// folder holds a complete training-state checkpoint (engine/config/checkpoint_layout.hpp).
// Empty, with the reason in *why, when the run finished, saved no training state, or every
// checkpoint is half-written.
QString resumeFolderOf(const QString& runDir, QString* why = nullptr);

}  // namespace ulysses::ui

Q_DECLARE_METATYPE(ulysses::ui::MetricPoint)
