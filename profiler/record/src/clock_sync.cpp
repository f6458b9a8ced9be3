// Ping-pong clock offset measurement through a blocking key-value store (see clock_sync.hpp).
#include "ulysses/profiler/clock_sync.hpp"

#include <limits>
#include <stdexcept>

#include "ulysses/profiler/tracer.hpp"

namespace ulysses::prof {

ClockOffset sync_clock(ClockStore& store, int rank, int world, int rounds, const std::string& tag,
                       const std::function<int64_t()>& now_fn) {
  auto now = [&] { return now_fn ? now_fn() : Tracer::now_ns(); };
  if (rounds < 1) throw std::invalid_argument("sync_clock: rounds must be at least 1");
  ClockOffset out;
  out.rounds = rounds;
  auto key = [&](int r, int k, const char* what) {
    return "ulysses/clock/" + tag + "/" + std::to_string(r) + "/" + std::to_string(k) + "/" + what;
  };
  if (rank == 0) {
    for (int r = 1; r < world; ++r) {
      for (int k = 0; k < rounds; ++k) {
        store.get(key(r, k, "ping"));
        store.set(key(r, k, "pong"), std::to_string(now()));
      }
    }
    out.measured_at_ns = now();
    return out;
  }
  int64_t best_rtt = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < rounds; ++k) {
    const int64_t t1 = now();
    store.set(key(rank, k, "ping"), "1");
    const std::string v = store.get(key(rank, k, "pong"));
    const int64_t t4 = now();
    const int64_t t0 = std::stoll(v);
    if (t4 - t1 < best_rtt) {
      best_rtt = t4 - t1;
      out.rtt_ns = best_rtt;
      // (t1 + t4) / 2 without overflow
      out.offset_ns = t1 + (t4 - t1) / 2 - t0;
      out.error_ns = (t4 - t1 + 1) / 2;
      out.measured_at_ns = t1 + (t4 - t1) / 2;
    }
  }
  return out;
}

}  // namespace ulysses::prof
