// Table model and the builders that turn analysis tables and trace ranges into rows.
#include "trace/trace_models.hpp"

#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "trace/phase_style.hpp"
#include "trace/timeline_draw.hpp"
#include "trace/timeline_index.hpp"
#include "trace/qt_text.hpp"

namespace ulysses::ui {

using prof::Phase;
using prof::TraceModel;
using prof::TraceRange;

namespace {
QString ms(double ns) { return QString::number(ns / 1e6, 'f', 3); }
// ms with the digits a sub-microsecond value needs (a p50 of 55 ns read "0.000").
QString ms_fine(double ns) { return ns != 0 && std::fabs(ns) < 1000 ? QString::number(ns / 1e6, 'f', 6) : ms(ns); }
QString pct(double r) { return QString::number(r * 100.0, 'f', 1) + QLatin1Char('%'); }
QString str_of(const TraceModel& m, int32_t id) {
  return (id >= 0 && size_t(id) < m.strings.size()) ? to_qs(m.strings[size_t(id)]) : QString();
}
}  // namespace

void TableData::add(QVector<QVariant> display, QVector<QVariant> sort_values, qint64 key) {
  rows.push_back(std::move(display));
  sort.push_back(std::move(sort_values));
  keys.push_back(key);
}

TableModel::TableModel(QObject* parent) : QAbstractTableModel(parent) {}

void TableModel::setTable(TableData t) {
  beginResetModel();
  t_ = std::move(t);
  while (t_.sort.size() < t_.rows.size()) t_.sort.push_back({});
  while (t_.keys.size() < t_.rows.size()) t_.keys.push_back(-1);
  endResetModel();
  if (t_.sort_column >= 0 && t_.sort_column < t_.headers.size()) emit sortWanted(t_.sort_column, t_.sort_order);
}

int TableModel::rowOfKey(qint64 key) const {
  for (int i = 0; i < t_.keys.size(); ++i)
    if (t_.keys[i] == key) return i;
  return -1;
}

int TableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(t_.rows.size()); }
int TableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(t_.headers.size()); }

QVariant TableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= t_.rows.size() || index.column() >= t_.headers.size()) return {};
  const auto& row = t_.rows[index.row()];
  const QVariant v = index.column() < row.size() ? row[index.column()] : QVariant();
  switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole:
      return v;
    case SortRole: {
      const auto& s = t_.sort[index.row()];
      return index.column() < s.size() && s[index.column()].isValid() ? s[index.column()] : v;
    }
    case KeyRole:
      return t_.keys[index.row()];
    case DiffersRole:
      return index.row() < t_.differs.size() && t_.differs[index.row()];
    case HistogramRole: {
      if (index.row() >= t_.histograms.size()) return {};
      QVariantList l;
      for (qint64 c : t_.histograms[index.row()]) l.push_back(c);
      return l;
    }
    case Qt::TextAlignmentRole: {
      const auto& s = t_.sort[index.row()];
      const QVariant sv = index.column() < s.size() ? s[index.column()] : v;
      const bool num = sv.typeId() == QMetaType::Double || sv.typeId() == QMetaType::LongLong ||
                       sv.typeId() == QMetaType::Int || v.typeId() == QMetaType::Double ||
                       v.typeId() == QMetaType::LongLong || v.typeId() == QMetaType::Int;
      return QVariant::fromValue(int((num ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter));
    }
    default:
      return {};
  }
}

QVariant TableModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Horizontal)
    return section >= 0 && section < t_.headers.size() ? QVariant(t_.headers[section]) : QVariant();
  return section + 1;
}

// ---- report ---------------------------------------------------------------------------------
TableData rank_totals_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"rank", "steps", "wall ms", "compute ms", "comm ms", "overlap ms", "idle ms", "overlap ratio"};
  for (const auto& r : s.ranks) {
    t.add({r.rank, qint64(r.steps), ms(double(r.wall_ns)), ms(double(r.compute_ns)), ms(double(r.comm_ns)),
           ms(double(r.overlap_ns)), ms(double(r.idle_ns)), pct(r.overlap_ratio)},
          {r.rank, qint64(r.steps), double(r.wall_ns), double(r.compute_ns), double(r.comm_ns), double(r.overlap_ns),
           double(r.idle_ns), r.overlap_ratio},
          r.rank);
  }
  return t;
}

