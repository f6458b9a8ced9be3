// Ring steps in the trace (docs/RING.md): a real 2 x 2 (Ulysses x ring) run through
// ulysses-run, with each ring transport (p2p and all-to-all). Read from the rank files with this test's own SQL, every
// K/V (forward) and K/V + dK/dV (backward) exchange is a ring_step range with the bytes of the formula and a collective
// identity shared by the ring's two ranks; the ring's overlap with the block attention, computed here by interval
// arithmetic from those rows, equals what `ulysses-trace summary --json` reports for ring_step.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "common/sqlite_rows.hpp"
#include "cost_model.hpp"
#include "run_config.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/profiler/trace_store.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Iv = std::pair<int64_t, int64_t>;

std::vector<std::vector<int64_t>> rows(const std::string& path, const std::string& sql) {
  return ulysses::test::sql_rows(path, sql);
}

// Sorted, disjoint union of intervals.
std::vector<Iv> merged(std::vector<Iv> v) {
  std::sort(v.begin(), v.end());
  std::vector<Iv> out;
  for (const auto& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

std::vector<Iv> clipped(const std::vector<Iv>& v, int64_t lo, int64_t hi) {
  std::vector<Iv> out;
  for (const auto& i : v) {
    const int64_t a = std::max(i.first, lo), b = std::min(i.second, hi);
    if (b > a) out.emplace_back(a, b);
  }
  return out;
}

int64_t length(const std::vector<Iv>& v) {
  int64_t t = 0;
  for (const auto& i : v) t += i.second - i.first;
  return t;
}

int64_t common(const std::vector<Iv>& a, const std::vector<Iv>& b) {
  int64_t t = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) t += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return t;
}

// The loader's clock alignment as profiler/README.md states it ("One clock"): t - offset(t),
// the offset interpolated linearly between the start and close measurements of ULYSSES_CLOCK
// and held at the nearer one outside them. Rank 0 (no rows, or zero offsets) stays as it is.
struct Clock {
  bool start = false, close = false;
  int64_t start_at = 0, close_at = 0, start_off = 0, close_off = 0;
  int64_t offset(int64_t t) const {
    if (!close || (start && close_at <= start_at)) return start ? start_off : 0;
    if (!start) return close_off;
    if (t <= start_at) return start_off;
    if (t >= close_at) return close_off;
    const double f = static_cast<double>(t - start_at) / static_cast<double>(close_at - start_at);
    return start_off + static_cast<int64_t>(f * static_cast<double>(close_off - start_off));
  }
  int64_t operator()(int64_t t) const { return t - offset(t); }
};

Clock clock_of(const std::string& f) {
  Clock c;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(f.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT kind, offsetNs, measuredAt FROM ULYSSES_CLOCK", -1, &st, nullptr) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        const std::string kind = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
        if (kind == "start")
          c.start = true, c.start_off = sqlite3_column_int64(st, 1), c.start_at = sqlite3_column_int64(st, 2);
        if (kind == "close")
          c.close = true, c.close_off = sqlite3_column_int64(st, 1), c.close_at = sqlite3_column_int64(st, 2);
      }
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return c;
}

}  // namespace

