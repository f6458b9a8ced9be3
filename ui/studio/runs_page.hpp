// Runs list: every run directory of the runs folder with config name, status, duration and
// final loss; open, delete, launch again, resume an interrupted run from its last complete
// checkpoint, and compare two runs side by side.
#pragma once

#include <QWidget>

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
  void setRunsDir(const QString& dir);
  QString runsDir() const;
  RunsModel* model() const { return model_; }
  CompareModel* compareModel() const { return compare_; }
  QStringList selectedDirs() const;
  void selectDir(const QString& dir);
  // Compares two runs (their directories); false when either is not a run.
  bool compare(const QString& a, const QString& b);
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

 private:
  void updateButtons();
  RunsModel* model_;
  CompareModel* compare_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QTableView* compareView_;
  QLabel* folder_;
  QLabel* compareTitle_;
  QFileSystemWatcher* watcher_;
  QTimer* debounce_;
  QPushButton *open_, *relaunch_, *resume_, *delete_, *compareBtn_;
};

}  // namespace ulysses::ui