TableData step_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"rank",    "step",          "wall ms", "compute ms", "comm ms", "overlap ms", "exposed comm ms",
               "idle ms", "overlap ratio", "source"};
  for (const auto& r : s.steps) {
    t.add({r.rank, qint64(r.step), ms(double(r.wall_ns)), ms(double(r.compute_ns)), ms(double(r.comm_ns)),
           ms(double(r.overlap_ns)), ms(double(r.exposed_comm_ns)), ms(double(r.idle_ns)), pct(r.overlap_ratio),
           r.gpu ? QStringLiteral("gpu kernels") : QStringLiteral("host ranges")},
          {r.rank, qint64(r.step), double(r.wall_ns), double(r.compute_ns), double(r.comm_ns), double(r.overlap_ns),
           double(r.exposed_comm_ns), double(r.idle_ns), r.overlap_ratio, r.gpu ? 1 : 0},
          r.step);
  }
  return t;
}

TableData layer_table_data(const prof::Summary& s) {
  TableData t;
  t.headers = {"layer",       "direction",      "qkv_proj ms", "a2a seq->head ms", "attention ms", "a2a head->seq ms",
               "out_proj ms", "a2a bytes sent", "samples"};
  for (const auto& r : s.layers) {
    const double n = double(std::max<int64_t>(1, r.samples));  // per rank per step
    t.add({r.layer, direction_label(r.dir), ms(r.qkv_proj_ns / n), ms(r.a2a_seq_to_head_ns / n), ms(r.attention_ns / n),
           ms(r.a2a_head_to_seq_ns / n), ms(r.out_proj_ns / n),
           to_qs(format_bytes(int64_t(double(r.a2a_bytes_sent) / n))), qint64(r.samples)},
          {r.layer, int(r.dir), r.qkv_proj_ns / n, r.a2a_seq_to_head_ns / n, r.attention_ns / n,
           r.a2a_head_to_seq_ns / n, r.out_proj_ns / n, double(r.a2a_bytes_sent) / n, qint64(r.samples)},
          r.layer);
  }
  return t;
}

TableData head_range_table_data(const prof::Summary& s) {
  TableData t;
  t.headers = {"heads", "a2a seq->head ms", "attention ms", "a2a head->seq ms", "ranges", "bytes sent"};
  for (const auto& r : s.heads) {
    t.add({QStringLiteral("%1-%2").arg(r.head_begin).arg(r.head_end - 1), ms(double(r.a2a_seq_to_head_ns)),
           ms(double(r.attention_ns)), ms(double(r.a2a_head_to_seq_ns)), qint64(r.count),
           to_qs(format_bytes(r.bytes_sent))},
          {r.head_begin, double(r.a2a_seq_to_head_ns), double(r.attention_ns), double(r.a2a_head_to_seq_ns),
           qint64(r.count), qint64(r.bytes_sent)},
          r.head_begin);
  }
  return t;
}

TableData skew_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"phase", "slowest rank", "slowest ms", "fastest rank", "fastest ms", "slowest / fastest"};
  for (const auto& r : s.skew) {
    t.add({phase_label(r.phase), r.slowest_rank, ms(r.slowest_ns), r.fastest_rank, ms(r.fastest_ns),
           QString::number(r.ratio, 'f', 3)},
          {int(r.phase), r.slowest_rank, r.slowest_ns, r.fastest_rank, r.fastest_ns, r.ratio}, int(r.phase));
  }
  return t;
}

std::vector<int64_t> log_histogram(const std::vector<int64_t>& d, int buckets) {
  std::vector<int64_t> h(size_t(std::max(1, buckets)), 0);
  if (d.empty()) return h;
  const auto [mn, mx] = std::minmax_element(d.begin(), d.end());
  const double lo = double(std::max<int64_t>(1, *mn)), hi = double(*mx);
  const double span = hi > lo ? std::log(hi / lo) : 0.0;
  const int last = int(h.size()) - 1;
  for (int64_t v : d) {
    int k = 0;
    if (span > 0 && double(v) > lo)
      k = std::min(last, int(std::floor(double(h.size()) * std::log(double(v) / lo) / span)));
    ++h[size_t(k)];
  }
  return h;
}