namespace {

// The 2 x 2 run through ulysses-run with parallel.ring_transport = `transport`, checked as
// the tests below say.
void check_two_by_two_trace(const std::string& transport) {
  const int sp = 2, ring = 2, steps = 2;
  json cfg = ulysses::test::tiny_config(sp, steps, ULYSSES_SOURCE_DIR);
  cfg["parallel"]["ring_size"] = ring;
  cfg["parallel"]["ring_transport"] = transport;
  cfg["profile"] = {{"enabled", true}};
  const std::string scratch = "ring_trace_" + transport;
  const std::string out = ulysses::test::scratch_path(scratch, "run");
  const std::string cfg_path = ulysses::test::write_json(ulysses::test::scratch_path(scratch, "cfg.json"), cfg);
  auto r = ulysses::test::sh(
      std::string(ULYSSES_RUN_BIN) + " " + cfg_path + " --json --worker " + ULYSSES_WORKER_BIN + " --out " + out, "",
      true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ulysses::load_run_config(out + "/config.json").parallel.ring_transport, transport);

  // tiny: H 4, Hkv 2, dh 8, N 64, B 1, 2 layers. After the all-to-all a rank holds H/sp = 2
  // q heads and Hkv/sp = 1 kv head over its ring block of N/ring = 32 tokens; a K/V exchange
  // sends k and v stacked, a dK/dV exchange their fp32 gradients: 2 x 1 x 32 x 8 x 4 bytes.
  const int64_t want_bytes = 2 * 1 * (64 / ring) * 8 * 4;
  int64_t hand_comm = 0, hand_overlap = 0;
  std::map<std::pair<int64_t, int64_t>, std::set<int>> members;  // (pg, seq) -> ranks
  for (int rank = 0; rank < sp * ring; ++rank) {
    const std::string f = out + "/trace/rank" + std::to_string(rank) + ".sqlite";
    ASSERT_TRUE(fs::exists(f)) << f;
    const auto ph = rows(f, "SELECT id FROM ULYSSES_PHASES WHERE name = 'ring_step'");
    ASSERT_EQ(ph.size(), 1u) << "no ring_step phase in " << f;
    const auto at = rows(f, "SELECT id FROM ULYSSES_PHASES WHERE name = 'attention'");
    ASSERT_EQ(at.size(), 1u);
    const std::string ring_id = std::to_string(ph[0][0]), attn_id = std::to_string(at[0][0]);
    const Clock aligned = clock_of(f);
    // ring steps: start, end, step, direction, layer, bytes sent, bytes received, pg, seq
    const auto rs = rows(f,
                         "SELECT start, end, ulyssesStep, ulyssesDirection, ulyssesLayer, ulyssesBytesSent, "
                         "ulyssesBytesRecv, ulyssesPgId, ulyssesSeq FROM NVTX_EVENTS WHERE category = " +
                             ring_id + " AND ulyssesStep IS NOT NULL");
    // Per step and layer: 1 forward exchange (ring - 1), 3 backward ones (ring - 1 K/V, ring dK/dV).
    std::map<std::tuple<int64_t, int64_t, int64_t>, int> count;  // (step, layer, direction)
    std::vector<Iv> ring_iv;
    for (const auto& x : rs) {
      EXPECT_LE(x[0], x[1]);
      EXPECT_EQ(x[5], want_bytes);
      EXPECT_EQ(x[6], want_bytes);
      EXPECT_GE(x[7], 1);
      EXPECT_GE(x[8], 0);
      ++count[{x[2], x[4], x[3]}];
      members[{x[7], x[8]}].insert(rank);
      ring_iv.emplace_back(aligned(x[0]), aligned(x[1]));
    }
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t l = 0; l < 2; ++l) {
        EXPECT_EQ((count[{s, l, 1}]), ring - 1) << "rank " << rank << " step " << s << " layer " << l << " fwd";
        EXPECT_EQ((count[{s, l, 2}]), 2 * ring - 1) << "rank " << rank << " step " << s << " layer " << l << " bwd";
      }
    // Block attention: the attention ranges with no attention range inside them on their
    // thread (the outer range of a chunk holds the ring's blocks and the waits between them).
    const auto blocks = rows(f, "SELECT a.start, a.end FROM NVTX_EVENTS a WHERE a.category = " + attn_id +
                                    " AND a.ulyssesStep IS NOT NULL AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS c "
                                    "WHERE c.category = " +
                                    attn_id +
                                    " AND c.globalTid = a.globalTid AND c.rowid <> a.rowid AND c.start >= a.start "
                                    "AND c.end <= a.end)");
    ASSERT_FALSE(blocks.empty());
    std::vector<Iv> block_iv;
    for (const auto& b : blocks) block_iv.emplace_back(aligned(b[0]), aligned(b[1]));
    const auto ring_m = merged(ring_iv), block_m = merged(block_iv);
    for (const auto& w : rows(f, "SELECT start, end FROM ULYSSES_STEPS")) {
      const auto rc = clipped(ring_m, aligned(w[0]), aligned(w[1]));
      hand_comm += length(rc);
      hand_overlap += common(rc, clipped(block_m, aligned(w[0]), aligned(w[1])));
    }
  }
  // Every exchange is one collective of its ring: the same (pg, seq) on both of its ranks,
  // which are sp apart (rank = ring_rank x sp + sp_rank).
  ASSERT_FALSE(members.empty());
  for (const auto& [id, ranks] : members) {
    ASSERT_EQ(ranks.size(), 2u) << "pg " << id.first << " seq " << id.second;
    EXPECT_EQ(*ranks.rbegin() - *ranks.begin(), sp) << "pg " << id.first << " seq " << id.second;
  }
  ASSERT_GT(hand_comm, 0);

