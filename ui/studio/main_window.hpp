// The studio's main window: Launch, Monitor, Runs and Trace pages; menus and shortcuts,
// recent files, drag and drop of run folders / traces / configs, settings kept between
// sessions (QSettings), dark theme.
#pragma once

#include <QMainWindow>
#include <QVector>

#include "trace/phase_style.hpp"

class QTabWidget;
class QMenu;
class QAction;
class QLabel;

namespace ulysses::launch {
struct MetricPoint;
}  // namespace ulysses::launch

namespace ulysses::ui {

using MetricPoint = launch::MetricPoint;
class LauncherPage;
class PrepareDialog;
class MonitorPage;
class RunsPage;
class RunController;
class TraceView;
struct RunOutcome;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  LauncherPage* launcher() const { return launcher_; }
  // File ▸ Prepare Data…: the dialog (made on first use; its "Use in launcher" fills the launcher).
  PrepareDialog* prepareDialog();
  MonitorPage* monitor() const { return monitor_; }
  RunsPage* runsPage() const { return runs_; }
  RunController* controller() const { return controller_; }
  TraceView* traceView() const { return trace_; }
  // The run's config in the launcher with train.resume_from = saveTo (runs page "Resume").
  bool resume(const QString& runDir, const QString& saveTo);
  // Why the last trace (of a run folder, or a file) could not be opened; empty when it could.
  QString lastTraceError() const { return lastTraceError_; }

  // `remember`: keep it for the next session (the menus do; --runs-dir and --dark do not, so
  // a scripted screenshot leaves the user's settings as they were).
  void setRunsDir(const QString& dir, bool remember = true);
  QString runsDir() const;
  void setLauncherProgram(const QString& path) { program_ = path; }
  QString launcherProgram() const { return program_; }

  // Opens a run folder (monitor + runs list + trace), a trace .sqlite, a PyTorch profiler .json
  // (.json.gz: the loader says to unpack it), a folder of exports, or a config .json.
  // File ▸ Open (files), File ▸ Open Folder and a drop on the window all come here.
  bool openPath(const QString& path, QString* error);
  // Pages: launch, monitor, runs, trace; trace views: timeline, headmap, memory, report.
  bool setView(const QString& name);
  QString currentPage() const;
  // Starts the launcher's config; false with *error when invalid or already running.
  bool launch(QString* error);
  void setDarkTheme(bool dark, bool remember = true);
  // Phase colours of the trace views (View ▸ Colour-blind-safe Phase Colours, --palette cb).
  // `remember`: keep it for the next session (the menu does; --palette does not).
  void setPhasePalette(PhasePalette p, bool remember = true);
  bool darkTheme() const { return dark_; }
  QStringList recentFiles() const;
  // File ▸ Export image: the current page as PNG or SVG by the suffix of `path`.
  bool exportCurrentView(const QString& path, QString* error);
  // Help ▸ Keyboard Shortcuts ("?"): the sheet of the binding table (shortcuts.hpp), shown
  // beside the window; returns it.
  QWidget* showShortcuts();
  // The name filters of File ▸ Open.
  static QString openFileFilters();
  // Loads the trace and waits (screenshots).
  bool openTraceAndWait(const QString& path, QString* error);

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void wireTraceView();
  void addExplainTab();
  void wireRunSignals();
  void restoreSettings();
  void buildMenus();
  void buildFileMenu();
  void buildRunMenu();
  void buildViewMenu();
  void applyPresentationMode(bool on);
  void buildHelpMenu();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void onFinished(const RunOutcome& o);
  void relaunch(const QString& runDir);
  void openRunTrace(const QString& runDir);
  bool showMeasured(const QString& runDir, const QVector<MetricPoint>& metrics);
  void openDialog();
  void openConfigDialog();
  void saveConfigDialog();
  void importHfDialog();
  void chooseRunsDir();
  void showError(const QString& title, const QString& msg);

  QTabWidget* tabs_ = nullptr;
  LauncherPage* launcher_ = nullptr;
  PrepareDialog* prepare_ = nullptr;
  MonitorPage* monitor_ = nullptr;
  RunsPage* runs_ = nullptr;
  QString lastConfigProblem_;  // why the last config did not load at start ("" when it did)
  TraceView* trace_ = nullptr;
  QString lastTraceError_;
  RunController* controller_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QAction* darkAction_ = nullptr;
  QAction* stopAction_ = nullptr;
  QLabel* statusRun_ = nullptr;
  QString program_;
  bool dark_ = false;
  bool hasGpus_ = false;
  bool quiet_ = false;  // no modal dialogs (tests, screenshots)

 public:
  void setQuiet(bool q) { quiet_ = q; }
};

}  // namespace ulysses::ui
