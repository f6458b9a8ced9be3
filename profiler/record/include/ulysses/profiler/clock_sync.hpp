// One clock for all ranks: each rank measures the offset of its trace clock to rank 0's by
// ping-pong through a key-value store (the c10d store in the engine; an in-memory one in
// tests). Round k for rank r: r reads t1, sets "ping", waits for rank 0's "pong" that
// carries rank 0's clock t0, reads t4. Rank 0 read t0 at some instant inside [t1, t4] of
// rank r's clock, so offset = (t1 + t4) / 2 - t0 is off by at most (t4 - t1) / 2. The round
// with the smallest round trip wins. offset = clock_r - clock_0; aligned time = t - offset.
// No torch, no Qt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ulysses::prof {

// Blocking key-value store: get() waits until the key is set (as c10d::Store::get does).
class ClockStore {
 public:
  virtual ~ClockStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;
};

struct ClockOffset {
  int64_t offset_ns = 0;  // this rank's clock minus rank 0's (0 on rank 0)
  int64_t error_ns = 0;   // |true offset - offset_ns| <= error_ns (half the best round trip)
  int64_t rtt_ns = 0;     // best round trip
  int32_t rounds = 0;
  int64_t measured_at_ns = 0;  // this rank's clock when measured (for drift between two syncs)
};

// Every rank of `world` calls it with the same `tag` (e.g. "start", "close"); rank 0 serves
// ranks 1..world-1 in turn and returns a zero offset. `now` is the clock being aligned
// (Tracer::now_ns when null). Throws what the store throws (e.g. a timeout).
ClockOffset sync_clock(ClockStore& store, int rank, int world, int rounds, const std::string& tag,
                       const std::function<int64_t()>& now = nullptr);

}  // namespace ulysses::prof
