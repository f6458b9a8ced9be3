// Fuzzes the decoders of the caches kept beside a trace (profiler/summary_cache.hpp,
// profiler/trace_overview.hpp, profiler/rank_file_cache.hpp): their files can be anything
// (torn, foreign, crafted: the checksum only catches accidents). The first input byte picks
// the decoder (modulo 3: summary, overview, rank-file cache); the rest is the payload. A
// rank-file cache decodes into the model the loader builds from it (lanes, nesting, head
// lanes), which must be as sound as one built from SQLite rows: lanes partition the range
// table, names inside the string table, no negative duration, parents on the range's lane. Decoding may only throw
// std::runtime_error, a summary it returns must print as text, JSON and HTML without a crash or undefined behaviour,
// and an overview must be safe to index and draw: names inside the table, no negative duration, lanes' ranges inside
// the range table, counts positive and adding up to full_ranges. Seeds: fuzz/corpus/trace_caches
// (payloads of a small synthetic trace's summary and overview).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_util.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/rank_file_cache.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace prof = ulysses::prof;
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 3 == 2) {
      const prof::TraceModel m = prof::model_from_rank_file_cache(bytes);
      size_t in_lanes = 0;
      for (size_t li = 0; li < m.lanes.size(); ++li) {
        const auto& l = m.lanes[li];
        if (l.first < 0 || l.count < 0 || static_cast<size_t>(l.first + l.count) > m.ranges.size())
          fuzz::broken("lane outside the range table");
        in_lanes += static_cast<size_t>(l.count);
        for (int64_t k = l.first; k < l.first + l.count; ++k) {
          const auto& r = m.ranges[static_cast<size_t>(k)];
          if (r.lane != static_cast<int32_t>(li)) fuzz::broken("range not on its lane");
          if (r.parent >= static_cast<int64_t>(m.ranges.size()) ||
              (r.parent >= 0 && m.ranges[static_cast<size_t>(r.parent)].lane != r.lane))
            fuzz::broken("parent not on the range's lane");
        }
      }
      if (in_lanes != m.ranges.size()) fuzz::broken("lanes do not partition the ranges");
      for (const auto& r : m.ranges) {
        if (r.name_id < 0 || static_cast<size_t>(r.name_id) >= m.strings.size())
          fuzz::broken("range name out of the table");
        if (r.end_ns < r.start_ns) fuzz::broken("negative duration");
      }
      try {  // what `ulysses-trace summary` prints from such a model
        (void)prof::summary_to_text(m, prof::analyze(m));
      } catch (const std::exception&) {
      }
    } else if (data[0] % 3 == 1) {
      const prof::TraceOverview o = prof::decode_overview(bytes);
      if (o.counts.size() != o.model.ranges.size()) fuzz::broken("one count per range");
      int64_t sum = 0;
      for (int64_t c : o.counts) {
        if (c < 1) fuzz::broken("a count below 1");
        sum += c;
      }
      if (sum != o.full_ranges) fuzz::broken("counts do not add up to full_ranges");
      for (const auto& r : o.model.ranges) {
        if (r.name_id < 0 || static_cast<size_t>(r.name_id) >= o.model.strings.size())
          fuzz::broken("range name out of the table");
        if (r.end_ns < r.start_ns) fuzz::broken("negative duration");
        if (r.start_ns < o.model.t_min || r.end_ns > o.model.t_max) fuzz::broken("range outside [t_min, t_max]");
      }
      for (const auto& l : o.model.lanes)
        if (l.first < 0 || l.count < 0 || static_cast<size_t>(l.first + l.count) > o.model.ranges.size())
          fuzz::broken("lane outside the range table");
      // Decoding what it encodes gives the same overview (the input itself may use longer
      // varints than the encoder writes).
      const std::string again = prof::encode_overview(o);
      if (prof::encode_overview(prof::decode_overview(again)) != again) fuzz::broken("overview does not round-trip");
    } else {
      prof::TraceModel m;
      prof::Summary s;
      prof::decode_summary(bytes, &m, &s);
      // What `ulysses-trace summary` / `report` then print from it: any value, no crash (a
      // std::exception, e.g. JSON's on invalid UTF-8, ends as the CLI's exit 1).
      try {
        (void)prof::summary_to_text(m, s);
        (void)prof::summary_to_json(m, s).dump();
        (void)prof::summary_to_html(m, s, "fuzz");
      } catch (const std::exception&) {
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
