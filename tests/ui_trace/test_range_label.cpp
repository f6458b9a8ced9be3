// Timeline labels of ZeRO stage 3's rows (ui/trace/range_label): named from each range's own
// layer, chunk and bytes, on a hand-built trace; other rows keep the range's name.
#include <gtest/gtest.h>

#include "trace/range_label.hpp"

using namespace ulysses;

TEST(RangeLabel, ZeroRowsNameTheUnitAndBytesOtherRowsTheirName) {
  prof::TraceModel m;
  m.strings = {"grad_allreduce", "attention"};
  const char* lanes[] = {"main", "zero gather", "zero reduce-scatter", "zero gather #2"};
  for (const char* n : lanes) {
    prof::Lane l;
    l.name = n;
    m.lanes.push_back(l);
  }
  auto add = [&](int32_t lane, int32_t name, int16_t layer, int16_t chunk, int64_t bytes) {
    prof::TraceRange r;
    r.lane = lane;
    r.name_id = name;
    r.layer = layer;
    r.chunk = chunk;
    r.phase = name == 0 ? prof::Phase::GradAllReduce : prof::Phase::Attention;
    if (bytes) m.extra_for(r).bytes_sent = bytes;
    m.ranges.push_back(r);
    return int64_t(m.ranges.size()) - 1;
  };
  const int64_t attn = add(0, 1, 3, -1, 0);
  const int64_t allreduce = add(0, 0, -1, -1, 4096);  // stage 0's all-reduce: not a ZeRO row
  const int64_t demand = add(1, 0, 3, 0, 3 * 9248 * 4);
  const int64_t prefetch = add(3, 0, 4, 1, 3 * 9248 * 4);
  const int64_t head = add(1, 0, -1, 0, 1024);
  const int64_t rs = add(2, 0, 2, -1, 3 * 9248 * 4);
  EXPECT_EQ(ui::timeline_range_label(m, attn), "attention");
  EXPECT_EQ(ui::timeline_range_label(m, allreduce), "grad_allreduce");
  EXPECT_EQ(ui::timeline_range_label(m, demand), "gather L3 · 108 KiB");  // 110976 B
  EXPECT_EQ(ui::timeline_range_label(m, prefetch), "prefetch L4 · 108 KiB");
  EXPECT_EQ(ui::timeline_range_label(m, head), "gather embed/head · 1.00 KiB");
  EXPECT_EQ(ui::timeline_range_label(m, rs), "reduce-scatter L2 · 108 KiB");
  EXPECT_EQ(ui::timeline_range_label(m, 99), "");
}