namespace {
// Every range of [t0, t1) that range_stats_table counts, with its clipped duration.
template <class F>
void for_each_window_range(const prof::TraceModel& m, int64_t t0, int64_t t1, const std::vector<int32_t>& hidden_ranks,
                           int64_t* clipped, F&& f) {
  if (clipped) *clipped = 0;
  const std::set<int32_t> hidden(hidden_ranks.begin(), hidden_ranks.end());
  for (const auto& lane : m.lanes) {
    if (lane.kind == prof::LaneKind::HeadRange || hidden.count(lane.rank)) continue;
    for (int64_t k = lane.first; k < lane.first + lane.count; ++k) {
      const prof::TraceRange& r = m.ranges[size_t(k)];
      const bool overlaps =
          r.end_ns > r.start_ns ? r.start_ns < t1 && r.end_ns > t0 : r.start_ns >= t0 && r.start_ns < t1;
      if (!overlaps) continue;
      if (clipped && (r.start_ns < t0 || r.end_ns > t1)) ++*clipped;
      f(r, std::max<int64_t>(0, std::min(r.end_ns, t1) - std::max(r.start_ns, t0)));
    }
  }
}
}  // namespace

TableData range_stats_table(const prof::TraceModel& m, int64_t t0, int64_t t1, StatsGroup group,
                            const std::vector<int32_t>& hidden_ranks, int64_t* clipped) {
  // key: (name id or phase, kernel)
  std::map<std::pair<int32_t, bool>, std::vector<int64_t>> by_key;
  for_each_window_range(m, t0, t1, hidden_ranks, clipped, [&](const prof::TraceRange& r, int64_t d) {
    by_key[{group == StatsGroup::Phase ? int32_t(r.phase) : r.name_id, r.is_kernel}].push_back(d);
  });
  struct Row {
    QString name;
    bool kernel;
    int64_t count, total, p50, p95, min, max;
    std::vector<int64_t> hist;
  };
  std::vector<Row> rows;
  for (auto& [key, d] : by_key) {
    std::sort(d.begin(), d.end());
    const auto n = int64_t(d.size());
    auto pct = [&](int p) { return d[size_t(std::max<int64_t>(1, (p * n + 99) / 100) - 1)]; };
    int64_t total = 0;
    for (int64_t v : d) total += v;
    QString name;
    if (group == StatsGroup::Phase)
      name = QString::fromLatin1(phase_label(Phase(key.first)));
    else
      name = key.first >= 0 && size_t(key.first) < m.strings.size() ? to_qs(m.strings[size_t(key.first)])
                                                                    : QStringLiteral("?");
    rows.push_back(
        {name, key.second, n, total, pct(50), pct(95), d.front(), d.back(), log_histogram(d, kStatsHistogramBuckets)});
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.total != b.total ? a.total > b.total : a.name < b.name; });
  TableData t;
  t.headers = {group == StatsGroup::Phase ? "phase" : "name",
               "kind",
               "count",
               "total ms",
               "mean ms",
               "p50 ms",
               "p95 ms",
               "max ms",
               "histogram"};
  t.histogram_column = 8;
  qint64 key = 0;
  for (const auto& r : rows) {
    const double mean = double(r.total) / double(r.count);
    const QString span = duration_qs(double(r.min)) + QStringLiteral(" .. ") + duration_qs(double(r.max));
    t.add({r.name, r.kernel ? "gpu" : "range", qint64(r.count), ms_fine(double(r.total)), ms_fine(mean),
           ms_fine(double(r.p50)), ms_fine(double(r.p95)), ms_fine(double(r.max)), span},
          {r.name, r.kernel ? "gpu" : "range", qint64(r.count), qint64(r.total), mean, qint64(r.p50), qint64(r.p95),
           qint64(r.max), qint64(r.max - r.min)},
          key++);
    t.histograms.push_back(QVector<qint64>(r.hist.begin(), r.hist.end()));
    t.histogram_spans.push_back({qint64(std::max<int64_t>(1, r.min)), qint64(r.max)});
  }
  return t;
}

