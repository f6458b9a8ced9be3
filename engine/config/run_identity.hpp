// A run's identity: a random id made once per run (by ulysses-run at launch, passed to its
// workers in ULYSSES_RUN_ID; by rank 0 for workers started by hand) and a hash of the config
// that every rank must agree on. The id goes into every checkpoint file (checkpoint_layout.hpp),
// so a file of another run is named as such on resume. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "run_config.hpp"

namespace ulysses {

inline constexpr const char* kRunIdEnv = "ULYSSES_RUN_ID";
inline constexpr size_t kRunIdDigits = 30;  // 120 random bits: two 60-bit halves fit a collective's int64s

// A fresh id: kRunIdDigits lowercase hex digits from the system's random source.
std::string new_run_id();
// True for what new_run_id makes.
bool is_run_id(const std::string& s);
// The two 60-bit halves of an id and back (for an all-reduce of int64s).
void run_id_halves(const std::string& id, int64_t* hi, int64_t* lo);
std::string run_id_from_halves(int64_t hi, int64_t lo);

// XXH64 of the config as the ranks read it (RunConfig::to_json, keys sorted), 63 bits, so that
// ranks started with different configs are refused together at rendezvous.
int64_t config_hash(const RunConfig& cfg);

}  // namespace ulysses
