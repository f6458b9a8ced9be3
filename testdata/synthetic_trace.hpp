// Test data library (ulysses::testdata): generated in-memory TraceModels shaped like a Ulysses run (per rank: main
// thread phases, comm lane, one lane per head chunk, CUDA streams with kernels, memory samples), for tests, the
// benchmark and demos. Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <memory>

#include "ulysses/profiler/trace_model.hpp"

namespace ulysses::testdata {

struct SyntheticOptions {
  int32_t ranks = 8;  // = sp_size (dp_size 1)
  int32_t heads = 32;
  int32_t layers = 16;
  int32_t head_chunks = 4;  // per rank; head lanes per rank
  int32_t steps = 2;
  bool gpu = true;  // kernels on two CUDA streams (compute, nccl)
  int32_t kernels_per_range = 3;
  int64_t target_ranges = 0;  // > 0: steps chosen to reach about this many ranges
  uint64_t seed = 1;
};

std::shared_ptr<prof::TraceModel> make_synthetic_trace(const SyntheticOptions& o);

// `ranks` ranks x `lanes_per_rank` lanes, each with n ranges of `width_ns` every `period_ns`
// starting at t = 0 (bursts: `burst` ranges back to back, then `burst_gap_ns` of nothing
// before the next burst; burst = 0 means no bursts).
struct UniformOptions {
  int32_t ranks = 2, lanes_per_rank = 2;
  int64_t n = 1000, width_ns = 1000, period_ns = 2000;
  int64_t burst = 0, burst_gap_ns = 0;
};
std::shared_ptr<prof::TraceModel> make_uniform_trace(const UniformOptions& o);

}  // namespace ulysses::testdata
