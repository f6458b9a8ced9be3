// TraceView: the studio's trace page. Opens a run directory, a rank trace or an Nsight
// Systems SQLite export through the profiler loader (in a background thread, with progress)
// and shows four views over it: timeline, head map, memory and overlap/breakdown report.
// The main window embeds one TraceView; `--screenshot F.png --view NAME` uses setView()
// and renderToImage().
#pragma once

#include <QImage>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <memory>

namespace ulysses::prof {
struct TraceModel;
}

class QLineEdit;
class QMenu;
class QVBoxLayout;

namespace ulysses::ui {

class TraceViewPrivate;
class TimelineWidget;
class ReportView;

class TraceView : public QWidget {
  Q_OBJECT
 public:
  explicit TraceView(QWidget* parent = nullptr);
  ~TraceView() override;

  // Starts loading `path` (run dir, rank*.sqlite or nsys export) in a background thread and
  // returns true when the load was started. false (with *error set) when the path does not
  // exist. A trace that turns out corrupt or empty is reported in the window (message page)
  // and by the loadFailed signal; the application keeps running.
  bool openTrace(const QString& path, QString* error);
  // Same, but blocks until loaded (keeps the event loop running); for screenshots and tests.
  bool openTraceAndWait(const QString& path, QString* error, int timeout_ms = 120000);
  // Shows an already loaded model (tests, generated traces).
  void setModel(std::shared_ptr<const prof::TraceModel> model);
  // Second run shown side by side in the report (differences column). nullptr clears it.
  void setCompareModel(std::shared_ptr<const prof::TraceModel> model);
  bool openCompareTraceAndWait(const QString& path, QString* error, int timeout_ms = 120000);

  // Esc: clears the timeline's selection (range and window, with its statistics) when there is
  // one, else the filter; false when there was neither.
  bool clearSelectionOrFilter();
  QLineEdit* filterEdit() const;

  // Names: timeline, headmap, memory, report. false for an unknown name.
  bool setView(const QString& name);
  QString currentView() const;
  static QStringList viewNames();

  // Message shown when no trace is displayed ("" while a trace is shown).
  QString message() const;
  bool isLoading() const;
  std::shared_ptr<const prof::TraceModel> model() const;
  TimelineWidget* timeline() const;
  // The report view (overlap/breakdown tables, comparison tab) of the shown trace.
  ReportView* reportView() const;
  // While a trace loads whose summary is in the summary cache, the loading page shows its
  // report (this view) under the progress bar; hidden otherwise.
  ReportView* loadingReport() const;
  // While a trace loads whose overview is cached beside it (written when the run finished or
  // by an earlier open), the loading page draws it in this timeline (the whole run at level of
  // detail; zoom and pan work, folds count the trace's ranges) above the report; hidden
  // otherwise. The loaded timeline opens on the time range the overview was moved to.
  TimelineWidget* loadingTimeline() const;
  // Whether the shown trace's summary came from the summary cache (not computed on open).
  bool summaryFromCache() const;

  // Renders the whole page (current view) offscreen at the given size.
  QImage renderToImage(const QSize& size = QSize(1600, 1000));

 signals:
  void loadProgress(int percent, const QString& what);
  // The report of `path` is on the loading page (summary cache hit), the ranges still load.
  void summaryShown(const QString& path);
  // The overview of `path` is drawn on the loading page (overview cache hit), the ranges still load.
  void overviewShown(const QString& path);
  void loaded(const QString& path);
  void loadFailed(const QString& message);

 protected:
  // Timeline keys (W/A/S/D, arrows, PgUp/PgDn, ...) that a tool button or table with the focus
  // let through go to the timeline while it is shown.
  void keyPressEvent(QKeyEvent* e) override;

 private:
  struct ToolButtons;  // the tool bar's buttons the constructor connects (trace_view.cpp)
  void buildLoadingPage();
  ToolButtons buildContentPage();
  ToolButtons buildToolBar(QWidget* content, QVBoxLayout* cl);
  QWidget* buildTimelinePage(QWidget* content);
  void connectLoaders(QMenu* cmp_menu);
  void connectViews(const ToolButtons& tools);
  void addShortcutActions();

  std::unique_ptr<TraceViewPrivate> d;
};

}  // namespace ulysses::ui