TableData range_pivot_table(const prof::TraceModel& m, int64_t t0, int64_t t1, PivotKeys keys,
                            const std::vector<int32_t>& hidden_ranks, int64_t* clipped) {
  if (!keys.name && !keys.phase && !keys.rank) keys.name = true;
  // (name id, phase, rank), -1 for a key left out -> (count, total ns)
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::pair<int64_t, int64_t>> groups;
  for_each_window_range(m, t0, t1, hidden_ranks, clipped, [&](const prof::TraceRange& r, int64_t d) {
    auto& g = groups[{keys.name ? r.name_id : -1, keys.phase ? int32_t(r.phase) : -1, keys.rank ? r.rank : -1}];
    ++g.first;
    g.second += d;
  });
  std::vector<std::pair<std::tuple<int32_t, int32_t, int32_t>, std::pair<int64_t, int64_t>>> rows(groups.begin(),
                                                                                                  groups.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  TableData t;
  if (keys.name) t.headers << "name";
  if (keys.phase) t.headers << "phase";
  if (keys.rank) t.headers << "rank";
  t.headers << "count"
            << "total ms"
            << "mean ms";
  qint64 key = 0;
  for (const auto& [k, g] : rows) {
    const auto [name, phase, rank] = k;
    QVector<QVariant> shown, sort;
    if (keys.name) {
      const QString n =
          name >= 0 && size_t(name) < m.strings.size() ? to_qs(m.strings[size_t(name)]) : QStringLiteral("?");
      shown << n;
      sort << n;
    }
    if (keys.phase) {
      shown << QString::fromLatin1(phase_label(Phase(phase)));
      sort << QString::fromLatin1(phase_label(Phase(phase)));
    }
    if (keys.rank) {
      shown << rank;
      sort << rank;
    }
    const double mean = double(g.second) / double(g.first);
    shown << qint64(g.first) << ms_fine(double(g.second)) << ms_fine(mean);
    sort << qint64(g.first) << qint64(g.second) << mean;
    t.add(shown, sort, key++);
  }
  return t;
}

TableData straggler_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"rank", "collectives", "last arrivals", "last arrivals %", "wait caused ms", "wait suffered ms"};
  for (const auto& r : s.waiting.ranks) {
    const double pct = r.collectives > 0 ? 100.0 * double(r.last_arrivals) / double(r.collectives) : 0.0;
    t.add({r.rank, qint64(r.collectives), qint64(r.last_arrivals), QString::number(pct, 'f', 1),
           ms(double(r.wait_caused_ns)), ms(double(r.wait_suffered_ns))},
          {r.rank, qint64(r.collectives), qint64(r.last_arrivals), pct, qint64(r.wait_caused_ns),
           qint64(r.wait_suffered_ns)},
          r.rank);
  }
  return t;
}

int64_t straggler_instance(const prof::WaitingAnalysis& w, int32_t rank) {
  int64_t last = -1, waited = -1, best_wait = -1;
  for (size_t i = 0; i < w.instances.size(); ++i) {
    const auto& c = w.instances[i];
    if (c.last_arriver == rank) {
      if (last < 0 || c.skew_ns > w.instances[size_t(last)].skew_ns) last = int64_t(i);
      continue;
    }
    for (const auto& a : c.arrivals)
      if (a.rank == rank && c.last_arrival_ns - a.arrive_ns > best_wait) {
        best_wait = c.last_arrival_ns - a.arrive_ns;
        waited = int64_t(i);
      }
  }
  return last >= 0 ? last : waited;
}

TableData memory_phase_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"label", "rank", "max allocated", "max reserved", "max peak", "samples"};
  for (const auto& r : s.memory) {
    t.add({to_qs(r.label), r.rank, to_qs(format_bytes(r.max_allocated)), to_qs(format_bytes(r.max_reserved)),
           to_qs(format_bytes(r.max_peak)), qint64(r.samples)},
          {to_qs(r.label), r.rank, qint64(r.max_allocated), qint64(r.max_reserved), qint64(r.max_peak),
           qint64(r.samples)});
  }
  return t;
}

TableData names_table(const prof::Summary& s) {
  TableData t;
  t.headers = {"name", "kind", "count", "total ms", "max ms"};
  for (const auto& r : s.names) {
    t.add({to_qs(r.name), r.is_kernel ? QStringLiteral("kernel") : QStringLiteral("range"), qint64(r.count),
           ms(double(r.total_ns)), ms(double(r.max_ns))},
          {to_qs(r.name), r.is_kernel ? 1 : 0, qint64(r.count), double(r.total_ns), double(r.max_ns)});
  }
  t.sort_column = 3;  // the top names: longest total first
  t.sort_order = Qt::DescendingOrder;
  return t;
}

