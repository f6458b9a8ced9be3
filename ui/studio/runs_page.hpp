// Runs list: every run directory of the runs folder with config name, status, duration and
// final loss; open, delete, launch again, resume an interrupted run from its last complete
// checkpoint, and compare two runs side by side (with their traces per phase and per layer,
// loaded off the GUI thread, when both runs have one).
#pragma once

#include <QList>
#include <QPointer>
#include <QThread>
#include <QWidget>

class QCheckBox;
class QHBoxLayout;
class QLabel;
class QTableView;
class QSortFilterProxyModel;
class QFileSystemWatcher;
class QTimer;
class QPushButton;

namespace ulysses::ui {

class RunsModel;
class CompareModel;

class RunsPage : public QWidget {
  Q_OBJECT
 public:
  explicit RunsPage(QWidget* parent = nullptr);
  ~RunsPage() override;  // waits for a trace comparison still loading
  void setRunsDir(const QString& dir);
  QString runsDir() const;
  RunsModel* model() const { return model_; }
  CompareModel* compareModel() const { return compare_; }
  QTableView* compareView() const { return compareView_; }
  QCheckBox* differencesOnly() const { return differencesOnly_; }
  QStringList selectedDirs() const;
  void selectDir(const QString& dir);
  // Compares two runs (their directories); false when either is not a run. When both have a
  // trace, their comparison per phase and per layer follows (traceCompareFinished).
  bool compare(const QString& a, const QString& b);
  // True from compare() until the current comparison's traces are compared and shown (the
  // worker thread may still be unwinding when this turns false).
  bool traceCompareBusy() const { return traceBusy_; }
  QString compareTitle() const;
  // Deletes a run folder without asking (the button asks first).
  bool deleteRun(const QString& dir, QString* error);

 public slots:
  void refresh();

 signals:
  void openRequested(const QString& dir);
  void relaunchRequested(const QString& dir);
  // Resume the run from the latest complete checkpoint in save_to (the run dir, the folder).
  void resumeRequested(const QString& dir, const QString& saveTo);
  void changeRunsDirRequested();
  void traceCompareFinished(bool ok);

 private:
  void buildRunsTable();
  QHBoxLayout* buildFolderRow();
  QHBoxLayout* buildRunButtons();
  QWidget* buildComparePane();
  void watchLiveRuns();
  void updateButtons();
  void updateCompareTitle();
  RunsModel* model_;
  CompareModel* compare_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QTableView* compareView_;
  QCheckBox* differencesOnly_;
  QLabel* folder_;
  QLabel* compareTitle_;
  QFileSystemWatcher* watcher_;
  QTimer* debounce_;
  QPushButton *open_, *relaunch_, *resume_, *delete_, *compareBtn_;
  QString compareHead_, traceStatus_;
  int traceGeneration_ = 0;
  bool traceBusy_ = false;
  QList<QPointer<QThread>> traceThreads_;
};

}  // namespace ulysses::ui
