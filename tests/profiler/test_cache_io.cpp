// The one codec of the timed tables (profiler/load/include/ulysses/profiler/cache_io.hpp: put_timed_tables /
// get_timed_tables), shared by the rank-file cache and the summary cache: a model with every
// timed table filled with extreme values (INT64_MIN/MAX times, negative and 32-bit-limit ids,
// NaN-free doubles of every sign) round-trips field by field, written here by hand; without
// runtime calls they are neither written nor read; a truncated payload and an id wider than
// 32 bits are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "ulysses/profiler/cache_io.hpp"

namespace prof = ulysses::prof;
namespace cio = ulysses::prof::cache_io;

namespace {

prof::TraceModel timed_model() {
  prof::TraceModel m;
  prof::StepInfo s;
  s.rank = 3, s.step = 7, s.start_ns = INT64_MIN, s.end_ns = INT64_MAX;
  s.loss = -2.5, s.lr = 1e-4, s.grad_norm = 0.75, s.tokens_per_s = 12345.5, s.step_ms = 99.25;
  s.tokens = 4096, s.max_mem_bytes = int64_t{1} << 40;
  m.steps = {s, prof::StepInfo{}};
  prof::MemoryPoint p;
  p.rank = 1, p.t_ns = -5, p.allocated = 100, p.reserved = 200, p.peak = 300, p.label_id = -1, p.step = 2;
  prof::MemoryPoint q = p;
  q.label_id = INT32_MAX, q.t_ns = INT64_MAX;
  m.memory = {p, q};
  prof::MemoryCategorySample c;
  c.rank = 2, c.t_ns = 1'000'000'007, c.step = 4, c.phase = 3, c.layer = 11;
  c.c.bytes[0] = 17, c.c.bytes[1] = -1;
  m.memory_categories = {c};
  prof::PeakTensorSample t;
  t.rank = 2, t.step = 4, t.ord = 1, t.t.name = "wq.grad", t.t.category = "grads", t.t.dtype = "bf16";
  t.t.shape = "[4096, 4096]", t.t.bytes = 33554432, t.t.blocks = 2;
  m.peak_tensors = {t};
  prof::RuntimeCall r;
  r.rank = INT32_MIN, r.tid = 77, r.start_ns = 10, r.end_ns = 20, r.correlation = -3, r.external_id = 9;
  r.name_id = 5;
  m.runtime = {r};
  prof::ClockInfo k;
  k.rank = 1, k.has_start = true, k.start_offset_ns = -123, k.start_error_ns = 4, k.start_at_ns = 1000;
  k.has_close = true, k.close_offset_ns = 456, k.close_error_ns = 6, k.close_at_ns = 9000, k.applied = true;
  m.clocks = {k};
  prof::DocumentShard d;
  d.rank = 1, d.piece = 1, d.step = 2, d.sequence = 3, d.packed = 4, d.shard_begin = 5, d.shard_end = 6;
  d.document = -1, d.doc_tokens = 8, d.doc_offset = 9, d.begin = 10, d.end = 11;
  m.documents = {d};
  return m;
}

}  // namespace

TEST(CacheIo, TimedTablesRoundTripFieldByField) {
  const prof::TraceModel m = timed_model();
  cio::Out o;
  cio::put_timed_tables(o, m, true);
  cio::In in(o.b.data(), o.b.size());
  prof::TraceModel g;
  cio::get_timed_tables(in, g, true);
  EXPECT_TRUE(in.done());
  ASSERT_EQ(g.steps.size(), 2u);
  const prof::StepInfo& s = g.steps[0];
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.start_ns, INT64_MIN);
  EXPECT_EQ(s.end_ns, INT64_MAX);
  EXPECT_EQ(s.loss, -2.5);
  EXPECT_EQ(s.lr, 1e-4);
  EXPECT_EQ(s.grad_norm, 0.75);
  EXPECT_EQ(s.tokens_per_s, 12345.5);
  EXPECT_EQ(s.step_ms, 99.25);
  EXPECT_EQ(s.tokens, 4096);
  EXPECT_EQ(s.max_mem_bytes, int64_t{1} << 40);
  ASSERT_EQ(g.memory.size(), 2u);
  EXPECT_EQ(g.memory[0].t_ns, -5);
  EXPECT_EQ(g.memory[0].label_id, -1);
  EXPECT_EQ(g.memory[0].allocated, 100);
  EXPECT_EQ(g.memory[0].reserved, 200);
  EXPECT_EQ(g.memory[0].peak, 300);
  EXPECT_EQ(g.memory[0].step, 2);
  EXPECT_EQ(g.memory[1].label_id, INT32_MAX);
  EXPECT_EQ(g.memory[1].t_ns, INT64_MAX);
  ASSERT_EQ(g.memory_categories.size(), 1u);
  EXPECT_EQ(g.memory_categories[0].t_ns, 1'000'000'007);
  EXPECT_EQ(g.memory_categories[0].layer, 11);
  EXPECT_EQ(g.memory_categories[0].c.bytes[1], -1);
  ASSERT_EQ(g.peak_tensors.size(), 1u);
  EXPECT_EQ(g.peak_tensors[0].t.shape, "[4096, 4096]");
  EXPECT_EQ(g.peak_tensors[0].t.bytes, 33554432);
  ASSERT_EQ(g.runtime.size(), 1u);
  EXPECT_EQ(g.runtime[0].rank, INT32_MIN);
  EXPECT_EQ(g.runtime[0].start_ns, 10);
  EXPECT_EQ(g.runtime[0].end_ns, 20);
  EXPECT_EQ(g.runtime[0].correlation, -3);
  EXPECT_EQ(g.runtime[0].name_id, 5);
  ASSERT_EQ(g.clocks.size(), 1u);
  EXPECT_EQ(g.clocks[0].start_offset_ns, -123);
  EXPECT_EQ(g.clocks[0].close_at_ns, 9000);
  EXPECT_TRUE(g.clocks[0].has_close && g.clocks[0].applied);
  ASSERT_EQ(g.documents.size(), 1u);
  EXPECT_EQ(g.documents[0].document, -1);
  EXPECT_EQ(g.documents[0].end, 11);
}

TEST(CacheIo, TimedTablesWithoutRuntimeAndMalformedPayloads) {
  const prof::TraceModel m = timed_model();
  cio::Out without, with;
  cio::put_timed_tables(without, m, false);
  cio::put_timed_tables(with, m, true);
  EXPECT_LT(without.b.size(), with.b.size());
  {
    cio::In in(without.b.data(), without.b.size());
    prof::TraceModel g;
    cio::get_timed_tables(in, g, false);
    EXPECT_TRUE(in.done());
    EXPECT_TRUE(g.runtime.empty());
    EXPECT_EQ(g.documents.size(), 1u);
  }
  for (size_t cut : {size_t{1}, with.b.size() / 2, with.b.size() - 1}) {
    cio::In in(with.b.data(), cut);
    prof::TraceModel g;
    EXPECT_THROW(cio::get_timed_tables(in, g, true), std::runtime_error) << cut;
  }
  // A memory label past 32 bits (written by hand): corrupt, not cut to 32 bits.
  cio::Out o;
  o.u(0);  // no steps
  o.u(1);  // one memory point
  o.i(0), o.i(1), o.i(2), o.i(3), o.i(4), o.i(int64_t{1} << 33), o.i(0);
  cio::In in(o.b.data(), o.b.size());
  prof::TraceModel g;
  EXPECT_THROW(cio::get_timed_tables(in, g, true), std::runtime_error);
}
