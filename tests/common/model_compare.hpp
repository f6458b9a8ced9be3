// expect_same_model: two trace models are equal in every field a loader sets (strings, run
// shell, ranks, lanes, every field of every range, steps, memory samples, runtime calls,
// clocks, documents per shard), reporting the first few differing ranges. Shared by the tests that hold one loader
// against another (parallel vs legacy, rank-file caches vs SQLite rows, format 4 vs format 3).
// Header-only, gtest and the profiler's model only.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <tuple>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::test {

inline void expect_same_model(const ulysses::prof::TraceModel& a, const ulysses::prof::TraceModel& b) {
  ASSERT_EQ(a.strings, b.strings);
  EXPECT_EQ(a.config_json, b.config_json);
  EXPECT_EQ(a.sp_size, b.sp_size);
  EXPECT_EQ(a.dp_size, b.dp_size);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.t_min, b.t_min);
  EXPECT_EQ(a.t_max, b.t_max);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    EXPECT_EQ(a.ranks[i].rank, b.ranks[i].rank);
    EXPECT_EQ(a.ranks[i].pid, b.ranks[i].pid);
    EXPECT_EQ(a.ranks[i].hostname, b.ranks[i].hostname);
  }
  ASSERT_EQ(a.lanes.size(), b.lanes.size());
  for (size_t i = 0; i < a.lanes.size(); ++i) {
    const auto &x = a.lanes[i], &y = b.lanes[i];
    EXPECT_EQ(std::tie(x.rank, x.kind, x.name, x.head_begin, x.head_end, x.tid_or_stream, x.first, x.count),
              std::tie(y.rank, y.kind, y.name, y.head_begin, y.head_end, y.tid_or_stream, y.first, y.count))
        << "lane " << i;
  }
  ASSERT_EQ(a.ranges.size(), b.ranges.size());
  int bad = 0;
  for (size_t i = 0; i < a.ranges.size() && bad < 5; ++i) {
    const auto &x = a.ranges[i], &y = b.ranges[i];
    // Extra records compare by value (where a loader put them in TraceModel::ranges.extras() may differ).
    const auto &xe = a.extra(x), &ye = b.extra(y);
    const bool same = std::tie(x.start_ns, x.end_ns, x.rank, x.lane, x.name_id, x.step, x.layer, x.head_begin,
                               x.head_end, x.chunk, xe.bytes_sent, xe.bytes_recv, x.phase, x.dir, x.depth, x.is_kernel,
                               x.parent, xe.correlation, x.origin, xe.external_id, xe.pg, xe.seq) ==
                          std::tie(y.start_ns, y.end_ns, y.rank, y.lane, y.name_id, y.step, y.layer, y.head_begin,
                                   y.head_end, y.chunk, ye.bytes_sent, ye.bytes_recv, y.phase, y.dir, y.depth,
                                   y.is_kernel, y.parent, ye.correlation, y.origin, ye.external_id, ye.pg, ye.seq) &&
                      (x.extra < 0) == (y.extra < 0);
    if (!same) {
      ++bad;
      ADD_FAILURE() << "range " << i << " differs: start " << x.start_ns << " vs " << y.start_ns << ", lane " << x.lane
                    << " vs " << y.lane << ", name " << x.name_id << " vs " << y.name_id << ", parent " << x.parent
                    << " vs " << y.parent;
    }
  }
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i)
    EXPECT_EQ(std::tie(a.steps[i].rank, a.steps[i].step, a.steps[i].start_ns, a.steps[i].end_ns, a.steps[i].loss),
              std::tie(b.steps[i].rank, b.steps[i].step, b.steps[i].start_ns, b.steps[i].end_ns, b.steps[i].loss));
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (size_t i = 0; i < a.memory.size(); ++i)
    EXPECT_EQ(std::tie(a.memory[i].rank, a.memory[i].t_ns, a.memory[i].label_id, a.memory[i].allocated),
              std::tie(b.memory[i].rank, b.memory[i].t_ns, b.memory[i].label_id, b.memory[i].allocated));
  ASSERT_EQ(a.runtime.size(), b.runtime.size());
  for (size_t i = 0; i < a.runtime.size(); ++i) {
    const auto &x = a.runtime[i], &y = b.runtime[i];
    EXPECT_EQ(std::tie(x.rank, x.tid, x.start_ns, x.end_ns, x.correlation, x.external_id, x.name_id),
              std::tie(y.rank, y.tid, y.start_ns, y.end_ns, y.correlation, y.external_id, y.name_id))
        << "runtime call " << i;
  }
  ASSERT_EQ(a.clocks.size(), b.clocks.size());
  for (size_t i = 0; i < a.clocks.size(); ++i)
    EXPECT_EQ(
        std::tie(a.clocks[i].rank, a.clocks[i].start_offset_ns, a.clocks[i].close_offset_ns, a.clocks[i].applied),
        std::tie(b.clocks[i].rank, b.clocks[i].start_offset_ns, b.clocks[i].close_offset_ns, b.clocks[i].applied));
  ASSERT_EQ(a.documents.size(), b.documents.size());
  for (size_t i = 0; i < a.documents.size(); ++i) {
    const auto &x = a.documents[i], &y = b.documents[i];
    EXPECT_EQ(std::tie(x.rank, x.piece, x.step, x.sequence, x.packed, x.shard_begin, x.shard_end, x.document,
                       x.doc_tokens, x.doc_offset, x.begin, x.end),
              std::tie(y.rank, y.piece, y.step, y.sequence, y.packed, y.shard_begin, y.shard_end, y.document,
                       y.doc_tokens, y.doc_offset, y.begin, y.end))
        << "documents row " << i;
  }
}

}  // namespace ulysses::test
