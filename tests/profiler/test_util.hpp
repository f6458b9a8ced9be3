// Helpers shared by the profiler tests: temp dirs, the test data library's Tracer recordings
// (testdata/recording.hpp) in namespace ut, and a builder for hand-made TraceModels.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ulysses/profiler/trace_model.hpp"
#include "ulysses/profiler/tracer.hpp"

#include "testdata/recording.hpp"

namespace ut {

namespace prof = ulysses::prof;
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ulysses-prof-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Recordings through the real Tracer (Synth, options_for, record_step, record_run) live in
// the test data library, testdata/recording.hpp.
using ulysses::testdata::options_for;
using ulysses::testdata::record_run;
using ulysses::testdata::record_step;
using ulysses::testdata::spin_ns;
using ulysses::testdata::Synth;

// A hand-made range with the fields of its extra record inline; make_model files them in
// TraceModel::ranges.extras() (a record only when one differs from its default, as the readers do).
struct SpecRange : prof::TraceRange {
  int64_t bytes_sent = 0, bytes_recv = 0, external_id = 0;
  uint32_t correlation = 0;
  int32_t pg = -1, seq = -1;
  SpecRange() = default;
  SpecRange(const prof::TraceRange& r) : prof::TraceRange(r) {}  // NOLINT(google-explicit-constructor)
  prof::RangeExtra extra_fields() const {
    prof::RangeExtra x;
    x.bytes_sent = bytes_sent, x.bytes_recv = bytes_recv, x.external_id = external_id;
    x.correlation = correlation, x.pg = pg, x.seq = seq;
    return x;
  }
};

// Hand-built model: lanes given with ranges sorted by start (end desc on ties); parent and
// depth are computed here with a stack.
struct LaneSpec {
  int32_t rank = 0;
  prof::LaneKind kind = prof::LaneKind::HostThread;
  std::string name = "main";
  std::vector<SpecRange> ranges;
};

inline SpecRange R(int64_t s, int64_t e, prof::Phase p, int32_t step = 0, int32_t layer = -1) {
  SpecRange r;
  r.start_ns = s;
  r.end_ns = e;
  r.phase = p;
  r.step = step;
  r.layer = static_cast<int16_t>(layer);
  return r;
}

inline prof::TraceModel make_model(const std::vector<LaneSpec>& lanes) {
  prof::TraceModel m;
  for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p)
    m.strings.push_back(prof::phase_name(static_cast<prof::Phase>(p)));
  for (const auto& ls : lanes) {
    prof::Lane l;
    l.rank = ls.rank;
    l.kind = ls.kind;
    l.name = ls.name;
    l.first = static_cast<int64_t>(m.ranges.size());
    std::vector<int32_t> stack;
    for (const SpecRange& spec : ls.ranges) {
      prof::TraceRange r = spec;
      r.extra = -1;
      const prof::RangeExtra x = spec.extra_fields();
      if (!x.empty()) m.extra_for(r) = x;
      while (!stack.empty() && m.ranges[static_cast<size_t>(stack.back())].end_ns <= r.start_ns) stack.pop_back();
      r.rank = ls.rank;
      r.lane = static_cast<int32_t>(m.lanes.size());
      r.parent = stack.empty() ? -1 : stack.back();
      r.depth = static_cast<uint8_t>(stack.size());
      if (!r.is_kernel) r.name_id = static_cast<int32_t>(r.phase);
      stack.push_back(static_cast<int32_t>(m.ranges.size()));
      m.ranges.push_back(r);
    }
    l.count = static_cast<int64_t>(m.ranges.size()) - l.first;
    m.lanes.push_back(l);
  }
  return m;
}

inline void add_step(prof::TraceModel& m, int32_t rank, int64_t step, int64_t s, int64_t e) {
  prof::StepInfo si;
  si.rank = rank;
  si.step = step;
  si.start_ns = s;
  si.end_ns = e;
  m.steps.push_back(si);
}

}  // namespace ut
