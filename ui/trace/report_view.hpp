// Overlap and breakdown report: the analysis core's tables (compute / communication / idle
// per rank and step, overlap ratio, per-layer all-to-all and attention time, head ranges,
// rank skew, stragglers (who waits for whom at each collective), memory per phase, top names) — the same
// prof::analyze() that `ulysses-trace summary` prints — with a stacked bar chart per rank, and a comparison of two runs
// side by side with differences.
#pragma once

#include <QWidget>
#include <memory>

#include "trace/trace_models.hpp"

class QCheckBox;
class QLabel;
class QTabWidget;
class QChartView;

namespace ulysses::ui {

class DocumentsView;

class ReportView : public QWidget {
  Q_OBJECT
 public:
  explicit ReportView(QWidget* parent = nullptr);
  void setSummary(std::shared_ptr<const prof::Summary> s, const QString& title);
  // The comparison of this run (A) with another (B), titled by B's name; nullptr clears.
  void setCompare(std::shared_ptr<const prof::Comparison> c, const QString& title);
  // data.kind = "documents": the documents of each rank's shard (TraceModel::documents) in a
  // "Documents" tab, there only when the trace has some.
  void setDocuments(std::vector<prof::DocumentShard> d);
  DocumentsView* documentsView() const { return documents_; }
  TableModel* ranksModel() const { return ranks_; }
  TableModel* stepsModel() const { return steps_; }
  TableModel* layersModel() const { return layers_; }
  TableModel* skewModel() const { return skew_; }
  TableModel* stragglersModel() const { return stragglers_; }
  QTableView* stragglersView() const { return stragglers_view_; }
  TableModel* compareModel() const { return compare_; }
  // The comparison's table (nullptr until a comparison is shown) and its "differences only" box.
  QTableView* compareView() const { return compare_view_; }
  QCheckBox* differencesOnly() const { return differences_only_; }
  QTabWidget* tabs() const { return tabs_; }

 signals:
  void stepActivated(qint64 step);  // a row of the per-step table was activated
  // A Stragglers row was clicked: the instance (pg, seq) it stands for (straggler_instance)
  // and the row's rank.
  void collectiveActivated(int pg, qint64 seq, int rank);

 private:
  void rebuildChart();
  void rebuildCompare();
  std::shared_ptr<const prof::Summary> s_;
  std::shared_ptr<const prof::Comparison> compare_data_;
  QString title_, other_title_;
  QLabel* headline_;
  QTabWidget* tabs_;
  QChartView* chart_;
  TableModel *ranks_, *steps_, *layers_, *heads_, *skew_, *stragglers_, *memory_, *names_, *compare_;
  int compare_tab_ = -1;
  DocumentsView* documents_ = nullptr;
  QTableView* stragglers_view_ = nullptr;
  QTableView* compare_view_ = nullptr;
  QCheckBox* differences_only_ = nullptr;
};

// One line: "overlap 43.1% of 12.3 ms communication; compute 80.2 ms, idle 3.1 ms".
QString summary_headline(const prof::Summary& s);

}  // namespace ulysses::ui