TableData compare_table(const prof::Comparison& c) {
  TableData t;
  t.headers = {"metric", "run A", "run B", "B - A", "B / A"};
  for (const auto& r : c.rows) {
    const QString label = QString::fromStdString(prof::compare_row_label(r));
    auto text = [&](bool has, double v) {
      return has ? QString::fromStdString(prof::compare_value_text(r, v)) : QStringLiteral("-");
    };
    const bool both = r.has_a && r.has_b;
    const QString ratio = r.has_ratio
                              ? QString::number(r.ratio, 'f', 3) + (r.flagged ? QStringLiteral(" *") : QString())
                              : QStringLiteral("-");
    // B / A sorts by how far it is from 1 either way (|ln B/A|: x2 and x0.5 alike), so the
    // largest changes come first; a row without a ratio sorts as -1, last (an invalid value
    // would sort first: QSortFilterProxyModel puts it above every number).
    const bool ratio_ok = r.has_ratio && r.ratio > 0 && std::isfinite(r.ratio);
    t.add({label, text(r.has_a, r.a), text(r.has_b, r.b), text(both, r.diff), ratio},
          {label, r.has_a ? QVariant(r.a) : QVariant(), r.has_b ? QVariant(r.b) : QVariant(),
           both ? QVariant(r.diff) : QVariant(), QVariant(ratio_ok ? std::fabs(std::log(r.ratio)) : -1.0)});
    t.differs.push_back(r.flagged || (r.has_a != r.has_b));
  }
  t.sort_column = 4;
  t.sort_order = Qt::DescendingOrder;
  return t;
}

// ---- head map ---------------------------------------------------------------------------------
int32_t trace_num_heads(const TraceModel& m) {
  if (m.num_heads > 0) return m.num_heads;
  int32_t h = 0;
  for (const auto& l : m.lanes) h = std::max(h, l.head_end);
  if (h == 0)
    for (const auto& r : m.ranges) h = std::max<int32_t>(h, r.head_end);
  return h;
}

std::vector<HeadMapRow> head_map_rows(const TraceModel& m) {
  const int32_t H = trace_num_heads(m);
  const int32_t P = std::max(1, m.sp_size);
  std::map<int32_t, int32_t> sp_rank_of;
  for (const auto& ri : m.ranks) sp_rank_of[ri.rank] = ri.sp_rank;
  auto sp_of = [&](int32_t rank) {
    auto it = sp_rank_of.find(rank);
    return it != sp_rank_of.end() ? it->second : rank % P;
  };
  bool have_head_lanes = false;
  for (const auto& l : m.lanes) have_head_lanes |= l.kind == prof::LaneKind::HeadRange;

  std::map<std::tuple<int32_t, int32_t, int32_t>, HeadMapRow> acc;  // (rank, hb, he)
  auto add = [&](const TraceRange& r) {
    if (r.is_kernel) return;
    if (r.phase != Phase::Attention && r.phase != Phase::A2ASeqToHead && r.phase != Phase::A2AHeadToSeq) return;
    auto& row = acc[{r.rank, r.head_begin, r.head_end}];
    row.rank = r.rank;
    row.head_begin = r.head_begin;
    row.head_end = r.head_end;
    ++row.ranges;
    const int64_t d = r.duration();
    if (r.phase == Phase::Attention)
      row.attention_ns += d;
    else if (r.phase == Phase::A2ASeqToHead)
      row.a2a_seq_to_head_ns += d;
    else
      row.a2a_head_to_seq_ns += d;
  };
  for (const auto& l : m.lanes) {
    if (have_head_lanes && l.kind != prof::LaneKind::HeadRange) continue;
    const int64_t end = std::min<int64_t>(l.first + l.count, int64_t(m.ranges.size()));
    for (int64_t i = l.first; i < end; ++i) {
      const TraceRange& r = m.ranges[size_t(i)];
      add(r);
    }
  }
  // Ranks that recorded nothing head-related still appear (ownership only).
  for (const auto& ri : m.ranks) {
    bool any = false;
    for (const auto& kv : acc) any |= std::get<0>(kv.first) == ri.rank;
    if (!any) acc[{ri.rank, -1, -1}] = HeadMapRow{ri.rank, 0, 0, 0, -1, -1, 0, 0, 0, 0, true};
  }
  std::vector<HeadMapRow> out;
  for (auto& kv : acc) {
    HeadMapRow row = kv.second;
    row.rank = std::get<0>(kv.first);
    row.sp_rank = sp_of(row.rank);
    row.owned_begin = H > 0 ? row.sp_rank * H / P : 0;
    row.owned_end = H > 0 ? (row.sp_rank + 1) * H / P : 0;
    row.inside_owned = row.head_begin < 0 || (row.head_begin >= row.owned_begin && row.head_end <= row.owned_end);
    out.push_back(row);
  }
  return out;
}

