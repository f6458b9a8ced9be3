// Time<->pixel mapping of the timeline viewport.
#include "trace/timeline_viewport.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ulysses::ui {

int64_t TimelineViewport::sat_ns(double t) {
  // Just inside +-2^62, the loaders' bound on every time: a view time minus a trace time
  // (t0_ns - t_min, as the ruler and the memory view compute) then never overflows.
  constexpr double kLimit = 4.6e18;
  if (!(t > -kLimit)) return -static_cast<int64_t>(kLimit);
  if (t > kLimit) return static_cast<int64_t>(kLimit);
  return std::llround(t);
}

int64_t TimelineViewport::t1_ns() const { return sat_ns(double(t0_ns) + ns_per_px * width_px); }

double TimelineViewport::x_of(int64_t t_ns) const { return double(t_ns - t0_ns) / ns_per_px; }

int64_t TimelineViewport::t_of(double x) const { return sat_ns(double(t0_ns) + x * ns_per_px); }

void TimelineViewport::fit(int64_t a_ns, int64_t b_ns, double margin_frac) {
  if (width_px < 1) width_px = 1;
  double span = std::max(double(b_ns) - double(a_ns), 1.0);
  double margin = span * std::max(0.0, margin_frac);
  ns_per_px = std::clamp((span + 2 * margin) / width_px, kMinNsPerPx, kMaxNsPerPx);
  // Centre the range when the zoom limit made it narrower than the width.
  double centre = double(a_ns) + span / 2;
  t0_ns = sat_ns(centre - ns_per_px * width_px / 2);
}

void TimelineViewport::zoom_at(double x, double factor) {
  if (!(factor > 0)) return;
  double t = double(t0_ns) + x * ns_per_px;
  ns_per_px = std::clamp(ns_per_px / factor, kMinNsPerPx, kMaxNsPerPx);
  t0_ns = sat_ns(t - x * ns_per_px);
}

void TimelineViewport::pan_px(double dx) { t0_ns = sat_ns(double(t0_ns) + dx * ns_per_px); }

void TimelineViewport::set_width(int w) { width_px = std::max(1, w); }

void TimelineViewport::clamp_to(int64_t t_min, int64_t t_max) {
  if (t_max <= t_min) t_max = t_min + 1;
  double span = double(t_max) - double(t_min);
  double max_npp = std::max(kMinNsPerPx, span * 2 / std::max(1, width_px));
  ns_per_px = std::clamp(ns_per_px, kMinNsPerPx, max_npp);
  double view = ns_per_px * width_px;
  double margin = view / 2;  // allow scrolling half a screen past either end
  double lo = double(t_min) - margin;
  double hi = double(t_max) + margin - view;
  if (hi < lo) {
    t0_ns = sat_ns((double(t_min) + double(t_max)) / 2 - view / 2);
  } else {
    t0_ns = sat_ns(std::clamp(double(t0_ns), lo, hi));
  }
}

namespace {
// The next interval of the 1, 2, 5 x 10^k series after `t`.
double next_125(double t) {
  const double p = std::pow(10.0, std::floor(std::log10(t) + 1e-9));
  const double m = t / p;
  return m < 1.5 ? 2 * p : m < 3.5 ? 5 * p : 10 * p;
}
}  // namespace

std::vector<RulerTick> ruler_ticks(double from_ns, double to_ns, double ns_per_px, double min_px, double char_px) {
  std::vector<RulerTick> out;
  if (!(ns_per_px > 0) || !std::isfinite(from_ns) || !std::isfinite(to_ns) || to_ns < from_ns) return out;
  // One unit for the whole ruler: the largest that the farther edge reaches.
  const double far = std::max(std::fabs(from_ns), std::fabs(to_ns));
  static const struct {
    double ns;
    const char* name;
  } kUnits[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}, {1, "ns"}};
  const auto* unit = &kUnits[3];
  for (const auto& u : kUnits)
    if (far >= u.ns) {
      unit = &u;
      break;
    }
  double tick = 1;  // the smallest 1/2/5 x 10^k ns at least min_px wide
  while (tick < min_px * ns_per_px) tick = next_125(tick);
  for (int tries = 0; tries < 64; ++tries, tick = next_125(tick)) {
    // Digits after the point that tell multiples of `tick` apart in `unit`.
    const int decimals = std::clamp(static_cast<int>(std::ceil(std::log10(unit->ns / tick) - 1e-9)), 0, 12);
    out.clear();
    size_t widest = 0;
    const double first = std::ceil(from_ns / tick);
    for (double k = first; out.size() < 4096; k += 1) {
      const double t = k * tick;
      if (t > to_ns) break;
      char buf[64];
      const double v = t / unit->ns;
      std::snprintf(buf, sizeof buf, "%.*f %s", decimals, std::fabs(v) < 0.5 * tick / unit->ns ? 0.0 : v, unit->name);
      out.push_back({t, buf});
      widest = std::max(widest, out.back().label.size());
    }
    if (tick / ns_per_px >= double(widest) * char_px + 8) break;  // the labels fit between the ticks
  }
  return out;
}

}  // namespace ulysses::ui
