// Loads a trace off the GUI thread: prof::load_trace (run dir, rank file or nsys export),
// then the timeline index and the analysis summary, reporting progress. Results come back
// on the thread of `receiver` by callback; a newer load makes older results stale (dropped).
// The summary goes through the profiler's summary cache (summary_cache.hpp), the same one
// `ulysses-trace summary` reads and writes: when a valid record is beside the trace, the
// summary is ready (earlyReady) before the ranges are read, and is not computed again.
// Likewise the trace overview (trace_overview.hpp: the lanes at level of detail, for the
// timeline's first paint) is read from its cache beside the trace and comes with earlyReady,
// indexed; the first open builds it from the loaded model and writes it for the next one.
#pragma once

#include <QObject>
#include <QList>
#include <QPointer>
#include <QString>
#include <QThread>
#include <functional>
#include <memory>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_model.hpp"
#include "trace/timeline_index.hpp"

namespace ulysses::ui {

struct LoadedTrace {
  QString path;
  std::shared_ptr<const prof::TraceModel> model;
  std::shared_ptr<const TimelineIndex> index;
  std::shared_ptr<const prof::Summary> summary;
  QString error;  // non-empty: the load failed (message for the user)
  double load_s = 0, index_s = 0, analyze_s = 0;
  bool summary_from_cache = false;  // the summary was read from the summary cache, not computed
  double summary_s = 0;             // seconds from the start of the load until the summary was known
  // Early result only: the cached overview, indexed for the timeline (its model holds the
  // overview's reduced ranges, not the trace's), and how many ranges of the trace it stands for.
  std::shared_ptr<const TimelineIndex> overview;
  int64_t overview_full_ranges = 0;
  double overview_s = 0;          // seconds from the start of the load until the overview was indexed
  bool overview_written = false;  // final result: this load built the overview and wrote its cache
  double overview_build_s = 0;    // seconds spent building and writing it
  // Rank files read from their rank-file caches (profiler/rank_file_cache.hpp) instead of
  // SQLite's rows, and caches this load wrote for the next open (final result).
  int rank_files_from_cache = 0, rank_file_caches_written = 0;
};

// Everything a view needs from a model, computed in the calling thread. Throws nothing:
// errors (empty trace) come back in `error`. A `summary` given is used as is (not analyzed).
LoadedTrace prepare_trace(std::shared_ptr<const prof::TraceModel> model,
                          const std::function<void(int, const QString&)>& progress = {},
                          std::shared_ptr<const prof::Summary> summary = nullptr);
// Loads `path` through the profiler (errors -> `error`, never throws) and prepares it. When
// the overview cache holds the overview or the summary cache the summary, `early` gets each
// as it is read, before the ranges are read: first the overview (`overview`: its own index;
// no model), then the summary (`summary`, `model`: the summary cache's shell model without
// ranges; no index). Without a valid overview cache the overview is
// built from the loaded model and written beside the trace (when settled) for the next open.
LoadedTrace load_and_prepare(const QString& path, const std::function<void(int, const QString&)>& progress = {},
                             const std::function<void(const LoadedTrace&)>& early = {});

class TraceLoader : public QObject {
  Q_OBJECT
 public:
  explicit TraceLoader(QObject* parent = nullptr);
  ~TraceLoader() override;  // waits for a running load
  void start(const QString& path);
  bool busy() const;
  void wait();

 signals:
  void progress(int percent, const QString& what);
  // The cached overview, then the cached summary, while the ranges still load (on cache hits).
  void earlyReady(const ulysses::ui::LoadedTrace& early);
  void finished(const ulysses::ui::LoadedTrace& result);

 private:
  QList<QPointer<QThread>> threads_;  // older loads still running are waited for too
  int generation_ = 0;
};

}  // namespace ulysses::ui

Q_DECLARE_METATYPE(ulysses::ui::LoadedTrace)
