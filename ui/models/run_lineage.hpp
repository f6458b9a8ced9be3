// Resume lineage: which run a resumed run continued, and the whole history of metrics across
// the resumes. A run resumed with train.resume_from (docs/CONTRACTS.md, "Training-state
// checkpoints") names a checkpoint folder, SAVE_TO or SAVE_TO/step-N, in its RUN/config.json
// (made absolute by ulysses-run); the run it resumed is the one beside it (same runs folder)
// whose config's train.save_to is that folder (the step folder's parent), among those that
// started before it the latest. Qt Core only.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

#include "run_data.hpp"

namespace ulysses::ui {

// The step a resumed run started at: its first METRIC step, else N of a resume_from named
// "step-N"; -1 when unknown.
int resumeStepOf(const RunSummary& resumed, const QVector<MetricPoint>& resumedPoints);

// Index into `runs` of the run `runs[i]` resumed, or -1 (not resumed, or no run of `runs` saved
// to its resume_from folder before it started).
int resumedFromIndex(const QVector<RunSummary>& runs, int i);

// The run folder `runDir` resumed, looked for among the runs of its parent folder; "" when it
// was not resumed or that run is not there (*why says which).
QString resumedFromRun(const QString& runDir, QString* why = nullptr);

// A run's whole history: the earliest run's METRIC points before the first resume step, then
// each later run's before the next resume, then this run's (every point in step order, at
// most 16 runs back). resumeSteps: where each resume happened (ascending); runs: the folders,
// earliest first, this one last.
struct RunLineage {
  QVector<MetricPoint> points;
  QVector<int> resumeSteps;
  QStringList runs;
};
RunLineage runLineage(const QString& runDir);

}  // namespace ulysses::ui
