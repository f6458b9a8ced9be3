// Search structure the timeline builds once per loaded trace, so that a frame never scans
// all ranges. Each lane's ranges (sorted by start, nested) are split into rows in which
// ranges never overlap: a range's row is its nesting depth, recomputed from the times with a
// stack of open ends (robust to a wrong or missing `depth` field and to improper overlap).
// Ranges of one row are disjoint and sorted by start, hence also sorted by end, so the
// visible slice of a row is two binary searches (first end > t0, first start >= t1) and a
// run of tiny ranges can be skipped with one more binary search (see timeline_draw.hpp).
// Also precomputes, per rank, the intervals where communication overlaps computation, from
// the analysis core's prof::rank_intervals (the same intervals as the overlap report).
#pragma once

#include <cstdint>
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trace/max_tree.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::ui {

// Disjoint intervals sorted by start.
using IntervalList = std::vector<std::pair<int64_t, int64_t>>;

struct TimelineRow {
  int32_t lane = 0;
  int32_t depth = 0;
  // Range indices of this row as offsets from lane.first. Empty with `identity` set when the
  // whole lane is one row (then offset i is i): no memory for flat lanes (kernels).
  std::vector<uint32_t> offsets;
  bool identity = false;
  int64_t size = 0;
  // key(i) = max(duration of i, gap between i-1's end and i's start): a run of ranges that
  // folds at threshold f ends at the first key >= f (TimelineIndex::fold_end).
  MaxTree fold_keys;
};

struct TimelineLaneInfo {
  int32_t lane = 0;
  int32_t rank = 0;
  int32_t first_row = 0, row_count = 0;  // into TimelineIndex::rows
};

struct TimelineRankInfo {
  int32_t rank = 0;
  std::vector<int32_t> lanes;  // lane indices of this rank in display order
  IntervalList overlap;        // comm and compute both active
  IntervalList comm;           // union of communication time
  MaxTree overlap_gaps;        // key(i) = overlap[i].first - overlap[i-1].second
};

struct StepSpan {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;  // over all ranks
};

class TimelineIndex {
 public:
  // Builds the index; `progress` (0..100) is called now and then. Lanes whose ranges are not
  // sorted by start are sorted in a private copy of their order (never expected, but cheap
  // to tolerate).
  // `weights` (empty, or one per model range): how many ranges of a trace each range stands
  // for, when the model is a trace overview (prof::TraceOverview::counts); the draw list
  // counts folded items by them and folds a range that stands for several.
  static std::shared_ptr<TimelineIndex> build(std::shared_ptr<const prof::TraceModel> model,
                                              const std::function<void(int)>& progress = {},
                                              std::vector<int64_t> weights = {});

  const prof::TraceModel& model() const { return *model_; }
  // Ranges of the trace that model range i stands for (1 unless built with weights).
  int64_t weight(int64_t i) const { return weights_.empty() ? 1 : weights_[size_t(i)]; }
  bool weighted() const { return !weights_.empty(); }
  std::shared_ptr<const prof::TraceModel> model_ptr() const { return model_; }
  const std::vector<TimelineRow>& rows() const { return rows_; }
  const std::vector<TimelineLaneInfo>& lanes() const { return lanes_; }
  const std::vector<TimelineRankInfo>& ranks() const { return ranks_; }
  const std::vector<StepSpan>& steps() const { return steps_; }
  int64_t t_min() const { return t_min_; }
  int64_t t_max() const { return t_max_; }

  // Range index (into model.ranges) of element i of a row.
  int64_t range_at(const TimelineRow& row, int64_t i) const {
    const auto& lane = model_->lanes[size_t(row.lane)];
    return lane.first + (row.identity ? i : int64_t(row.offsets[size_t(i)]));
  }
  prof::TraceRange at(const TimelineRow& row, int64_t i) const { return model_->ranges[size_t(range_at(row, i))]; }
  // Visible slice [lo, hi) of a row: ranges with end > t0 and start < t1.
  std::pair<int64_t, int64_t> visible(const TimelineRow& row, int64_t t0, int64_t t1) const;
  // First i in [lo, hi) with start >= t (hi when none).
  int64_t first_start_at_or_after(const TimelineRow& row, int64_t lo, int64_t hi, int64_t t) const;
  // Key of the fold tree (see TimelineRow::fold_keys).
  int64_t fold_key(const TimelineRow& row, int64_t i) const {
    const auto& r = at(row, i);
    const int64_t d = r.end_ns - r.start_ns;
    return i == 0 ? d : std::max(d, r.start_ns - at(row, i - 1).end_ns);
  }
  // First position >= j of the row whose fold key >= fold_ns (row.size when none).
  int64_t fold_stop(const TimelineRow& row, int64_t j, int64_t fold_ns) const {
    return row.fold_keys.find_first(j, fold_ns, [&](int64_t i) { return fold_key(row, i); });
  }
  // The range of the row containing t, or -1 (binary search).
  int64_t find_at(const TimelineRow& row, int64_t t) const;
  // A range's colour: its phase's (phase_argb, current palette) when it has one, else its
  // name family's (name_family_argb, computed once per name at build).
  uint32_t range_argb(const prof::TraceRange& r) const;

 private:
  struct LaneRows;  // one lane's rows, built apart (timeline_index.cpp)
  size_t slot_of(std::map<int32_t, size_t>& rank_slot, int32_t rank);
  void build_lane_rows(size_t li, LaneRows& out, std::atomic<int64_t>& ranges_done) const;
  bool append_lanes(std::vector<LaneRows>& built, std::map<int32_t, size_t>& rank_slot, int64_t& t_min, int64_t& t_max);
  void build_overlap(int64_t t_min, int64_t t_max);
  void build_steps();
  void set_extent(bool have_t, int64_t t_min, int64_t t_max);

  std::shared_ptr<const prof::TraceModel> model_;
  std::vector<int64_t> weights_;
  std::vector<TimelineRow> rows_;
  std::vector<TimelineLaneInfo> lanes_;
  std::vector<TimelineRankInfo> ranks_;
  std::vector<StepSpan> steps_;
  std::vector<uint32_t> name_argb_;  // name_family_argb per model string
  int64_t t_min_ = 0, t_max_ = 0;
};

// Union of intervals (input in any order) as disjoint sorted intervals.
IntervalList interval_union(IntervalList v);
// Intersection of two disjoint sorted lists.
IntervalList interval_intersection(const IntervalList& a, const IntervalList& b);

}  // namespace ulysses::ui