TableData head_map_table(const std::vector<HeadMapRow>& rows) {
  TableData t;
  t.headers = {"rank",         "sp rank",          "owns heads",       "measured heads",
               "attention ms", "a2a seq->head ms", "a2a head->seq ms", "ranges",
               "check"};
  for (const auto& r : rows) {
    const QString owned = r.owned_end > r.owned_begin ? QStringLiteral("%1-%2").arg(r.owned_begin).arg(r.owned_end - 1)
                                                      : QStringLiteral("?");
    const QString meas =
        r.head_begin >= 0 ? QStringLiteral("%1-%2").arg(r.head_begin).arg(r.head_end - 1) : QStringLiteral("all local");
    t.add({r.rank, r.sp_rank, owned, meas, ms(double(r.attention_ns)), ms(double(r.a2a_seq_to_head_ns)),
           ms(double(r.a2a_head_to_seq_ns)), qint64(r.ranges),
           r.inside_owned ? QStringLiteral("ok") : QStringLiteral("outside owned heads")},
          {r.rank, r.sp_rank, r.owned_begin, r.head_begin, double(r.attention_ns), double(r.a2a_seq_to_head_ns),
           double(r.a2a_head_to_seq_ns), qint64(r.ranges), r.inside_owned ? 1 : 0},
          r.rank);
  }
  return t;
}

// ---- inspection -------------------------------------------------------------------------------
TableData range_details_table(const TraceModel& m, int64_t range) {
  TableData t;
  t.headers = {"field", "value"};
  if (range < 0 || size_t(range) >= m.ranges.size()) return t;
  const TraceRange& r = m.ranges[size_t(range)];
  auto kv = [&](const QString& k, const QVariant& v) { t.add({k, v}); };
  kv("name", str_of(m, r.name_id));
  kv("phase", phase_label(r.phase));
  kv("direction", direction_label(r.dir));
  kv("rank", r.rank);
  if (r.lane >= 0 && size_t(r.lane) < m.lanes.size()) kv("lane", to_qs(m.lanes[size_t(r.lane)].name));
  kv("step", r.step);
  kv("layer", r.layer >= 0 ? QVariant(r.layer) : QVariant(QStringLiteral("-")));
  kv("heads", r.head_begin >= 0 ? QVariant(QStringLiteral("%1-%2").arg(r.head_begin).arg(r.head_end - 1))
                                : QVariant(QStringLiteral("all local")));
  if (r.chunk >= 0) kv("chunk", r.chunk);
  const prof::RangeExtra& x = m.extra(r);
  kv("bytes sent", x.bytes_sent ? to_qs(format_bytes(x.bytes_sent)) + QStringLiteral(" (%1)").arg(x.bytes_sent)
                                : QStringLiteral("0"));
  kv("bytes received", x.bytes_recv ? to_qs(format_bytes(x.bytes_recv)) + QStringLiteral(" (%1)").arg(x.bytes_recv)
                                    : QStringLiteral("0"));
  kv("duration", duration_qs(double(r.duration())));
  kv("start (from trace start)", duration_qs(double(r.start_ns - m.t_min)));
  kv("kind", r.is_kernel ? QStringLiteral("GPU kernel") : QStringLiteral("host range"));
  // A collective: every rank's arrival, the skew and each rank's wait (the straggler evidence).
  const CollectiveArrivals c = collective_arrivals(m, range);
  if (c.pg >= 0) {
    auto ns_row = [&](const QString& k, const QString& text, int64_t ns) { t.add({k, text}, {k, qint64(ns)}); };
    kv("collective", QObject::tr("process group %1, #%2: %3 of %4 ranks")
                         .arg(c.pg)
                         .arg(c.seq)
                         .arg(qint64(c.arrivals.size()))
                         .arg(c.group_ranks));
    ns_row(QStringLiteral("skew"), duration_qs(double(c.skew_ns)), c.skew_ns);
    kv("last arrival", QObject::tr("rank %1").arg(c.last_rank));
    for (const auto& a : c.arrivals) {
      ns_row(QObject::tr("rank %1 arrival").arg(a.rank),
             QObject::tr("+%1 after the first (%2 from the trace start)")
                 .arg(duration_qs(double(a.arrive_ns - c.first_ns)), duration_qs(double(a.arrive_ns - m.t_min))),
             a.arrive_ns - c.first_ns);
      ns_row(QObject::tr("rank %1 wait").arg(a.rank), duration_qs(double(a.wait_ns)), a.wait_ns);
    }
  }
  return t;
}

