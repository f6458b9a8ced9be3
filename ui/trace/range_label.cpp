// Timeline labels (see range_label.hpp).
#include "range_label.hpp"

#include "ulysses/common/units.hpp"

namespace ulysses::ui {

namespace {
bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
}  // namespace

std::string timeline_range_label(const prof::TraceModel& m, int64_t range) {
  if (range < 0 || range >= static_cast<int64_t>(m.ranges.size())) return {};
  const prof::TraceRange r = m.ranges[static_cast<size_t>(range)];
  const std::string name = r.name_id >= 0 && static_cast<size_t>(r.name_id) < m.strings.size()
                               ? m.strings[size_t(r.name_id)]
                               : std::string();
  if (r.is_kernel || r.lane < 0 || static_cast<size_t>(r.lane) >= m.lanes.size()) return name;
  const std::string& lane = m.lanes[static_cast<size_t>(r.lane)].name;
  const bool gather = starts_with(lane, "zero gather"), reduce = starts_with(lane, "zero reduce-scatter");
  if (!gather && !reduce) return name;
  std::string s = reduce ? "reduce-scatter " : r.chunk == 1 ? "prefetch " : "gather ";
  s += r.layer >= 0 ? "L" + std::to_string(r.layer) : std::string("embed/head");
  const int64_t bytes = m.extra(r).bytes_sent;
  if (bytes > 0) s += " · " + ulysses::format_bytes(double(bytes));
  return s;
}

}  // namespace ulysses::ui
