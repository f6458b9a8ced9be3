// The timeline widget: paints TimelineIndex through compute_draw_list (custom QWidget
// painting). Keys and wheel as the binding table says (shortcuts.hpp: W/S zoom at the
// pointer, A/D pan, Ctrl+wheel zooms, the wheel scrolls lanes, Shift+wheel pans, F fits the
// selection); left-drag pans, right-drag (or shift+left-drag) selects a time window without
// zooming. Right-click on a
// rank's gutter (header or lane names) opens its menu: Pin (its lanes stay at the top while
// the rest scrolls), Collapse (one summary row with its top-level ranges merged), Hide (with
// an "N ranks hidden - show all" strip at the bottom of the gutter to bring them back).
#pragma once

#include <QWidget>
class QMenu;
class QPainter;
class QFontMetrics;
#include <memory>
#include <utility>
#include <vector>

#include "trace/launch_flows.hpp"
#include "trace/shortcuts.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/viewport_metatype.hpp"

namespace ulysses::ui {

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);

  void setIndex(std::shared_ptr<const TimelineIndex> index);
  std::shared_ptr<const TimelineIndex> index() const { return index_; }

  const TimelineViewport& viewport() const { return vp_; }
  const TimelineLayout& layout() const { return layout_; }
  // Draw list of the last frame (or computed now for the current size when dirty).
  const DrawList& drawList();
  int gutterWidth() const { return gutter_; }
  int rulerHeight() const { return ruler_h_; }

  // Filter: names (case-insensitive substring) or phase names; "" clears. Returns the number
  // of matching names plus matching phases (0: nothing can match).
  int setFilter(const QString& text);
  // Next/previous range (by start time, after/before the current selection or view centre)
  // whose name matches the filter; selects it and centres the view on it. false when none.
  bool jumpToMatch(bool forward);

  int64_t selectedRange() const { return selected_; }
  // The time window selected by a right- or shift-drag, {0, -1} when none.
  std::pair<int64_t, int64_t> selectedWindow() const { return window_; }
  // Clears the selected range and window; false when there was none.
  bool clearSelection();
  // A timeline command of the binding table (zoom, pan, fit...); false for other commands.
  bool runCommand(Command c);
  // Plain wheel zooms (the old behaviour) instead of scrolling the lanes.
  void setWheelZooms(bool on) { wheel_zooms_ = on; }
  bool wheelZooms() const { return wheel_zooms_; }
  // Flow arrows for every collective in view (flows_in_view), beside the selected one's.
  void setAllFlowsInView(bool on);
  bool allFlowsInView() const { return all_flows_; }
  // Launch -> kernel arrows drawn now (cyan, the head at the kernel): launch_flows of the
  // selected range, and of the dragged window when it holds at most kMaxWindowFlows launches.
  // The correlation index is built on the first selection of a trace.
  std::vector<LaunchFlow> launchFlows();
  static constexpr size_t kMaxWindowFlows = 64;
  int64_t stepCount() const;
  int64_t currentStep() const;  // step index (into index()->steps()) under the view centre, -1
  // Replay cursor: a vertical line at this trace time (ns); -1 hides it.
  void setCursorTime(qint64 t_ns);
  qint64 cursorTime() const { return cursor_ns_; }
  // Redraws with the current phase palette (after set_phase_palette).
  void refreshColours();

  // Rank display state (rank ids as in the trace; unknown ranks are ignored). Each call
  // re-lays out the lanes (cheap: per lane, not per range). Hiding a rank drops a selection
  // on it; the vertical scroll is clamped to the new height.
  void setRankPinned(int32_t rank, bool on);
  void setRankCollapsed(int32_t rank, bool on);
  void setRankHidden(int32_t rank, bool on);
  void showAllRanks();
  uint8_t rankFlags(int32_t rank) const;  // RankViewFlags
  int hiddenRankCount() const { return layout_.hidden_ranks; }
  // Rank whose gutter (header, lane names or summary row) is at widget position pos, or -1.
  int32_t rankAt(const QPoint& pos) const;
  // The rank's context menu (actions named "pin", "collapse", "hide", "showAll"); the caller
  // owns it. `rank` -1: only "showAll".
  QMenu* rankMenu(int32_t rank, QWidget* parent);
  // The "N ranks hidden - show all" strip (empty when nothing is hidden); a click shows all.
  QRect hiddenStripRect() const;
  // A rank's whole name: "rank 0 (cuda:0 NVIDIA H100 (python3))" (its device and process).
  QString rankLabel(int32_t rank) const;
  // Its header as the gutter draws it: middle-elided to the gutter's width ("" when not shown).
  // The gutter widens to the longest name, up to a third of the widget (and 360 px); the
  // tooltip over a rank's header or lanes gives the whole name, pid and host.
  QString gutterText(int32_t rank) const;
  // The tooltip text of the gutter at widget position pos ("" over no rank).
  QString gutterToolTip(const QPoint& pos) const;
  float yScroll() const { return y_scroll_; }
  void setYScroll(float y);  // clamped to [0, total height - visible height]

 public slots:
  void setViewport(const ulysses::ui::TimelineViewport& vp);
  void fitAll();
  void fitStep(int step_pos);  // position in index()->steps()
  void nextStep();
  void prevStep();
  void fitRange(qint64 range_index);  // zoom to one range (with margins) and select it
  // The selected window, else the selected range, else the step under the centre (F).
  void fitSelection();
  void selectRange(qint64 range_index);
  // Jumps to the collective instance of `range_index` (a range carrying a (pg, seq)): zooms to
  // its first arrival .. last end over every rank, scrolls the range's lane into view and
  // selects it; a range of no collective is fitted as fitRange does.
  void fitCollective(qint64 range_index);
  // The next / previous instance of the selected collective on its rank
  // (next_collective_instance), jumped to as fitCollective does; false when there is none.
  bool nextCollective();
  bool prevCollective();

 signals:
  void viewportChanged(const ulysses::ui::TimelineViewport& vp);
  void rangeSelected(qint64 range_index);              // -1 = cleared
  void timeRangeSelected(qint64 t0_ns, qint64 t1_ns);  // a dragged range (right / shift drag), before it zooms in

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void keyPressEvent(QKeyEvent*) override;
  void leaveEvent(QEvent*) override;
  void contextMenuEvent(QContextMenuEvent*) override;
  bool event(QEvent* e) override;        // tooltips
  void changeEvent(QEvent* e) override;  // a font change (presentation mode) re-sizes the gutter

 private:
  void changeViewport(TimelineViewport vp);
  void ensureDrawList();
  int timeWidth() const;
  QString describe(const DrawItem& it) const;
  void centreOn(int64_t t);
  void scrollToLaneOf(qint64 range_index);  // shows its rank when hidden, brings its lane into view
  // The arrows drawn now: the selected collective's, then (all arrows on) every one in view.
  std::vector<std::vector<FlowPoint>> flowsDrawn();
  double zoomAnchorX() const;  // W/S/+/- zoom here: the pointer over the time area, else the centre
  void setRankFlag(int32_t rank, uint8_t flag, bool on);
  void relayout();
  float maxScroll() const;
  // Fits the gutter to the longest rank or lane name (clamped); keeps the visible time range.
  void updateGutter();
  QString headerText(const RankLayout& rl, const QFontMetrics& bold) const;
  // paintEvent's layers, in drawing order; all but the gutter and ruler are drawn translated
  // to the time area.
  void paintBackgrounds(QPainter& p, int W, int H);
  void paintShades(QPainter& p);
  void paintItems(QPainter& p, const QFontMetrics& fm);
  void paintAllFlows(QPainter& p);
  void paintSelectedFlow(QPainter& p);
  void paintWindow(QPainter& p, int H);
  void paintGutter(QPainter& p, const QFontMetrics& fm, int H);
  void paintRuler(QPainter& p, int W);

  std::shared_ptr<const TimelineIndex> index_;
  TimelineLayout layout_;
  TimelineViewport vp_;
  DrawList dl_;
  bool dirty_ = true;
  float y_scroll_ = 0;
  int gutter_ = 150, ruler_h_ = 24;
  std::vector<uint8_t> rank_flags_;  // RankViewFlags per index_->ranks() position
  std::vector<uint8_t> match_, match_phase_;
  bool filter_on_ = false;
  int64_t selected_ = -1;
  bool all_flows_ = false;
  // The selected collective's ranges across ranks, found once per selection (and index).
  CollectiveInstanceRanges flowInstance_;
  int64_t flowFor_ = -1;
  const TimelineIndex* flowIndex_ = nullptr;
  LaunchIndex launch_;  // for index_ when launchIndex_ == index_.get()
  const TimelineIndex* launchIndex_ = nullptr;
  int64_t cursor_ns_ = -1;
  // mouse
  bool panning_ = false, selecting_ = false;
  QPoint press_pos_, last_pos_;
  int drag_x_ = -1;
  int hover_x_ = -1;  // pointer x while over the widget, -1 outside
  std::pair<int64_t, int64_t> window_{0, -1};
  bool wheel_zooms_ = false;
};

}  // namespace ulysses::ui