TableData range_kernels_table(const TraceModel& m, int64_t range, int limit) {
  TableData t;
  t.headers = {"kernel", "stream", "start", "duration"};
  if (range < 0 || size_t(range) >= m.ranges.size()) return t;
  const TraceRange& h = m.ranges[size_t(range)];
  if (h.is_kernel) return t;
  std::vector<int64_t> hits;
  // Correlated traces (CUPTI external ids): a kernel belongs to the range that launched it
  // (TraceRange::origin) or to one of that range's descendants; a head-lane copy stands for
  // its original. Otherwise (nsys exports, synthetic traces) match by attributes and time.
  bool correlated = false;
  for (const auto& l : m.lanes) {
    if (l.rank != h.rank || l.kind != prof::LaneKind::CudaStream) continue;
    const int64_t end = std::min<int64_t>(l.first + l.count, int64_t(m.ranges.size()));
    for (int64_t i = l.first; i < end && !correlated; ++i) correlated = m.ranges[size_t(i)].origin >= 0;
  }
  if (correlated) {
    const int64_t self = m.lanes[size_t(h.lane)].kind == prof::LaneKind::HeadRange && h.origin >= 0 ? h.origin : range;
    for (const auto& l : m.lanes) {
      if (l.rank != h.rank || l.kind != prof::LaneKind::CudaStream) continue;
      const int64_t end = std::min<int64_t>(l.first + l.count, int64_t(m.ranges.size()));
      for (int64_t i = l.first; i < end; ++i) {
        int64_t p = m.ranges[size_t(i)].origin;
        while (p >= 0 && p != self) p = m.ranges[size_t(p)].parent;
        if (p == self) hits.push_back(i);
      }
    }
  }
  for (const auto& l : m.lanes) {
    if (correlated) break;
    if (l.rank != h.rank || l.kind != prof::LaneKind::CudaStream) continue;
    const int64_t end = std::min<int64_t>(l.first + l.count, int64_t(m.ranges.size()));
    for (int64_t i = l.first; i < end; ++i) {
      const TraceRange& k = m.ranges[size_t(i)];
      if (!k.is_kernel || k.step != h.step || k.layer != h.layer || k.phase != h.phase || k.dir != h.dir ||
          k.chunk != h.chunk || k.head_begin != h.head_begin)
        continue;
      // Kernels of a range start after it starts (launch precedes execution).
      if (k.start_ns < h.start_ns) continue;
      hits.push_back(i);
    }
  }
  std::sort(hits.begin(), hits.end(),
            [&](int64_t a, int64_t b) { return m.ranges[size_t(a)].start_ns < m.ranges[size_t(b)].start_ns; });
  if (int64_t(hits.size()) > limit) hits.resize(size_t(limit));
  for (int64_t i : hits) {
    const TraceRange& k = m.ranges[size_t(i)];
    t.add({str_of(m, k.name_id), to_qs(m.lanes[size_t(k.lane)].name), duration_qs(double(k.start_ns - m.t_min)),
           duration_qs(double(k.duration()))},
          {str_of(m, k.name_id), k.lane, qint64(k.start_ns), qint64(k.duration())}, i);
  }
  return t;
}

