// Background trace loading through the profiler's loader.
#include "trace/trace_loader.hpp"

#include <QElapsedTimer>
#include <QFileInfo>
#include <exception>
#include <optional>
#include <string>

#include "models/native_path.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_open.hpp"
#include "ulysses/profiler/trace_path.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace ulysses::ui {

LoadedTrace prepare_trace(std::shared_ptr<const prof::TraceModel> model,
                          const std::function<void(int, const QString&)>& progress,
                          std::shared_ptr<const prof::Summary> summary) {
  LoadedTrace out;
  out.model = model;
  if (!model) {
    out.error = QObject::tr("No trace.");
    return out;
  }
  out.path = qs_from_native(model->source);
  if (const std::string why = prof::empty_trace_reason(*model, static_cast<int64_t>(model->ranges.size()));
      !why.empty()) {
    out.error = QString::fromStdString(why);
    out.error[0] = out.error[0].toUpper();
    return out;
  }
  QElapsedTimer t;
  t.start();
  out.index = TimelineIndex::build(model, [&](int pct) {
    if (progress) progress(40 + pct * 40 / 100, QObject::tr("indexing ranges"));
  });
  out.index_s = t.nsecsElapsed() / 1e9;
  if (summary) {
    out.summary = std::move(summary);
  } else {
    t.restart();
    if (progress) progress(80, QObject::tr("computing overlap and breakdown"));
    try {
      out.summary = std::make_shared<const prof::Summary>(prof::analyze(*model));
    } catch (const std::exception& e) {
      out.error = QObject::tr("Analysis of %1 failed: %2").arg(out.path, QString::fromUtf8(e.what()));
      return out;
    }
    out.analyze_s = t.nsecsElapsed() / 1e9;
  }
  if (progress) progress(100, QObject::tr("done"));
  return out;
}

LoadedTrace load_and_prepare(const QString& path, const std::function<void(int, const QString&)>& progress,
                             const std::function<void(const LoadedTrace&)>& early) {
  LoadedTrace out;
  out.path = path;
  if (prof::classify_trace_path(native_path(path)).kind == prof::TracePathKind::Missing) {
    out.error = QObject::tr("%1 does not exist.").arg(display_path(path));
    return out;
  }
  if (progress) progress(0, QObject::tr("reading %1").arg(QFileInfo(path).fileName()));
  QElapsedTimer t;
  t.start();
  const std::string p = native_path(path);  // byte for byte, names that are not UTF-8 included
  // The profiler's staged open (trace_open.hpp), as `ulysses-trace prepare` does: the overview,
  // then the summary from their caches, then the ranges; rank files read from SQLite get a
  // rank-file cache for the next open (not while the run is still being written).
  prof::TraceOpen open(p);
  std::shared_ptr<prof::TraceModel> model;
  std::shared_ptr<const prof::Summary> summary;
  double summary_s = 0, analyze_s = 0;
  bool from_cache = false;  // the summary came from its cache before the ranges were read
  try {
    // The overview first: it is small (the summary of a big trace holds every collective
    // instance), so the timeline's first frame does not wait for the report.
    std::optional<prof::TraceOverview> ov = open.overview();
    if (early && ov) {
      LoadedTrace e;
      e.path = path;
      e.overview_full_ranges = ov->full_ranges;
      e.overview = TimelineIndex::build(std::make_shared<const prof::TraceModel>(std::move(ov->model)), {},
                                        std::move(ov->counts));
      e.overview_s = t.nsecsElapsed() / 1e9;
      ov.reset();
      early(e);
    }
    if (std::optional<prof::CachedSummary> hit = open.summary()) {
      summary = std::make_shared<const prof::Summary>(std::move(hit->summary));
      summary_s = t.nsecsElapsed() / 1e9;
      if (early) {
        LoadedTrace e;
        e.path = path;
        e.model = std::make_shared<const prof::TraceModel>(std::move(hit->model));
        e.summary = summary;
        e.summary_from_cache = true;
        e.summary_s = summary_s;
        early(e);
      }
      if (progress) progress(0, QObject::tr("reading the ranges of %1").arg(QFileInfo(path).fileName()));
    }
    from_cache = summary != nullptr;
    prof::TraceOpen::Ranges ranges = open.ranges();  // computes the summary when it was not cached
    model = std::make_shared<prof::TraceModel>(std::move(ranges.model));
    if (!from_cache) {
      summary = std::make_shared<const prof::Summary>(std::move(ranges.summary.value()));
      analyze_s = ranges.analyze_s;
      summary_s = t.nsecsElapsed() / 1e9;
    }
  } catch (const prof::TraceError& e) {
    out.error = QString::fromUtf8(e.what());
    return out;
  } catch (const std::exception& e) {
    out.error = QObject::tr("Could not read or analyse %1: %2").arg(path, QString::fromUtf8(e.what()));
    return out;
  }
  const double load_s = t.nsecsElapsed() / 1e9 - analyze_s;
  if (model->source.empty()) model->source = p;
  if (progress) progress(40, QObject::tr("indexing ranges"));
  LoadedTrace r = prepare_trace(std::move(model), progress, std::move(summary));
  r.path = path;
  r.load_s = load_s;
  r.analyze_s = analyze_s;
  r.summary_from_cache = from_cache;
  r.summary_s = summary_s;
  r.rank_files_from_cache = open.file_stats().from_file_cache;
  r.rank_file_caches_written = open.file_stats().file_caches_written;
  if (r.error.isEmpty() &&
      open.overview_writable()) {  // for the next open's first paint (not for a run still being written)
    QElapsedTimer b;
    b.start();
    r.overview_written = open.write_overview(*r.model);
    r.overview_build_s = b.nsecsElapsed() / 1e9;
  }
  return r;
}

TraceLoader::TraceLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<ulysses::ui::LoadedTrace>("ulysses::ui::LoadedTrace");
}

TraceLoader::~TraceLoader() { wait(); }

bool TraceLoader::busy() const {
  for (const auto& t : threads_)
    if (t && t->isRunning()) return true;
  return false;
}

void TraceLoader::wait() {
  for (const auto& t : threads_)
    if (t) t->wait();
  threads_.removeAll(nullptr);
}

void TraceLoader::start(const QString& path) {
  const int gen = ++generation_;
  QPointer<TraceLoader> self(this);
  QThread* th = QThread::create([self, gen, path]() {
    auto report = [&](int pct, const QString& what) {
      QMetaObject::invokeMethod(
          self.data(),
          [self, gen, pct, what]() {
            if (self && gen == self->generation_) emit self->progress(pct, what);
          },
          Qt::QueuedConnection);
    };
    auto early = [&](const LoadedTrace& e) {
      QMetaObject::invokeMethod(
          self.data(),
          [self, gen, e]() {
            if (self && gen == self->generation_) emit self->earlyReady(e);
          },
          Qt::QueuedConnection);
    };
    LoadedTrace r = load_and_prepare(path, report, early);
    QMetaObject::invokeMethod(
        self.data(),
        [self, gen, r]() {
          if (self && gen == self->generation_) emit self->finished(r);
        },
        Qt::QueuedConnection);
  });
  connect(th, &QThread::finished, th, &QObject::deleteLater);
  threads_.removeAll(nullptr);
  threads_.push_back(th);
  th->start(QThread::LowPriority);
}

}  // namespace ulysses::ui
