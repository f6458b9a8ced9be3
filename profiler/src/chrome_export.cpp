// Chrome trace JSON writer, streamed (no DOM) so multi-million-range traces export quickly.
#include "ulysses/profiler/chrome_export.hpp"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <map>
#include <set>
#include <vector>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ulysses::prof {

namespace {
std::string quote(const std::string& s) { return nlohmann::json(s).dump(); }

// ns offset -> microseconds with 3 decimals, exact for integer ns.
void put_us(std::string& out, int64_t ns) {
  char buf[32];
  bool neg = ns < 0;
  uint64_t a = static_cast<uint64_t>(neg ? -ns : ns);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, neg ? "-" : "", a / 1000, a % 1000);
  out += buf;
}

const char* kind_name(LaneKind k) {
  switch (k) {
    case LaneKind::HostThread: return "thread";
    case LaneKind::Comm: return "comm";
    case LaneKind::HeadRange: return "heads";
    case LaneKind::CudaStream: return "stream";
  }
  return "thread";
}
}  // namespace

void write_chrome_trace(const TraceModel& m, std::ostream& os, const ChromeExportOptions& o) {
  std::set<int32_t> ranks;
  for (const auto& r : m.ranks) ranks.insert(r.rank);
  for (const auto& l : m.lanes) ranks.insert(l.rank);
  const int64_t base = m.t_min;
  std::string out;
  out.reserve(1 << 20);
  out += "{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ns\",\n";
  out += "\"baseTimeNanoseconds\": " + std::to_string(base) + ",\n";
  out += "\"distributedInfo\": {\"backend\": \"" + std::string(m.from_nsys ? "nccl" : "ulysses") +
         "\", \"rank\": " + std::to_string(o.rank >= 0 ? o.rank : 0) +
         ", \"world_size\": " + std::to_string(ranks.size()) + "},\n";
  out += "\"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  auto flush = [&] {
    if (out.size() > (1 << 20)) {
      os.write(out.data(), static_cast<std::streamsize>(out.size()));
      out.clear();
    }
  };
  // Metadata: process per rank, thread per lane (tid = lane index within the rank).
  std::map<int32_t, int> next_tid;
  std::vector<int> lane_tid(m.lanes.size(), 0);
  for (size_t li = 0; li < m.lanes.size(); ++li) lane_tid[li] = next_tid[m.lanes[li].rank]++;
  for (int32_t r : ranks) {
    if (o.rank >= 0 && r != o.rank) continue;
    sep();
    out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(r) +
           ", \"tid\": 0, \"args\": {\"name\": \"rank " + std::to_string(r) + "\"}}";
    sep();
    out += "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + std::to_string(r) +
           ", \"tid\": 0, \"args\": {\"sort_index\": " + std::to_string(r) + "}}";
  }
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const Lane& l = m.lanes[li];
    if ((o.rank >= 0 && l.rank != o.rank) || (!o.head_lanes && l.kind == LaneKind::HeadRange)) continue;
    std::string pid = std::to_string(l.rank), tid = std::to_string(lane_tid[li]);
    sep();
    out += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + tid +
           ", \"args\": {\"name\": " + quote(l.name) + "}}";
    sep();
    out += "{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid + ", \"tid\": " + tid +
           ", \"args\": {\"sort_index\": " + tid + "}}";
  }
  std::vector<std::string> names(m.strings.size());
  for (size_t i = 0; i < m.strings.size(); ++i) names[i] = quote(m.strings[i]);
  for (size_t li = 0; li < m.lanes.size(); ++li) {
    const Lane& l = m.lanes[li];
    if ((o.rank >= 0 && l.rank != o.rank) || (!o.head_lanes && l.kind == LaneKind::HeadRange)) continue;
    std::string head = "{\"ph\": \"X\", \"pid\": " + std::to_string(l.rank) + ", \"tid\": " +
                       std::to_string(lane_tid[li]) + ", \"cat\": \"";
    for (int64_t k = 0; k < l.count; ++k) {
      const TraceRange& r = m.ranges[static_cast<size_t>(l.first + k)];
      sep();
      out += head;
      out += r.is_kernel ? "kernel" : (phase_is_comm(r.phase) ? "comm" : kind_name(l.kind));
      out += "\", \"name\": ";
      out += static_cast<size_t>(r.name_id) < names.size() ? names[static_cast<size_t>(r.name_id)] : "\"?\"";
      out += ", \"ts\": ";
      put_us(out, r.start_ns - base);
      out += ", \"dur\": ";
      put_us(out, r.end_ns - r.start_ns);
      out += ", \"args\": {";
      bool a = false;
      auto arg = [&](const char* k2, int64_t v) {
        if (a) out += ", ";
        a = true;
        out += "\"";
        out += k2;
        out += "\": ";
        out += std::to_string(v);
      };
      if (r.step >= 0) arg("step", r.step);
      if (r.layer >= 0) arg("layer", r.layer);
      if (r.dir != Direction::None) {
        if (a) out += ", ";
        a = true;
        out += "\"direction\": \"";
        out += direction_name(r.dir);
        out += "\"";
      }
      if (r.head_begin >= 0) {
        arg("head_begin", r.head_begin);
        arg("head_end", r.head_end);
      }
      if (r.chunk >= 0) arg("chunk", r.chunk);
      if (r.bytes_sent) arg(r.is_kernel ? "bytes" : "bytes_sent", r.bytes_sent);
      if (r.bytes_recv) arg("bytes_recv", r.bytes_recv);
      out += "}}";
      flush();
    }
  }
  out += "\n]\n}\n";
  os.write(out.data(), static_cast<std::streamsize>(out.size()));
}

void export_chrome_trace(const TraceModel& m, const std::string& path, const ChromeExportOptions& o) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write '" + path + "' (does its directory exist?)");
  write_chrome_trace(m, f, o);
  f.flush();
  if (!f) throw std::runtime_error("failed writing '" + path + "' (disk full?)");
}

}  // namespace ulysses::prof
