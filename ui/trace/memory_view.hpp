// Memory view: per-rank memory over time (allocated, reserved/RSS, peak) from
// TraceModel::memory, drawn with Qt Charts on the same time axis as the timeline (shared
// TimelineViewport), with step boundaries and the sample labels (phase boundaries) as
// markers. Series are decimated per pixel column so huge traces stay responsive.
#pragma once

#include <QWidget>
#include <memory>
#include <map>
#include <tuple>
#include <vector>

#include "trace/timeline_index.hpp"
#include "trace/trace_models.hpp"
#include "trace/viewport_metatype.hpp"

class QComboBox;
class QLabel;
class QChart;
class QChartView;
class QValueAxis;
class QGroupBox;
class QTableView;

namespace ulysses::ui {

// Points of one rank's memory in [t0, t1), at most ~2 per pixel column (max per column).
struct MemorySeriesPoint {
  int64_t t_ns = 0;
  int64_t allocated = 0, reserved = 0, peak = 0;
  int32_t label_id = 0;
};
std::vector<MemorySeriesPoint> memory_points(const prof::TraceModel& m, int32_t rank, int64_t t0, int64_t t1,
                                             int columns);

// Memory by category (ULYSSES_MEMORY_CATEGORIES, docs/STUDIO.md) of one rank in [t0, t1): the range-
// edge and peak samples, at most one per pixel column (the largest total), with one sample
// before and after the window so the areas reach the edges.
std::vector<prof::MemoryCategorySample> category_points(const prof::TraceModel& m, int32_t rank, int64_t t0, int64_t t1,
                                                        int columns);
// The planner's curve (MemEdge::PlannedBegin / PlannedEnd rows) placed on one rank's measured
// samples in [t0, t1): each range-edge sample of a step gets the planned point of the same range
// edge (phase, layer, begin or end) and the same occurrence in its step (the k-th begin of layer
// 3's attention in the step against the dry run's k-th), as (time, planned total bytes). Samples
// of ranges the dry run does not run (the trainer's step, backward, optimizer) get none. Empty
// without a planned curve.
// The planned points of a trace by range edge (phase, layer, begin), in the dry run's order:
// read once per trace (planned_curve), placed per window (planned_curve_points).
using PlannedCurve = std::map<std::tuple<int32_t, int32_t, bool>, std::vector<int64_t>>;
PlannedCurve planned_curve(const prof::TraceModel& m);
// columns > 0: at most ~2 points per pixel column (the column's largest planned total), as
// category_points draws the measured areas; a million range edges in view stay a few thousand
// points (issue 54).
std::vector<std::pair<int64_t, int64_t>> planned_curve_points(const prof::TraceModel& m, const PlannedCurve& planned,
                                                              int32_t rank, int64_t t0, int64_t t1, int columns = 0);
std::vector<std::pair<int64_t, int64_t>> planned_curve_points(const prof::TraceModel& m, int32_t rank, int64_t t0,
                                                              int64_t t1);
// "What was alive at the peak" of one rank as an HTML table (category, bytes, share of the
// peak), the planner's prediction beside it when the trace has one; empty without categories.
QString peak_table_html(const prof::TraceModel& m, int32_t rank);

class MemoryView : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryView(QWidget* parent = nullptr);
  void setIndex(std::shared_ptr<const TimelineIndex> index);
  const TimelineViewport& viewport() const { return vp_; }
  int seriesCount() const;
  // The rank whose categories are shown stacked, or -1 (the allocated/RSS lines instead).
  int categoryRank() const;
  QString peakTable() const;
  // The named tensor groups alive at the shown rank's measured peak, and the plan's beside them
  // (ULYSSES_PEAK_TENSORS; CPU ranks); empty tables when the trace has none.
  TableModel* namedPeakTable() const { return named_; }
  TableModel* plannedPeakTable() const { return planned_named_; }

 public slots:
  void setViewport(const ulysses::ui::TimelineViewport& vp);

 signals:
  void viewportChanged(const ulysses::ui::TimelineViewport& vp);

 protected:
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  void rebuild();
  void addPhaseMarkers(const std::vector<MemorySeriesPoint>& pts, int64_t base, QValueAxis* ax, QValueAxis* ay);
  void addStepMarkers(int64_t t0, int64_t t1, int cols, int64_t base, double ymax, QValueAxis* ax, QValueAxis* ay);
  void updateLegend(int32_t cat_rank);
  double addCategoryAreas(int32_t rank, int64_t t0, int64_t t1, int cols, int64_t base, QValueAxis* ax, QValueAxis* ay,
                          double unit);
  std::shared_ptr<const TimelineIndex> index_;
  PlannedCurve planned_;  // index_'s planned curve (planned_curve), read in setIndex
  TimelineViewport vp_;
  QComboBox* rank_box_;
  QLabel* info_;
  QLabel* legend_;
  QLabel* peak_table_;
  TableModel* named_;
  TableModel* planned_named_;
  QGroupBox* named_box_;
  QGroupBox* planned_box_;
  QWidget* named_row_;
  int32_t named_rank_ = -2;  // the rank whose named tables are shown (set per index and rank, not per viewport)
  void showNamedTables(int32_t rank);
  QChartView* view_;
  QChart* chart_;
};

}  // namespace ulysses::ui
