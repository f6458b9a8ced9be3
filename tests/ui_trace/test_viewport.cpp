// TimelineViewport: time<->pixel mapping, fit, zoom at cursor, pan, clamping.
#include <gtest/gtest.h>

#include "trace/timeline_viewport.hpp"

using ulysses::ui::TimelineViewport;

TEST(Viewport, MapsTimeToPixelAndBack) {
  TimelineViewport v;
  v.t0_ns = 1'000'000;
  v.ns_per_px = 250;
  v.width_px = 800;
  EXPECT_DOUBLE_EQ(v.x_of(1'000'000), 0.0);
  EXPECT_DOUBLE_EQ(v.x_of(1'000'000 + 250 * 400), 400.0);
  EXPECT_DOUBLE_EQ(v.x_of(999'750), -1.0);
  EXPECT_EQ(v.t1_ns(), 1'000'000 + 250 * 800);
  for (int x = -5; x < 900; x += 37) EXPECT_NEAR(v.x_of(v.t_of(x)), x, 1e-9) << x;
  EXPECT_DOUBLE_EQ(v.px_of(2500), 10.0);
}

TEST(Viewport, FitShowsRangeAcrossWidth) {
  TimelineViewport v;
  v.width_px = 1000;
  v.fit(5'000, 105'000);
  EXPECT_NEAR(v.x_of(5'000), 0.0, 1e-6);
  EXPECT_NEAR(v.x_of(105'000), 1000.0, 1e-6);
  v.fit(0, 100'000, 0.1);  // 10% margin each side
  EXPECT_NEAR(v.x_of(0), 1000.0 * 10'000 / 120'000, 0.6);
  EXPECT_NEAR(v.ns_per_px, 120.0, 1e-9);
}

TEST(Viewport, ZoomKeepsTimeUnderCursor) {
  TimelineViewport v;
  v.width_px = 1000;
  v.fit(0, 1'000'000);
  const int64_t under = v.t_of(300);
  v.zoom_at(300, 4.0);
  EXPECT_NEAR(v.ns_per_px, 250.0, 1e-9);
  EXPECT_NEAR(double(v.t_of(300)), double(under), 1.0);
  v.zoom_at(300, 0.25);
  EXPECT_NEAR(v.ns_per_px, 1000.0, 1e-9);
  EXPECT_NEAR(double(v.t_of(300)), double(under), 1.0);
  // zoom is limited
  for (int i = 0; i < 100; ++i) v.zoom_at(10, 10);
  EXPECT_DOUBLE_EQ(v.ns_per_px, TimelineViewport::kMinNsPerPx);
}

TEST(Viewport, PanMovesByPixels) {
  TimelineViewport v;
  v.width_px = 100;
  v.ns_per_px = 50;
  v.t0_ns = 0;
  v.pan_px(10);
  EXPECT_EQ(v.t0_ns, 500);
  v.pan_px(-30);
  EXPECT_EQ(v.t0_ns, -1000);
}

TEST(Viewport, ClampKeepsViewNearTrace) {
  TimelineViewport v;
  v.width_px = 100;
  v.ns_per_px = 1e9;  // far too zoomed out for a 1 ms trace
  v.t0_ns = -5'000'000'000;
  v.clamp_to(0, 1'000'000);
  EXPECT_LE(v.ns_per_px, 2'000'000.0 / 100 + 1e-9);
  EXPECT_LE(v.t0_ns, 1'000'000);
  EXPECT_GE(v.t1_ns(), 0);
  v.ns_per_px = 10;
  v.t0_ns = 50'000'000;  // far right of the trace
  v.clamp_to(0, 1'000'000);
  EXPECT_LE(v.t0_ns, 1'000'000);
}
