// Item models of the trace views, usable without any window: one generic read-only table
// model (display text, sort value and a row key per row) and the functions that fill it from
// the analysis core's tables (report, comparison of two runs), the head map, the details of
// a selected range with its kernels, the step list and search results.
#pragma once

#include <QAbstractTableModel>
class QTableView;
class QWidget;
#include <QStringList>
#include <QVariant>
#include <QVector>
#include <cstdint>
#include <vector>

#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/compare.hpp"
#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::ui {

struct TableData {
  QStringList headers;
  QVector<QVector<QVariant>> rows;  // display values (QString, or numbers shown as is)
  QVector<QVector<QVariant>> sort;  // sort values (same shape; may be empty = use display)
  QVector<qint64> keys;             // per row: range index, step position, ... (-1 none)
  // Optional per-row bucket counts (TableModel::HistogramRole), drawn in histogram_column by
  // HistogramDelegate; empty = none.
  QVector<QVector<qint64>> histograms;
  int histogram_column = -1;
  // Per row with a histogram: the span its buckets cover, [lo, hi] in ns (log_histogram's).
  QVector<QPair<qint64, qint64>> histogram_spans;
  // The order the table answers its question in (Top names: longest total first; a comparison:
  // largest |B / A| first): the view sorts by it whenever the table is set. -1: as it is.
  int sort_column = -1;
  Qt::SortOrder sort_order = Qt::AscendingOrder;
  // Per row: whether it differs (a comparison's flagged rows; TableModel::DiffersRole). Empty: none.
  QVector<bool> differs;
  // Appends a row; `sort_values` may be empty.
  void add(QVector<QVariant> display, QVector<QVariant> sort_values = {}, qint64 key = -1);
};

class TableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  static constexpr int SortRole = Qt::UserRole;
  static constexpr int KeyRole = Qt::UserRole + 1;
  // The row's histogram bucket counts (QVariantList of qint64), any column; invalid if none.
  static constexpr int HistogramRole = Qt::UserRole + 2;
  // bool: the row differs (TableData::differs); a proxy filtered on it shows differences only.
  static constexpr int DiffersRole = Qt::UserRole + 3;
  explicit TableModel(QObject* parent = nullptr);
  void setTable(TableData t);
  const TableData& table() const { return t_; }
  // Row whose key is `key`, or -1.
  int rowOfKey(qint64 key) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 signals:
  // setTable with a TableData::sort_column: the order its views should sort in.
  void sortWanted(int column, Qt::SortOrder order);

 private:
  TableData t_;
};

// ---- report (same analysis functions as `ulysses-trace summary`) ----------------------
TableData rank_totals_table(const prof::Summary& s);
TableData step_table(const prof::Summary& s);
TableData layer_table_data(const prof::Summary& s);
TableData head_range_table_data(const prof::Summary& s);
TableData skew_table(const prof::Summary& s);
// Duration histogram with `buckets` log-spaced buckets over [lo, hi] = [min, max] of `d`:
// bucket k = floor(buckets * ln(v / lo) / ln(hi / lo)), clamped to [0, buckets - 1] (so the
// maximum falls in the last bucket); lo is taken as at least 1 ns; when hi <= lo every value
// is in bucket 0. Empty input: all zeros.
std::vector<int64_t> log_histogram(const std::vector<int64_t>& d, int buckets);
constexpr int kStatsHistogramBuckets = 16;
// Statistics of a selected time window (Perfetto's area selection): every range (kernels
// included, head-lane copies and ranks in `hidden_ranks` skipped) that overlaps [t0, t1)
// (start < t1 and end > t0; a zero-length one when it starts inside), each with its duration
// clipped to the window (the part inside it; *clipped counts the ranges cut at an edge), per name (or per phase:
// kernels carry the phase of the range that launched them): count, total, mean, p50, p95, max (ms; percentiles
// nearest-rank: the ceil(p/100 * n)-th smallest) and a duration histogram (last column, log_histogram with
// kStatsHistogramBuckets; counts in TableModel::HistogramRole, the column's text is the span "min .. max"). Longest
// total first.
enum class StatsGroup { Name, Phase };
TableData range_stats_table(const prof::TraceModel& m, int64_t t0, int64_t t1, StatsGroup group = StatsGroup::Name,
                            const std::vector<int32_t>& hidden_ranks = {}, int64_t* clipped = nullptr);
