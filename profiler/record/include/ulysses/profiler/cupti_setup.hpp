// What the CUPTI source asks of CUPTI, decided from CUPTI's version in one place (no CUPTI
// header here: the CUPTI source in src/cupti/ and the tests' fake source both follow it).
//   - record versions: which CUpti_ActivityKernelN / MemcpyN / MemsetN layout the decoder reads
//     for the CUPTI_API_VERSION it is compiled against (ULYSSES_CUPTI_*_RECORD, also usable in
//     #if, so the decoder names only structs its header has);
//   - setup: system thread ids (CUPTI's threadId = gettid, as the host ranges' rows), RUNTIME
//     and DRIVER API kinds (a launch through the driver API, cuLaunchKernel as NCCL and Triton
//     use, has no runtime record, and without an API record CUPTI emits no external
//     correlation for it), and the timestamp callback only where CUPTI keeps kernel times with
//     it (12.6 Update 2 through 13.0 may report zero kernel timestamps when one is registered;
//     13.1 fixes it): elsewhere CUPTI's clock is calibrated against the host's at every step (GpuClock).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// CUPTI_API_VERSION: 19 = CUDA 12.0, 20 = 12.2, ..., 24 = 12.6, 26 = 12.8, 27 = 12.9,
// 28 = 12.9 Update 1; from CUDA 13 xxyyzz (130000 = 13.0, 130001 = 13.0 Update 1, 130100 = 13.1).
// 0: not supported (CUPTI before CUDA 12.0).
#define ULYSSES_CUPTI_KERNEL_RECORD(api) ((api) >= 130000 ? 10 : (api) >= 19 ? 9 : 0)
#define ULYSSES_CUPTI_MEMCPY_RECORD(api) ((api) >= 26 ? 6 : (api) >= 19 ? 5 : 0)
#define ULYSSES_CUPTI_MEMSET_RECORD(api) ((api) >= 19 ? 4 : 0)

namespace ulysses::prof {

struct CuptiRecordVersions {
  int kernel = 0, memcpy = 0, memset = 0;
};
constexpr CuptiRecordVersions cupti_record_versions(uint32_t api) {
  return {ULYSSES_CUPTI_KERNEL_RECORD(api), ULYSSES_CUPTI_MEMCPY_RECORD(api), ULYSSES_CUPTI_MEMSET_RECORD(api)};
}

// First CUPTI API versions with and after the zero-timestamp problem of the timestamp callback.
constexpr uint32_t kCuptiZeroTimestampsFrom = 24;       // 12.6 (its Update 2: same API version)
constexpr uint32_t kCuptiZeroTimestampsFixed = 130100;  // 13.1

struct CuptiSetup {
  bool system_thread_ids = true;    // cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
  bool runtime_api = true;          // CUPTI_ACTIVITY_KIND_RUNTIME
  bool driver_api = true;           // CUPTI_ACTIVITY_KIND_DRIVER
  bool timestamp_callback = false;  // cuptiActivityRegisterTimestampCallback(Tracer::now_ns)
};

// The setup for the CUPTI library loaded at run time (cuptiGetVersion; 0 when unknown).
constexpr CuptiSetup cupti_setup(uint32_t runtime_api) {
  CuptiSetup s;
  s.timestamp_callback =
      runtime_api >= kCuptiZeroTimestampsFixed || (runtime_api > 0 && runtime_api < kCuptiZeroTimestampsFrom);
  return s;
}

// CUPTI timestamps -> the host ranges' clock (Tracer::now_ns). With the timestamp callback
// CUPTI reports that clock itself (no point: offset 0); without it the offset host - CUPTI is
// measured as the midpoint of two host reads around one CUPTI read, at the start and again at
// every step (the Tracer's begin_step calls GpuActivitySource::recalibrate), because the GPU's
// clock drifts against the host's (tens of ppm: a millisecond an hour). A timestamp between two
// points takes the offset interpolated linearly between them, so a record delivered steps after
// it ran still gets the offset of when it ran; before the first point the first offset, after
// the last the last. A zero CUPTI time stays 0 (no time).
struct GpuClock {
  struct Point {
    uint64_t cupti = 0;
    int64_t offset = 0;  // host - CUPTI
  };
  std::vector<Point> points;                  // by CUPTI time; at most kMaxPoints (the newest)
  static constexpr size_t kMaxPoints = 1024;  // records are delivered within a few steps

  int64_t to_host(uint64_t t) const {
    if (t == 0) return 0;
    return static_cast<int64_t>(t) + offset_at(t);
  }
  int64_t offset_at(uint64_t t) const {
    if (points.empty()) return 0;
    const auto it =
        std::upper_bound(points.begin(), points.end(), t, [](uint64_t v, const Point& p) { return v < p.cupti; });
    if (it == points.begin()) return it->offset;
    if (it == points.end()) return points.back().offset;
    const Point& a = *(it - 1);
    const Point& b = *it;
    const double f = static_cast<double>(t - a.cupti) / static_cast<double>(b.cupti - a.cupti);
    return a.offset + static_cast<int64_t>(std::llround(f * static_cast<double>(b.offset - a.offset)));
  }
  // Adds a point measured now (a CUPTI time not after the last point's is ignored).
  template <class HostNow, class CuptiNow>
  void recalibrate(HostNow host_now, CuptiNow cupti_now) {
    const int64_t h0 = host_now();
    const uint64_t g = cupti_now();
    const int64_t h1 = host_now();
    if (!points.empty() && g <= points.back().cupti) return;
    points.push_back(Point{g, (h0 + (h1 - h0) / 2) - static_cast<int64_t>(g)});
    if (points.size() > kMaxPoints) points.erase(points.begin());
  }
  template <class HostNow, class CuptiNow>
  static GpuClock calibrate(HostNow host_now, CuptiNow cupti_now) {
    GpuClock c;
    c.recalibrate(host_now, cupti_now);
    return c;
  }
};

}  // namespace ulysses::prof
