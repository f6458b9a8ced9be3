// "What to draw" for the timeline, without QPainter: a layout of rank groups and lane rows,
// and for one viewport a flat list of draw items (rect, colour, label, folded count) plus the
// shading where communication overlaps computation. Tested offscreen and benchmarked; the
// widget only paints the list.
//
// Folding (as in Tracy): a range narrower than fold_px starts a folded item; every following
// range that starts within fold_px of the folded item's end joins it, found by binary search
// so a run of a million tiny ranges costs a few searches per fold_px of screen, never a scan.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "trace/timeline_index.hpp"
#include "trace/timeline_viewport.hpp"

namespace ulysses::ui {

struct TimelineLayoutOptions {
  float rank_header_h = 20;
  float row_h = 18;
  float lane_gap = 3;
  float rank_gap = 8;
};

// Per-rank display state (Perfetto/Tracy-style track controls), indexed like
// TimelineIndex::ranks(). Hidden wins over the others; a rank may be pinned and collapsed.
enum RankViewFlags : uint8_t { kRankPinned = 1, kRankCollapsed = 2, kRankHidden = 4 };

struct LaneLayout {
  int32_t lane = 0;
  int32_t rank = 0;
  float y = 0, h = 0;      // h = rows * row_h; collapsed: the rank's summary row; hidden: 0
  bool hidden = false;     // its rank is hidden: not drawn, not hit
  bool collapsed = false;  // its rank is collapsed: drawn merged into the summary row at y
};

struct RankLayout {
  int32_t rank = 0;
  int32_t pos = 0;     // index into TimelineIndex::ranks()
  float y = 0, h = 0;  // whole group including the header
  float lanes_y = 0;   // first lane row (collapsed: the summary row)
  bool pinned = false, collapsed = false;
};

// Layout y -> widget y: pinned ranks sit in a band [0, pinned_h) at the top that does not
// scroll; the rest (layout y >= pinned_h) scrolls by y_scroll and is cut off under the band.
struct TimelineLayout {
  TimelineLayoutOptions opt;
  std::vector<RankLayout> ranks;  // shown ranks only: pinned first, then the rest, each in rank order
  std::vector<LaneLayout> lanes;  // indexed by lane id (hidden lanes included, flagged)
  float total_h = 0;
  float pinned_h = 0;  // height of the pinned band (0: nothing pinned)
  int32_t hidden_ranks = 0;
  float screen_y(float y, float y_scroll) const { return y < pinned_h ? y : y - y_scroll; }
  // Widget y -> layout y (inverse of screen_y; under the band when sy >= pinned_h).
  float layout_y(float sy, float y_scroll) const { return sy < pinned_h ? sy : sy + y_scroll; }
  // Lane row under layout y: {lane, depth} or {-1, -1} (hidden and collapsed lanes excluded).
  std::pair<int32_t, int32_t> row_at(const TimelineIndex& ix, float y) const;
  // Shown rank whose group (header, lanes or summary row) contains layout y, or nullptr.
  const RankLayout* rank_at(float y) const;
  // Layout of rank `rank` (rank id), or nullptr when hidden / absent.
  const RankLayout* find_rank(int32_t rank) const;
};

// `rank_flags` (RankViewFlags per TimelineIndex::ranks() position; shorter or empty = none).
TimelineLayout compute_layout(const TimelineIndex& ix, const TimelineLayoutOptions& opt = {},
                              const std::vector<uint8_t>& rank_flags = {});

// kSummary: the item lies in a collapsed rank's summary row (the depth-0 ranges of each of its
// lanes, head-range copies skipped, overlaid in lane order: later lanes draw on top; a lane
// whose first top-level range is a step also draws its depth-1 ranges over it, so the phases
// show rather than one step bar).
enum DrawFlags : uint8_t { kDimmed = 1, kSelected = 2, kFolded = 4, kSummary = 8 };

struct DrawItem {
  float x = 0, y = 0, w = 0, h = 0;
  uint32_t argb = 0;
  int32_t name_id = -1;  // label (strings index) for a single range; -1 for folded items
  int64_t range = -1;    // model.ranges index (first range of a folded item)
  int64_t count = 1;     // ranges represented: > 1 = folded
  uint8_t flags = 0;
};

struct ShadeRect {
  float x = 0, y = 0, w = 0, h = 0;
};

struct DrawParams {
  TimelineViewport vp;
  float y_scroll = 0;  // scroll of the part under the pinned band (see TimelineLayout::screen_y)
  float height = std::numeric_limits<float>::max();
  float fold_px = 3;  // ranges narrower than this fold
  // Search/filter: a range matches when match[name_id] or match_phase[phase] is 1. Both null
  // = no filter. Non-matching single items get kDimmed; folded items are dimmed unless their
  // first range matches.
  const std::vector<uint8_t>* match = nullptr;
  const std::vector<uint8_t>* match_phase = nullptr;
  int64_t selected = -1;
  bool shade_overlap = true;
};

struct DrawList {
  std::vector<DrawItem> items;
  std::vector<ShadeRect> shades;
  int64_t single_items = 0;   // items drawing one range
  int64_t folded_items = 0;   // items drawing several ranges
  int64_t folded_ranges = 0;  // ranges inside folded items
  int64_t rows_visited = 0;
  void clear() { *this = DrawList{}; }
};

// One row's visible ranges in [t0, t1) folded: consecutive spans of the row, each either one
// range (count 1: at least fold_ns long, or narrow with no narrow neighbour within fold_ns)
// or `count` > 1 narrow ranges where each starts less than fold_ns after the previous ends.
struct FoldedSpan {
  int64_t first = 0;  // position in the row
  int64_t count = 1;
  int64_t start_ns = 0, end_ns = 0;
};
void fold_row(const TimelineIndex& ix, const TimelineRow& row, int64_t t0, int64_t t1, int64_t fold_ns,
              std::vector<FoldedSpan>* out);
// fold_ns for a viewport: fold_px pixels, rounded up to whole ns.
int64_t fold_threshold_ns(const TimelineViewport& vp, float fold_px);

// Fills `out` (cleared first) with what is visible through `p`.
void compute_draw_list(const TimelineIndex& ix, const TimelineLayout& layout, const DrawParams& p, DrawList* out);

// Whether range r passes the filter of p.
bool range_matches(const DrawParams& p, const prof::TraceRange& r);

// One collective instance across ranks, as the waiting analysis pairs it (analysis.hpp): the
// ranges (head-lane copies and kernels left out) carrying the selected range's (pg, seq), per
// rank the earliest, ascending rank; the group's ranks are those with any range of that pg.
// Arrival = the range's start; skew = last arrival - first arrival; a rank's wait = last
// arrival - its arrival; the last arriver is the latest (ties: the lowest rank). Empty
// (pg = -1) when the range is not a collective.
struct RankArrival {
  int32_t rank = 0;
  int64_t range = -1;
  int64_t arrive_ns = 0, wait_ns = 0;
};
struct CollectiveArrivals {
  int32_t pg = -1;
  int64_t seq = -1;
  std::vector<RankArrival> arrivals;  // ascending rank
  int32_t group_ranks = 0;
  int64_t first_ns = 0, last_ns = 0, skew_ns = 0;
  int32_t last_rank = -1;
};
CollectiveArrivals collective_arrivals(const prof::TraceModel& m, int64_t range);
// The range of instance (pg, seq) on `rank` (its earliest, kernels and head-lane copies left
// out), or -1.
int64_t collective_range(const prof::TraceModel& m, int32_t pg, int64_t seq, int32_t rank);
// The next (forward) or previous instance of the same collective on the same rank: the nearest
// range by start time with the same name, process group, phase, direction, layer and heads
// that carries a collective id; -1 when there is none that way.
int64_t next_collective_instance(const prof::TraceModel& m, int64_t range, bool forward);
// Flow arrows joining one collective's instances across ranks (Perfetto-style flows): for the
// range `selected` that carries a collective identity (pg, seq), one point per rank whose
// range has the same identity (HeadRange copies skipped; an earlier HeadRange copy selected
// resolves to its original), at the arrival (range start) on the range's row, sorted by
// arrival. Ranks that are hidden have no point; a collapsed rank's point lies on its summary
// row; a pinned rank's does not scroll. The widget draws an arrow from each point to the last one (the last arriver):
// the horizontal length of each arrow is the time that rank waited. Empty when the range is not a collective. x in
// widget time-area pixels, y in widget rows (y_scroll applied).
struct FlowPoint {
  int32_t rank = 0;
  int64_t range = -1;
  int64_t arrive_ns = 0;
  float x = 0, y = 0;
};
std::vector<FlowPoint> collective_flow(const TimelineIndex& ix, const TimelineLayout& layout,
                                       const TimelineViewport& vp, float y_scroll, int64_t selected);

// One collective instance across ranks, found in one pass over the ranges (the widget keeps it
// while the selection stays, instead of a pass per repaint): per rank the earliest range with
// the selected range's (pg, seq), ascending rank, and how many ranks its group has (ranks with
// any range of that pg, as the waiting analysis counts members).
struct CollectiveInstanceRanges {
  std::vector<int64_t> ranges;
  int32_t group_ranks = 0;
};
CollectiveInstanceRanges collective_instance(const TimelineIndex& ix, int64_t selected);
// What the arrows' label says, over every rank of the instance, hidden ones included (a hidden
// last arriver is named, not the last visible one): the last arriver (on a tie the lowest
// rank, as the Stragglers table), its skew over the first arrival, and whether a member rank
// lacks the instance (the analysis leaves such an instance out).
struct FlowSummary {
  int32_t last_rank = -1;
  bool last_hidden = false;
  int64_t skew_ns = 0;
  int32_t ranks = 0, group_ranks = 0;
};
std::vector<FlowPoint> collective_flow(const TimelineIndex& ix, const TimelineLayout& layout,
                                       const TimelineViewport& vp, float y_scroll,
                                       const CollectiveInstanceRanges& instance, FlowSummary* summary = nullptr);

// Flow arrows of every collective in view (the "all in view" toggle): per (pg, seq) met among
// the drawn single ranges of `dl` (not folded items, kernels or head-lane copies), one point per
// rank at its earliest drawn range (the middle of its item), groups of two or more ranks only,
// each sorted as collective_flow's points (the last arriver last); at most max_groups groups,
// earliest first arrival first.
std::vector<std::vector<FlowPoint>> flows_in_view(const TimelineIndex& ix, const DrawList& dl,
                                                  size_t max_groups = 2000);

// The arrow under (x, y) among flow groups (each drawn from every point but the last to the
// last one, as collective_flow / flows_in_view give them): the range of the point the arrow
// starts at (the rank that waited), or -1 when no arrow passes within tolerance_px. Of arrows
// within it, the nearest wins.
int64_t hit_flow(const std::vector<std::vector<FlowPoint>>& groups, float x, float y, float tolerance_px = 3);

// Index into out.items of the item under (x, y) (with a small horizontal tolerance), or -1.
// Of items containing the point the last one (drawn on top) wins.
int64_t hit_test(const DrawList& dl, float x, float y, float tolerance_px = 2);

}  // namespace ulysses::ui