// A pivot of the same window (Perfetto's pivot table): the same ranges, each with its clipped
// duration, grouped by the chosen keys of name, phase and rank (at least one), each key a
// column (name, phase, rank, in that order), then count, total ms and mean ms. Longest total
// first; key = row position.
struct PivotKeys {
  bool name = true, phase = true, rank = true;
};
TableData range_pivot_table(const prof::TraceModel& m, int64_t t0, int64_t t1, PivotKeys keys = {},
                            const std::vector<int32_t>& hidden_ranks = {}, int64_t* clipped = nullptr);
// Waiting analysis per rank: collectives, last arrivals, wait caused / suffered (ms); key = rank.
TableData straggler_table(const prof::Summary& s);
// The instance a Stragglers row (rank) jumps to: the one where the rank arrived last with the
// largest skew, else (never last) the one where it waited longest; index into w.instances
// (the first of equals), -1 when the rank took part in none.
int64_t straggler_instance(const prof::WaitingAnalysis& w, int32_t rank);
TableData memory_phase_table(const prof::Summary& s);
TableData names_table(const prof::Summary& s);
// Two runs side by side, as the profiler compares them (profiler/compare.hpp, the same rows
// `ulysses-trace compare` prints and the Runs page shows: headline, per phase, per layer;
// times are medians over steps of ms per rank): metric, run A, run B, B - A, B / A ("*" when
// flagged). Sort values in the profiler's units (ns, ratio, tokens/s, bytes); absent sides
// show "-" and sort as invalid.
TableData compare_table(const prof::Comparison& c);

// ---- head map -------------------------------------------------------------------------
struct HeadMapRow {
  int32_t rank = 0, sp_rank = 0;
  int32_t owned_begin = 0, owned_end = 0;  // [r*H/P, (r+1)*H/P)
  int32_t head_begin = -1, head_end = -1;  // measured head range (-1: all local heads)
  int64_t attention_ns = 0, a2a_seq_to_head_ns = 0, a2a_head_to_seq_ns = 0;
  int64_t ranges = 0;
  bool inside_owned = true;  // the measured range lies inside the owned heads
};
// Heads of the run (num_heads, or inferred from head ranges when 0).
int32_t trace_num_heads(const prof::TraceModel& m);
// One row per (rank, measured head range), sorted by (rank, head_begin). Ranks without head
// ranges get one row with their attention/all-to-all totals (head_begin = -1).
std::vector<HeadMapRow> head_map_rows(const prof::TraceModel& m);
TableData head_map_table(const std::vector<HeadMapRow>& rows);

// ---- inspection -------------------------------------------------------------------------
// Field / value rows of one range (layer, direction, heads, bytes, duration, ...). A
// collective adds its instance (collective_arrivals): "collective" (pg, seq, ranks that have
// it), "skew", "last arrival" and per rank "rank R arrival" (after the first arrival, and from
// the trace start) and "rank R wait"; the sort value of each duration row is its ns.
TableData range_details_table(const prof::TraceModel& m, int64_t range);
// Kernels launched by a host range or its nested ranges, at most `limit`, sorted by start.
// Key = range index. Traces with CUPTI correlation use TraceRange::origin (exact); others
// match kernels by rank, step, layer, phase, direction, chunk and heads, starting after it.
TableData range_kernels_table(const prof::TraceModel& m, int64_t range, int limit = 500);
// Steps over all ranks (key = position).
struct StepSpan;
TableData steps_table(const prof::TraceModel& m, const std::vector<StepSpan>& steps);
// Ranges whose name contains `needle` (or whose phase name does), first `limit` by start.
TableData search_table(const prof::TraceModel& m, const QString& needle, int limit = 1000, int64_t* total = nullptr);

// A read-only table view over `m`, sortable through a proxy by TableModel::SortRole. Columns
// are sized to their contents (at most kMaxTableColumnPx wide, none stretched), long text is
// elided in the middle with the whole of it on hover; a TableModel's sortWanted sorts it.
constexpr int kMaxTableColumnPx = 420;
QTableView* make_sorted_table(QAbstractItemModel* m, QWidget* parent);
// Fits the columns of `v` to their contents, at most max_px each.
void fit_columns(QTableView* v, int max_px = kMaxTableColumnPx);

}  // namespace ulysses::ui
