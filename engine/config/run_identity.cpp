// Run ids and config hashes (see run_identity.hpp).
#include "run_identity.hpp"

#include <random>

#include "xxh64.hpp"

namespace ulysses {

namespace {
constexpr int kHalfDigits = static_cast<int>(kRunIdDigits / 2);  // 15 hex digits = 60 bits
std::string hex(uint64_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}
}  // namespace

std::string new_run_id() {
  std::random_device rd;  // /dev/urandom on Linux
  auto draw60 = [&] {
    uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 16) ^ (rd() & 0xffffu);
    return v & ((uint64_t{1} << 60) - 1);
  };
  return hex(draw60(), kHalfDigits) + hex(draw60(), kHalfDigits);
}

bool is_run_id(const std::string& s) {
  if (s.size() != kRunIdDigits) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void run_id_halves(const std::string& id, int64_t* hi, int64_t* lo) {
  const std::string s = is_run_id(id) ? id : std::string(kRunIdDigits, '0');
  *hi = static_cast<int64_t>(std::stoull(s.substr(0, kHalfDigits), nullptr, 16));
  *lo = static_cast<int64_t>(std::stoull(s.substr(kHalfDigits), nullptr, 16));
}

std::string run_id_from_halves(int64_t hi, int64_t lo) {
  return hex(static_cast<uint64_t>(hi), kHalfDigits) + hex(static_cast<uint64_t>(lo), kHalfDigits);
}

int64_t config_hash(const RunConfig& cfg) {
  const std::string text = cfg.to_json().dump();
  return static_cast<int64_t>(xxh64(text.data(), text.size()) >> 1);
}

}  // namespace ulysses