  auto s = ulysses::test::sh(std::string(ULYSSES_TRACE_BIN) + " summary --json " + out);
  ASSERT_EQ(s.code, 0) << s.out;
  const json j = json::parse(s.out);
  const json* row = nullptr;
  for (const auto& c : j["comm_phases"])
    if (c["phase"] == "ring_step") row = &c;
  ASSERT_NE(row, nullptr) << j["comm_phases"].dump();
  EXPECT_EQ((*row)["comm_ns"].get<int64_t>(), hand_comm);
  EXPECT_EQ((*row)["overlap_ns"].get<int64_t>(), hand_overlap);
  EXPECT_EQ((*row)["ranges"].get<int64_t>(), int64_t(sp * ring * steps * 2 * (ring - 1 + 2 * ring - 1)));
  EXPECT_EQ((*row)["bytes_sent"].get<int64_t>(), (*row)["ranges"].get<int64_t>() * want_bytes);
  // Waiting for a block is not compute: some ring time is exposed (2 ranks per core here).
  EXPECT_LT(hand_overlap, hand_comm);
  std::printf("%s: ring_step over %d ranks x %d steps: comm %.3f ms, overlapped by block attention %.3f ms (%.1f%%)\n",
              transport.c_str(), sp * ring, steps, hand_comm / 1e6, hand_overlap / 1e6,
              100.0 * hand_overlap / hand_comm);
  fs::remove_all(fs::path(out).parent_path());
}

}  // namespace

// The default transport on Gloo (p2p: a send and a receive per exchange).
TEST(RingTrace, TwoByTwoRunTracesEveryRingStepAndTheSummaryCountsItsOverlap) { check_two_by_two_trace("p2p"); }

// The all-to-all transport (NCCL's, here on Gloo): each exchange is one collective of the ring
// group, and the trace still pairs it by (pg, seq) on the ring's two ranks, with the same
// bytes, counts and overlap arithmetic.
TEST(RingTrace, TwoByTwoAllToAllTransportPairsEveryRingStepByPgAndSeq) { check_two_by_two_trace("alltoall"); }

// The cost model's communication for ring runs (what --plan and the launcher estimate) against
// what traced runs sent, case by case: the ring's K/V and dK/dV bytes per rank and step
// (summary's comm_phases), the all-to-alls over N/(sp x ring) local tokens and the all-reduce
// over sp x ring ranks.
TEST(RingTrace, CostModelRingBytesEqualTheTracedRuns) {
  struct Case {
    const char* what;
    int sp, ring;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"2 x 2", 2, 2, {}},
      {"1 x 4, head_chunks 2", 1, 4, {"parallel.head_chunks=2"}},
      {"2 x 2 bf16", 2, 2, {"train.dtype=bfloat16"}},
      {"2 x 2 checkpointing", 2, 2, {"train.activation_checkpointing=layer"}},
      {"1 x 2, 2 q heads a kv head, head_chunks 2", 1, 2, {"model.num_key_value_heads=1", "parallel.head_chunks=2"}},
  };
  int i = 0;
  for (const auto& c : cases) {
    json cfg = ulysses::test::tiny_config(c.sp, 2, ULYSSES_SOURCE_DIR);
    cfg["parallel"]["ring_size"] = c.ring;
    cfg["profile"] = {{"enabled", true}};
    const std::string out = ulysses::test::scratch_path("ring_cost", "run" + std::to_string(i));
    const std::string cfg_path =
        ulysses::test::write_json(ulysses::test::scratch_path("ring_cost", "cfg" + std::to_string(i++) + ".json"), cfg);
    std::string cmd =
        std::string(ULYSSES_RUN_BIN) + " " + cfg_path + " --worker " + ULYSSES_WORKER_BIN + " --out " + out;
    for (const auto& s : c.sets) cmd += " --set " + s;
    const auto r = ulysses::test::sh(cmd, "", true);
    ASSERT_EQ(r.code, 0) << c.what << "\n" << r.out;
    const ulysses::RunConfig rc = ulysses::load_run_config(out + "/config.json");
    ulysses::cost::CostOptions o;
    o.math_attention = 0;
    const auto est = ulysses::cost::estimate(rc, o);
    const auto t = ulysses::prof::load_trace(out);
    const auto s = ulysses::prof::analyze(t);
    int64_t ring_bytes = -1;
    for (const auto& row : s.comm_phases)
      if (row.phase == ulysses::prof::Phase::RingStep) ring_bytes = row.bytes_sent;
    const int64_t rank_steps = int64_t(s.ranks.size()) * 2;
    ASSERT_EQ(s.ranks.size(), size_t(c.sp * c.ring)) << c.what;
    ASSERT_GT(ring_bytes, 0) << c.what;
    EXPECT_EQ(est.ring_bytes_per_step * rank_steps, ring_bytes) << c.what;
    EXPECT_EQ(est.a2a_bytes_per_step, s.headline.a2a_bytes_per_step) << c.what;
    EXPECT_EQ(est.allreduce_bytes_per_step, s.headline.allreduce_bytes_per_step) << c.what;
    EXPECT_EQ(est.local_tokens, 64 / (c.sp * c.ring)) << c.what;
  }
  fs::remove_all(fs::path(ulysses::test::scratch_path("ring_cost", "x")).parent_path());
}