TableData steps_table(const TraceModel& m, const std::vector<StepSpan>& steps) {
  TableData t;
  t.headers = {"step", "start", "wall", "loss", "tokens/s"};
  std::map<int64_t, const prof::StepInfo*> info;
  for (const auto& s : m.steps)
    if (!info.count(s.step) || s.rank == 0) info[s.step] = &s;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    auto it = info.find(s.step);
    const double loss = it != info.end() ? it->second->loss : 0;
    const double tps = it != info.end() ? it->second->tokens_per_s : 0;
    t.add({qint64(s.step), duration_qs(double(s.start_ns - m.t_min)), duration_qs(double(s.end_ns - s.start_ns)),
           QString::number(loss, 'f', 4), QString::number(tps, 'f', 0)},
          {qint64(s.step), qint64(s.start_ns), qint64(s.end_ns - s.start_ns), loss, tps}, qint64(i));
  }
  return t;
}

TableData search_table(const TraceModel& m, const QString& needle_in, int limit, int64_t* total) {
  TableData t;
  t.headers = {"name", "rank", "lane", "start", "duration", "phase"};
  const QString needle = needle_in.trimmed();
  if (total) *total = 0;
  if (needle.isEmpty()) return t;
  std::vector<uint8_t> hit(m.strings.size(), 0);
  for (size_t i = 0; i < m.strings.size(); ++i) hit[i] = to_qs(m.strings[i]).contains(needle, Qt::CaseInsensitive);
  std::vector<uint8_t> phase_hit(size_t(Phase::Count) + 1, 0);
  for (int p = 0; p < int(Phase::Count); ++p)
    phase_hit[size_t(p)] = QString(phase_label(Phase(p))).contains(needle, Qt::CaseInsensitive);
  std::vector<int64_t> found;
  int64_t n = 0;
  for (size_t i = 0; i < m.ranges.size(); ++i) {
    const auto& r = m.ranges[i];
    const bool ok =
        (r.name_id >= 0 && size_t(r.name_id) < hit.size() && hit[size_t(r.name_id)]) || phase_hit[size_t(r.phase)];
    if (!ok) continue;
    ++n;
    found.push_back(int64_t(i));
  }
  if (total) *total = n;
  // Only the first `limit` by start are shown: partial sort (a filter can match millions).
  const size_t keep = std::min(found.size(), size_t(std::max(0, limit)));
  std::partial_sort(found.begin(), found.begin() + std::ptrdiff_t(keep), found.end(), [&](int64_t a, int64_t b) {
    return std::tie(m.ranges[size_t(a)].start_ns, a) < std::tie(m.ranges[size_t(b)].start_ns, b);
  });
  found.resize(keep);
  for (int64_t i : found) {
    const auto& r = m.ranges[size_t(i)];
    t.add({str_of(m, r.name_id), r.rank,
           size_t(r.lane) < m.lanes.size() ? to_qs(m.lanes[size_t(r.lane)].name) : QString(),
           duration_qs(double(r.start_ns - m.t_min)), duration_qs(double(r.duration())), phase_label(r.phase)},
          {str_of(m, r.name_id), r.rank, r.lane, qint64(r.start_ns), qint64(r.duration()), int(r.phase)}, i);
  }
  return t;
}

QTableView* make_sorted_table(QAbstractItemModel* m, QWidget* parent) {
  auto* proxy = new QSortFilterProxyModel(parent);
  proxy->setSourceModel(m);
  proxy->setSortRole(TableModel::SortRole);
  auto* v = new QTableView(parent);
  v->setModel(proxy);
  v->setSortingEnabled(true);
  v->sortByColumn(0, Qt::AscendingOrder);
  v->setSelectionBehavior(QAbstractItemView::SelectRows);
  v->horizontalHeader()->setStretchLastSection(false);
  v->setTextElideMode(Qt::ElideMiddle);  // "model.layers.1…self_attn.q_proj": both ends tell (tooltip: all)
  v->verticalHeader()->setVisible(false);
  QObject::connect(m, &QAbstractItemModel::modelReset, v, [v] { fit_columns(v); });
  if (auto* tm = qobject_cast<TableModel*>(m))
    QObject::connect(tm, &TableModel::sortWanted, v, [v](int c, Qt::SortOrder o) { v->sortByColumn(c, o); });
  return v;
}

void fit_columns(QTableView* v, int max_px) {
  v->resizeColumnsToContents();
  const int n = v->model() ? v->model()->columnCount() : 0;
  for (int c = 0; c < n; ++c)
    if (v->columnWidth(c) > max_px) v->setColumnWidth(c, max_px);
}

}  // namespace ulysses::ui
