// The timeline's viewport: which time range is visible and the time<->pixel mapping.
// One small value type shared by the timeline and the memory view (same time axis).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ulysses::ui {

struct TimelineViewport {
  int64_t t0_ns = 0;       // time at pixel x = 0
  double ns_per_px = 1.0;  // > 0
  int width_px = 1;        // drawable width in pixels (>= 1)

  static constexpr double kMinNsPerPx = 0.01;  // 100 px per ns: deepest zoom
  // Widest zoom: any trace's whole extent (under 2^63 ns, the loaders' bound) fits in 2 px, so
  // "fit all" shows a far-off range beside the rest, whatever the width when it was asked (a
  // 1e12 ns/px cap would centre an empty 250 000 s window between them, and a fit at the widget's
  // first, small width would keep a clamped middle after the resize). Times from it saturate (sat_ns).
  static constexpr double kMaxNsPerPx = 4.6e18;

  // A time in ns from a double, saturated just inside +-2^62 (a wide view times its width
  // overflowed int64).
  static int64_t sat_ns(double t);

  int64_t t1_ns() const;  // time at the right edge
  double duration_ns() const { return ns_per_px * width_px; }
  double x_of(int64_t t_ns) const;  // pixel (may be outside [0, width))
  int64_t t_of(double x) const;     // time under pixel x (rounded to nearest ns)
  double px_of(int64_t dur_ns) const { return double(dur_ns) / ns_per_px; }

  // Shows [a, b) across the width (b <= a shows 1 ns). margin_frac adds room on both sides.
  void fit(int64_t a_ns, int64_t b_ns, double margin_frac = 0.0);
  // Zooms by `factor` (> 1 zooms in) keeping the time under pixel x fixed.
  void zoom_at(double x, double factor);
  void pan_px(double dx);            // positive dx moves the view to later times
  void set_width(int width_px_new);  // keeps t0 and ns_per_px
  // Keeps the view inside [t_min - margin, t_max + margin] where possible and the zoom
  // within [kMinNsPerPx, (t_max - t_min) * 2 / width].
  void clamp_to(int64_t t_min, int64_t t_max);

  bool operator==(const TimelineViewport& o) const {
    return t0_ns == o.t0_ns && ns_per_px == o.ns_per_px && width_px == o.width_px;
  }
  bool operator!=(const TimelineViewport& o) const { return !(*this == o); }
};

// The ruler's ticks over the times [from_ns, to_ns] (from the trace start) at ns_per_px: every
// 1, 2 or 5 x 10^k ns, labelled in one unit (ns, us, ms or s: the largest that the farther edge
// of the view reaches) with as many decimals as the interval needs, so that no two labels read
// the same at any zoom ("711.02 ms", "711.04 ms", not "711 ms" twice). Ticks are at least
// min_px apart and at least a label's width (char_px per character, plus a gap) apart.
struct RulerTick {
  double t_ns = 0;  // from the trace start
  std::string label;
};
std::vector<RulerTick> ruler_ticks(double from_ns, double to_ns, double ns_per_px, double min_px = 90,
                                   double char_px = 7);

}  // namespace ulysses::ui
